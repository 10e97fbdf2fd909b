/*
 * watch-latency: how long a write made through one node's API takes to
 * reach a watch on another node (the store's change log and LISTEN/NOTIFY
 * in between), next to the same write's event on the node that took it.
 *
 *   watch-latency API_WRITE API_FAR TOKEN COUNT
 *
 * Watches FunctionConfigs of "default" on API_WRITE and API_FAR, then PUTs
 * COUNT FunctionConfigs (wl-0 ...) through API_WRITE one at a time, each
 * after both events of the previous one arrived. Prints one line:
 *   watch latency over COUNT writes, ms p50/p99: write answered A/B, event on
 *   the writing node C/D, event on the far node E/F
 * (each from the moment the PUT was sent) and exits 1 when an event did not
 * come within 5 s.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_COUNT 100000

typedef struct watcher {
    pthread_t th;
    char url[512];
    struct curl_slist *headers;
    char line[65536];
    size_t len;
    atomic_int started; /* the first line (the listing's BOOKMARK) came */
    _Atomic double *arrived; /* per write, ms; 0 while not seen */
} watcher;

static atomic_int stopping;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One event line: the first ADDED of wl-N stamps arrived[N]. */
static void on_line(watcher *w, const char *line)
{
    atomic_store(&w->started, 1);
    const char *name = strstr(line, "\"name\":\"wl-");
    if (!name || !strstr(line, "\"type\":\"ADDED\""))
        return;
    long n = strtol(name + strlen("\"name\":\"wl-"), NULL, 10);
    if (n >= 0 && n < MAX_COUNT && atomic_load(&w->arrived[n]) == 0)
        atomic_store(&w->arrived[n], now_ms());
}

static size_t on_data(char *p, size_t s, size_t n, void *u)
{
    watcher *w = u;
    for (size_t i = 0; i < s * n; i++) {
        if (p[i] == '\n') {
            w->line[w->len] = '\0';
            on_line(w, w->line);
            w->len = 0;
        } else if (w->len + 1 < sizeof(w->line)) {
            w->line[w->len++] = p[i];
        }
    }
    return s * n;
}

static int on_progress(void *u, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)u, (void)a, (void)b, (void)c, (void)d;
    return atomic_load(&stopping); /* non-zero aborts the transfer */
}

static void *watch_run(void *arg)
{
    watcher *w = arg;
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    curl_easy_setopt(c, CURLOPT_URL, w->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, w->headers);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_perform(c);
    curl_easy_cleanup(c);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, long n, double p)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    long i = (long)(p * (double)(n - 1) + 0.5);
    return v[i];
}

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    (void)p, (void)u;
    return s * n;
}

int main(int argc, char **argv)
{
    if (argc != 5 || atol(argv[4]) <= 0 || atol(argv[4]) > MAX_COUNT) {
        fprintf(stderr, "usage: watch-latency API_WRITE API_FAR TOKEN COUNT (at most %d)\n",
                MAX_COUNT);
        return 2;
    }
    long count = atol(argv[4]);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char auth[512];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", argv[3]);
    struct curl_slist *headers = curl_slist_append(NULL, auth);
    struct curl_slist *put_headers = curl_slist_append(curl_slist_append(NULL, auth),
                                                       "Content-Type: application/json");
    double *sent = calloc((size_t)count, sizeof(double));
    double *acked = calloc((size_t)count, sizeof(double));
    static watcher w[2];
    for (int i = 0; i < 2; i++) {
        snprintf(w[i].url, sizeof(w[i].url),
                 "%s/apis/funcd.dev/v1/namespaces/default/functionconfigs?watch=true",
                 argv[1 + i]);
        w[i].headers = headers;
        w[i].arrived = calloc((size_t)count, sizeof(double));
        if (!w[i].arrived || pthread_create(&w[i].th, NULL, watch_run, &w[i]) != 0)
            return 1;
    }
    for (double t0 = now_ms(); !(w[0].started && w[1].started);) {
        if (now_ms() - t0 > 10000) {
            fprintf(stderr, "watch-latency: the watches did not start\n");
            return 1;
        }
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    CURL *c = curl_easy_init();
    int lost = 0;
    for (long i = 0; c && i < count && !lost; i++) {
        char url[512], body[512];
        snprintf(url, sizeof(url), "%s/apis/funcd.dev/v1/namespaces/default/functionconfigs/wl-%ld",
                 argv[1], i);
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"FunctionConfig\",\"metadata\":"
                 "{\"name\":\"wl-%ld\"},\"spec\":{\"image\":\"x\",\"binaryExecutor\":{\"path\":"
                 "\"x\"}}}",
                 i);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, put_headers);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
        sent[i] = now_ms();
        long status = 0;
        if (curl_easy_perform(c) != CURLE_OK ||
            curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status) != CURLE_OK || status != 201) {
            fprintf(stderr, "watch-latency: PUT wl-%ld: HTTP %ld\n", i, status);
            lost = 1;
            break;
        }
        acked[i] = now_ms();
        while (!(atomic_load(&w[0].arrived[i]) && atomic_load(&w[1].arrived[i]))) {
            if (now_ms() - sent[i] > 5000) {
                fprintf(stderr, "watch-latency: no event for wl-%ld within 5 s\n", i);
                lost = 1;
                break;
            }
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    atomic_store(&stopping, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(w[i].th, NULL);
    if (!lost) {
        double *d[3];
        for (int k = 0; k < 3; k++)
            d[k] = calloc((size_t)count, sizeof(double));
        for (long i = 0; i < count; i++) {
            d[0][i] = acked[i] - sent[i];
            d[1][i] = w[0].arrived[i] - sent[i];
            d[2][i] = w[1].arrived[i] - sent[i];
        }
        printf("watch latency over %ld writes, ms p50/p99: write answered %.2f/%.2f, event on "
               "the writing node %.2f/%.2f, event on the far node %.2f/%.2f\n",
               count, pct(d[0], count, 0.5), pct(d[0], count, 0.99), pct(d[1], count, 0.5),
               pct(d[1], count, 0.99), pct(d[2], count, 0.5), pct(d[2], count, 0.99));
        for (int k = 0; k < 3; k++)
            free(d[k]);
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(headers);
    curl_slist_free_all(put_headers);
    for (int i = 0; i < 2; i++)
        free((void *)w[i].arrived);
    free(sent);
    free(acked);
    curl_global_cleanup();
    return lost;
}
