/*
 * Embeds an in-memory funcd platform in a host program, creates a Function
 * through the control-plane API (real HTTP, via libcurl) and prints its
 * status once the controller has written it.
 *
 *   ./build/examples/embed
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <funcd/funcd.h>

typedef struct body {
    char *data;
    size_t len;
} body;

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
    body *b = arg;
    char *grown = realloc(b->data, b->len + size * n + 1);
    if (!grown)
        return 0;
    memcpy(grown + b->len, p, size * n);
    b->data = grown;
    b->len += size * n;
    b->data[b->len] = '\0';
    return size * n;
}

/* One API call; returns the HTTP status and the body in *out. */
static long call(CURL *c, const char *method, const char *url, const char *json, body *out)
{
    struct curl_slist *h = curl_slist_append(NULL, "Authorization: Bearer funcd-dev-token");
    h = curl_slist_append(h, "Content-Type: application/json");
    long code = 0;
    out->len = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, json);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_slist_free_all(h);
    return code;
}

int main(void)
{
    /* The embedding program is the operator: it lets the developer token
     * (the in-memory preset's funcd-dev-token) run code from directories
     * under its working directory (docs/security.md, "Host paths"). */
    char cwd[1024];
    if (!getcwd(cwd, sizeof(cwd))) {
        perror("embed: getcwd");
        return 1;
    }
    funcd_platform *p;
    if (funcd_platform_new(&p, funcd_in_memory(), funcd_with_source_root(cwd)) < 0) {
        fprintf(stderr, "embed: %s\n", funcd_error_last()->message);
        return 1;
    }
    if (funcd_platform_start(p) < 0) { /* serves on a background thread */
        fprintf(stderr, "embed: %s\n", funcd_error_last()->message);
        funcd_platform_free(p);
        return 1;
    }
    printf("funcd API on http://%s, data plane on http://%s\n", funcd_platform_addr(p),
           funcd_platform_data_plane_addr(p));

    char url[256];
    snprintf(url, sizeof(url), "http://%s/apis/funcd.dev/v1/namespaces/default/functions",
             funcd_platform_addr(p));
    char fn[1400];
    snprintf(fn, sizeof(fn),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\","
             "\"metadata\":{\"name\":\"hello\"},"
             "\"spec\":{\"runtime\":\"python3\",\"handler\":\"main.handler\","
             "\"source\":{\"path\":\"%s\"}}}",
             cwd);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    body b = {0};
    long code = call(c, "POST", url, fn, &b);
    printf("POST functions -> %ld\n", code);

    /* The controller writes status asynchronously: poll until it has. */
    strcat(url, "/hello");
    for (int i = 0; i < 100; i++) {
        code = call(c, "GET", url, NULL, &b);
        if (code == 200 && strstr(b.data, "\"observedGeneration\""))
            break;
        usleep(20 * 1000);
    }
    printf("GET functions/hello -> %ld\n%s\n", code, b.data ? b.data : "");

    free(b.data);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    funcd_platform_free(p);
    return code == 200 ? 0 : 1;
}
