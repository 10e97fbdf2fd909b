/*
 * create-bench: create objects through funcd's API as fast as it takes them,
 * over CONC keep-alive connections (libcurl multi), and print the rate.
 *
 *   create-bench URL TOKEN KIND COUNT CONC PREFIX [SOURCE_DIR]
 *
 * KIND is "secrets" or "functions" (native Functions whose source.path is
 * SOURCE_DIR). Objects are POSTed to URL/apis/funcd.dev/v1/namespaces/
 * default/KIND as PREFIX-0 ... PREFIX-(COUNT-1). Prints one line:
 *   created COUNT KIND in MS ms: RATE/s (ERRORS errors)
 * and exits 1 if any create did not get 201.
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_CONC 256

typedef struct slot {
    CURL *easy;
    char body[1024];
    long index;
} slot;

typedef struct bench {
    const char *kind, *prefix, *source;
    char url[512];
    struct curl_slist *headers;
    long next, count, done, errors;
} bench;

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    (void)p;
    (void)u;
    return s * n;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void fill_body(const bench *b, slot *s)
{
    if (strcmp(b->kind, "secrets") == 0)
        snprintf(s->body, sizeof(s->body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                 "\"%s-%ld\"},\"type\":\"Opaque\",\"stringData\":{\"v\":\"value %ld\"}}",
                 b->prefix, s->index, s->index);
    else
        snprintf(s->body, sizeof(s->body),
                 "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                 "\"%s-%ld\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\","
                 "\"source\":{\"path\":\"%s\"}}}",
                 b->prefix, s->index, b->source);
}

/* Queues the next create on `s`; 0 when there is none left. */
static int submit(CURLM *multi, bench *b, slot *s)
{
    if (b->next >= b->count)
        return 0;
    s->index = b->next++;
    fill_body(b, s);
    curl_easy_setopt(s->easy, CURLOPT_URL, b->url);
    curl_easy_setopt(s->easy, CURLOPT_HTTPHEADER, b->headers);
    curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, s->body);
    curl_easy_setopt(s->easy, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(s->easy, CURLOPT_PRIVATE, s);
    curl_multi_add_handle(multi, s->easy);
    return 1;
}

static void reap(CURLM *multi, bench *b)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        slot *s;
        long code = 0;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&s);
        curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE, &code);
        if (m->data.result != CURLE_OK || code != 201)
            b->errors++;
        b->done++;
        curl_multi_remove_handle(multi, m->easy_handle);
        submit(multi, b, s);
    }
}

int main(int argc, char **argv)
{
    if (argc < 7) {
        fprintf(stderr, "usage: create-bench URL TOKEN KIND COUNT CONC PREFIX [SOURCE_DIR]\n");
        return 2;
    }
    bench b = {.kind = argv[3], .prefix = argv[6], .source = argc > 7 ? argv[7] : "/srv/fn"};
    b.count = strtol(argv[4], NULL, 10);
    long conc = strtol(argv[5], NULL, 10);
    if (conc < 1 || conc > MAX_CONC || b.count < 1)
        return 2;
    snprintf(b.url, sizeof(b.url), "%s/apis/funcd.dev/v1/namespaces/default/%s", argv[1], b.kind);
    char auth[256];
    snprintf(auth, sizeof(auth), "Authorization: Bearer %s", argv[2]);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    b.headers = curl_slist_append(NULL, auth);
    b.headers = curl_slist_append(b.headers, "Content-Type: application/json");
    b.headers = curl_slist_append(b.headers, "Expect:");
    CURLM *multi = curl_multi_init();
    curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, conc);
    static slot slots[MAX_CONC];
    double t0 = now_ms();
    for (long i = 0; i < conc; i++) {
        slots[i].easy = curl_easy_init();
        submit(multi, &b, &slots[i]);
    }
    int running = 1;
    while (b.done < b.count && running >= 0) {
        curl_multi_perform(multi, &running);
        reap(multi, &b);
        if (b.done < b.count)
            curl_multi_poll(multi, NULL, 0, 100, NULL);
    }
    double ms = now_ms() - t0;
    printf("created %ld %s in %.0f ms: %.0f/s (%ld errors)\n", b.count, b.kind, ms,
           b.count * 1000.0 / ms, b.errors);
    for (long i = 0; i < conc; i++)
        curl_easy_cleanup(slots[i].easy);
    curl_multi_cleanup(multi);
    curl_slist_free_all(b.headers);
    curl_global_cleanup();
    return b.errors ? 1 : 0;
}
