/* Constant load for the cluster tests (load.h). */
#include "load.h"

#include <stdio.h>
#include <string.h>

#include "../e2e/client.h"

void cl_load_add(cl_load *l, const char *method, const char *url)
{
    if (l->n >= CL_LOAD_THREADS)
        return;
    cl_load_thread *t = &l->t[l->n];
    t->load = l;
    t->idx = l->n++;
    t->method = method;
    snprintf(t->url, sizeof(t->url), "%s", url);
}

static void *run(void *arg)
{
    cl_load_thread *t = arg;
    /* The whole URL is the client's base; requests add nothing to it. */
    e2e_http *h = e2e_http_new(t->url);
    e2e_resp r = E2E_RESP_INIT;
    int post = strcmp(t->method, "POST") == 0;
    for (long seq = 0; h && !atomic_load(&t->load->stop); seq++) {
        char id[32], hdr[48];
        snprintf(id, sizeof(id), "%d-%ld", t->idx, seq);
        snprintf(hdr, sizeof(hdr), "X-Req: %s", id);
        const char *headers[] = {hdr, NULL};
        int64_t start = e2e_now_ms();
        long st = e2e_http_send(h, t->method, "", NULL, headers, post ? "payload" : NULL,
                                post ? 7 : 0, &r);
        if (st == 200) {
            atomic_fetch_add(&t->ok, 1);
            continue;
        }
        atomic_fetch_add(&t->failed, 1);
        if (t->nfails < CL_LOAD_MAX_FAILS) {
            cl_failure *f = &t->fails[t->nfails++];
            snprintf(f->id, sizeof(f->id), "%s", id);
            f->start = start;
            f->end = e2e_now_ms();
            f->status = st;
            snprintf(f->body, sizeof(f->body), "%s", r.body ? r.body : "");
        }
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

int cl_load_start(cl_load *l)
{
    for (int i = 0; i < l->n; i++)
        if (pthread_create(&l->t[i].th, NULL, run, &l->t[i]) != 0) {
            atomic_store(&l->stop, 1);
            for (int j = 0; j < i; j++)
                pthread_join(l->t[j].th, NULL);
            l->n = 0;
            return -1;
        }
    l->started = 1;
    return 0;
}

long cl_load_ok(cl_load *l)
{
    long n = 0;
    for (int i = 0; i < l->n; i++)
        n += atomic_load(&l->t[i].ok);
    return n;
}

long cl_load_failed(cl_load *l)
{
    long n = 0;
    for (int i = 0; i < l->n; i++)
        n += atomic_load(&l->t[i].failed);
    return n;
}

void cl_load_stop(cl_load *l)
{
    atomic_store(&l->stop, 1);
    for (int i = 0; l->started && i < l->n; i++)
        pthread_join(l->t[i].th, NULL);
    l->started = 0;
}
