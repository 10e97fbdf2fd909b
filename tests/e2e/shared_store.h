/*
 * Tests: two platforms on one store (as two nodes of a cluster share one
 * database): two views of one in-memory store, each freed by its platform.
 */
#ifndef FUNCD_TESTS_E2E_SHARED_STORE_H
#define FUNCD_TESTS_E2E_SHARED_STORE_H

#include <stdatomic.h>
#include <stdlib.h>

#include "funcd/funcd.h"
#include "funcd/sys/store.h"

/* Each platform frees the store it was given: this view of the shared one
 * lets go of it with the last. */
typedef struct shared {
    funcd_store base;
    funcd_store *inner;
    atomic_int *refs;
} shared;

#define INNER(s) (((shared *)(s))->inner)

static int sh_get(funcd_store *s, const char *k, funcd_store_value *o)
{
    return INNER(s)->get(INNER(s), k, o);
}
static int sh_put(funcd_store *s, const char *k, const void *v, size_t n, uint64_t x, uint64_t *r)
{
    return INNER(s)->put(INNER(s), k, v, n, x, r);
}
static int sh_del(funcd_store *s, const char *k, uint64_t x, uint64_t *r)
{
    return INNER(s)->del(INNER(s), k, x, r);
}
static int sh_list(funcd_store *s, const char *p, funcd_store_list_cb cb, void *pl, uint64_t *r)
{
    return INNER(s)->list(INNER(s), p, cb, pl, r);
}
static int sh_watch(funcd_store *s, const char *p, uint64_t after, funcd_store_watch_cb cb,
                    void *pl, funcd_store_watch **out)
{
    return INNER(s)->watch(INNER(s), p, after, cb, pl, out);
}
static void sh_unwatch(funcd_store *s, funcd_store_watch *w)
{
    INNER(s)->unwatch(INNER(s), w);
}
static uint64_t sh_revision(funcd_store *s)
{
    return INNER(s)->revision(INNER(s));
}
static void sh_free(funcd_store *s)
{
    shared *v = (shared *)s;
    if (atomic_fetch_sub(v->refs, 1) == 1) {
        v->inner->free(v->inner);
        free(v->refs);
    }
    free(v);
}

/* Two views of one new memory store. */
static int shared_pair(funcd_store **a, funcd_store **b)
{
    funcd_store *inner = NULL;
    shared *va = calloc(1, sizeof(*va)), *vb = calloc(1, sizeof(*vb));
    atomic_int *refs = malloc(sizeof(*refs));
    if (!va || !vb || !refs || funcd_store_memory_new(&inner, 0) < 0) {
        free(va);
        free(vb);
        free(refs);
        return -1;
    }
    atomic_init(refs, 2);
    funcd_store base = {FUNCD_STORE_VERSION, "shared-memory", sh_get, sh_put, sh_del,
                        sh_list, sh_watch, sh_unwatch, sh_revision, sh_free};
    va->base = vb->base = base;
    va->inner = vb->inner = inner;
    va->refs = vb->refs = refs;
    *a = &va->base;
    *b = &vb->base;
    return 0;
}

#endif
