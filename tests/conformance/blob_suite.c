/* The blob conformance suite: see blob_suite.h. */
#include "blob_suite.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "conformance.h"
#include "port/blob.h"

#define TO_END FUNCD_BLOB_TO_END

static int put_str(funcd_blob *b, const char *key, const char *data)
{
    return b->put(b, key, data, strlen(data));
}

/* 0 if get(key, offset, length) returns exactly want; else fills why. */
static int get_differs(funcd_blob *b, const char *key, uint64_t offset, uint64_t length,
                       const void *want, size_t want_len, char *why, size_t why_len)
{
    void *data = NULL;
    size_t len = 12345;
    int rc = b->get(b, key, offset, length, &data, &len);
    if (rc != 0)
        snprintf(why, why_len, "returned %s (%s)", funcd_error_name(rc),
                 funcd_error_last()->message);
    else if (!data)
        snprintf(why, why_len, "returned NULL data");
    else if (len != want_len)
        snprintf(why, why_len, "returned %zu bytes, expected %zu", len, want_len);
    else if (want_len && memcmp(data, want, want_len) != 0)
        snprintf(why, why_len, "returned the wrong bytes");
    else
        why[0] = '\0';
    free(data);
    return why[0] != '\0';
}

#define EXPECT_GET(key, offset, length, want, want_len)                                            \
    do {                                                                                           \
        char why_[256];                                                                            \
        if (get_differs(b, key, offset, length, want, want_len, why_, sizeof(why_))) {             \
            conf_fail(cc, __FILE__, __LINE__, "get(\"%s\", %s, %s) %s", key, #offset, #length,     \
                      why_);                                                                       \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

static void case_put_get(conf_case *cc, funcd_blob *b)
{
    funcd_blob_stat st = {0, 0};
    int64_t before = conf_wall_ms();
    EXPECT_OK(put_str(b, "obj/1", "hello"));
    int64_t after = conf_wall_ms();
    EXPECT_GET("obj/1", 0, TO_END, "hello", 5);
    EXPECT_GET("obj/1", 0, 5, "hello", 5);
    EXPECT_OK(b->stat(b, "obj/1", &st));
    EXPECT_INT(st.size, 5);
    /* Slack for drivers whose clock is coarser than a millisecond (files). */
    EXPECT(st.mtime_ms >= before - 2000 && st.mtime_ms <= after + 2000);
    EXPECT_OK(put_str(b, "sha256:0123abcd", "content addressed"));
    EXPECT_GET("sha256:0123abcd", 0, TO_END, "content addressed", 17);
done:
    return;
}

static void case_ranges(conf_case *cc, funcd_blob *b)
{
    EXPECT_OK(put_str(b, "r", "0123456789"));
    EXPECT_GET("r", 0, 3, "012", 3);
    EXPECT_GET("r", 3, 4, "3456", 4);
    EXPECT_GET("r", 7, 100, "789", 3);
    EXPECT_GET("r", 7, TO_END, "789", 3);
    EXPECT_GET("r", 5, UINT64_MAX - 1, "56789", 5); /* offset + length overflows */
    EXPECT_GET("r", 9, 1, "9", 1);
    EXPECT_GET("r", 4, 0, "", 0);
    EXPECT_GET("r", 10, 5, "", 0); /* offset == size: empty, not an error */
    EXPECT_GET("r", 10, TO_END, "", 0);
    void *data = NULL;
    size_t len = 0;
    EXPECT_RC(b->get(b, "r", 11, 1, &data, &len), FUNCD_ERANGE);
    EXPECT_RC(b->get(b, "r", UINT64_MAX, TO_END, &data, &len), FUNCD_ERANGE);
    EXPECT_INT(funcd_error_last()->code, FUNCD_ERANGE);
done:
    return;
}

static void case_missing(conf_case *cc, funcd_blob *b)
{
    void *data = NULL;
    size_t len = 0;
    funcd_blob_stat st;
    EXPECT_RC(b->get(b, "no/such", 0, TO_END, &data, &len), FUNCD_ENOTFOUND);
    EXPECT(strstr(funcd_error_last()->message, "no/such") != NULL);
    EXPECT_RC(b->stat(b, "no/such", &st), FUNCD_ENOTFOUND);
    EXPECT_RC(b->del(b, "no/such"), FUNCD_ENOTFOUND);
    EXPECT_OK(put_str(b, "no/suchx", "1"));
    EXPECT_RC(b->get(b, "no/such", 0, TO_END, &data, &len), FUNCD_ENOTFOUND);
done:
    free(data);
}

static void case_overwrite(conf_case *cc, funcd_blob *b)
{
    funcd_blob_stat st = {0, 0};
    EXPECT_OK(put_str(b, "ow", "a longer first version"));
    EXPECT_OK(put_str(b, "ow", "short"));
    EXPECT_GET("ow", 0, TO_END, "short", 5);
    EXPECT_OK(b->stat(b, "ow", &st));
    EXPECT_INT(st.size, 5);
    EXPECT_OK(put_str(b, "ow", "now it is longer again"));
    EXPECT_GET("ow", 0, TO_END, "now it is longer again", 22);
    EXPECT_OK(b->stat(b, "ow", &st));
    EXPECT_INT(st.size, 22);
done:
    return;
}

static void case_zero_length(conf_case *cc, funcd_blob *b)
{
    funcd_blob_stat st = {99, 0};
    void *data = NULL;
    size_t len = 0;
    EXPECT_OK(b->put(b, "empty", "", 0));
    EXPECT_GET("empty", 0, TO_END, "", 0);
    EXPECT_OK(b->stat(b, "empty", &st));
    EXPECT_INT(st.size, 0);
    EXPECT_RC(b->get(b, "empty", 1, TO_END, &data, &len), FUNCD_ERANGE);
    EXPECT_OK(put_str(b, "shrinks", "abc"));
    EXPECT_OK(b->put(b, "shrinks", "", 0));
    EXPECT_GET("shrinks", 0, TO_END, "", 0);
done:
    free(data);
}

#define MAX_LISTED 32

typedef struct listing {
    char *keys[MAX_LISTED];
    uint64_t sizes[MAX_LISTED];
    size_t n, stop_after;
} listing;

static int listing_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    listing *l = payload;
    if (l->n < MAX_LISTED) {
        l->sizes[l->n] = st->size;
        l->keys[l->n++] = strdup(key);
    }
    return l->stop_after && l->n >= l->stop_after;
}

static void listing_reset(listing *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->keys[i]);
    memset(l, 0, sizeof(*l));
}

/* Keys are listed in order with sizes strlen(key). */
static const char *listing_differs(const listing *l, const char *const *want, size_t n)
{
    if (l->n != n)
        return "wrong number of keys";
    for (size_t i = 0; i < n; i++) {
        if (!l->keys[i] || strcmp(l->keys[i], want[i]) != 0)
            return "wrong key or order";
        if (l->sizes[i] != strlen(want[i]))
            return "wrong size";
    }
    return NULL;
}

#define EXPECT_LISTING(l, ...)                                                                     \
    do {                                                                                           \
        static const char *const want_[] = {__VA_ARGS__};                                          \
        const char *why_ = listing_differs(l, want_, sizeof(want_) / sizeof(want_[0]));            \
        if (why_) {                                                                                \
            conf_fail(cc, __FILE__, __LINE__, "listing: %s (got %zu keys, first \"%s\")", why_,    \
                      (l)->n, (l)->n ? (l)->keys[0] : "");                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

static void case_list(conf_case *cc, funcd_blob *b)
{
    static const char *const keys[] = {"a/2", "ab/1", "a/10", "b", "a/\xff", "a/1", "a"};
    listing l = {0};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        EXPECT_OK(put_str(b, keys[i], keys[i])); /* size == strlen(key) */
    EXPECT_OK(b->list(b, "a/", listing_cb, &l));
    EXPECT_LISTING(&l, "a/1", "a/10", "a/2", "a/\xff");
    listing_reset(&l);
    EXPECT_OK(b->list(b, "a", listing_cb, &l));
    EXPECT_LISTING(&l, "a", "a/1", "a/10", "a/2", "a/\xff", "ab/1");
    listing_reset(&l);
    EXPECT_OK(b->list(b, "", listing_cb, &l));
    EXPECT_LISTING(&l, "a", "a/1", "a/10", "a/2", "a/\xff", "ab/1", "b");
    listing_reset(&l);
    EXPECT_OK(b->list(b, "zzz", listing_cb, &l));
    EXPECT_INT(l.n, 0);
    l.stop_after = 2;
    EXPECT_OK(b->list(b, "", listing_cb, &l));
    EXPECT_LISTING(&l, "a", "a/1");
    listing_reset(&l);
    EXPECT_OK(b->del(b, "a/10"));
    EXPECT_OK(b->list(b, "a/", listing_cb, &l));
    EXPECT_LISTING(&l, "a/1", "a/2", "a/\xff");
done:
    listing_reset(&l);
}

static void case_binary(conf_case *cc, funcd_blob *b)
{
    unsigned char bytes[1024];
    for (size_t i = 0; i < sizeof(bytes); i++)
        bytes[i] = (unsigned char)(i * 7 % 256);
    bytes[0] = bytes[100] = bytes[1023] = 0;
    EXPECT_OK(b->put(b, "bin", bytes, sizeof(bytes)));
    EXPECT_GET("bin", 0, TO_END, bytes, sizeof(bytes));
    EXPECT_GET("bin", 99, 3, bytes + 99, 3);
    EXPECT_GET("bin", 1000, TO_END, bytes + 1000, 24);
done:
    return;
}

static void case_delete(conf_case *cc, funcd_blob *b)
{
    void *data = NULL;
    size_t len = 0;
    funcd_blob_stat st;
    EXPECT_OK(put_str(b, "del/me", "x"));
    EXPECT_OK(put_str(b, "del/keep", "y"));
    EXPECT_OK(b->del(b, "del/me"));
    EXPECT_RC(b->get(b, "del/me", 0, TO_END, &data, &len), FUNCD_ENOTFOUND);
    EXPECT_RC(b->stat(b, "del/me", &st), FUNCD_ENOTFOUND);
    EXPECT_RC(b->del(b, "del/me"), FUNCD_ENOTFOUND);
    EXPECT_GET("del/keep", 0, TO_END, "y", 1);
    EXPECT_OK(put_str(b, "del/me", "again"));
    EXPECT_GET("del/me", 0, TO_END, "again", 5);
done:
    free(data);
}

/* ---- concurrency ----------------------------------------------------------------------- */

#define THREADS 4
#define PUTS 100
#define SHARED_SIZE 4096

typedef struct putter {
    pthread_t th;
    funcd_blob *b;
    int id;
    int errors;
} putter;

static void *putter_main(void *arg)
{
    putter *p = arg;
    unsigned char shared[SHARED_SIZE];
    memset(shared, 'A' + p->id, sizeof(shared));
    for (int i = 0; i < PUTS; i++) {
        char key[64], value[64];
        snprintf(key, sizeof(key), "c/t%d/%03d", p->id, i);
        snprintf(value, sizeof(value), "t%d:%d", p->id, i);
        if (put_str(p->b, key, value) < 0)
            p->errors++;
        if (i % 2 == 0 && p->b->put(p->b, "c-shared", shared, sizeof(shared)) < 0)
            p->errors++;
    }
    return NULL;
}

/* Whatever a reader sees of the shared key is one whole write. */
static const char *shared_torn(funcd_blob *b)
{
    void *data = NULL;
    size_t len = 0;
    int rc = b->get(b, "c-shared", 0, TO_END, &data, &len);
    const char *why = NULL;
    if (rc == FUNCD_ENOTFOUND)
        return NULL;
    if (rc < 0)
        why = "get failed";
    else if (len != SHARED_SIZE)
        why = "wrong size";
    else
        for (size_t i = 1; i < len && !why; i++)
            if (((unsigned char *)data)[i] != ((unsigned char *)data)[0])
                why = "a torn write";
    free(data);
    return why;
}

static int count_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    ++*(size_t *)payload;
    return 0;
}

static void case_concurrent_puts(conf_case *cc, funcd_blob *b)
{
    putter p[THREADS];
    int started = 0;
    size_t listed = 0;
    const char *torn = NULL;
    for (; started < THREADS; started++) {
        p[started] = (putter){.b = b, .id = started};
        EXPECT(pthread_create(&p[started].th, NULL, putter_main, &p[started]) == 0);
    }
    for (int i = 0; i < 200 && !torn; i++)
        torn = shared_torn(b);
done:
    for (int i = 0; i < started; i++) {
        pthread_join(p[i].th, NULL);
        if (p[i].errors && !cc->failed)
            conf_fail(cc, __FILE__, __LINE__, "putter %d had %d errors", i, p[i].errors);
    }
    if (torn && !cc->failed)
        conf_fail(cc, __FILE__, __LINE__, "reading the shared key concurrently: %s", torn);
    if (cc->failed || started < THREADS)
        return;
    for (int t = 0; t < THREADS; t++) {
        for (int i = 0; i < PUTS; i += 7) {
            char key[64], value[64];
            snprintf(key, sizeof(key), "c/t%d/%03d", t, i);
            snprintf(value, sizeof(value), "t%d:%d", t, i);
            char why[256];
            if (get_differs(b, key, 0, TO_END, value, strlen(value), why, sizeof(why))) {
                conf_fail(cc, __FILE__, __LINE__, "get(\"%s\") %s", key, why);
                return;
            }
        }
    }
    if ((torn = shared_torn(b)) != NULL)
        conf_fail(cc, __FILE__, __LINE__, "the shared key after the writers: %s", torn);
    if (b->list(b, "c/", count_cb, &listed) < 0 || listed != THREADS * PUTS)
        conf_fail(cc, __FILE__, __LINE__, "listed %zu keys under c/, expected %d", listed,
                  THREADS * PUTS);
}

/* ---- version 2: put_open -------------------------------------------------------------- *
 * Through the port's wrapper: the driver's own writer when it has one, else
 * the buffering fallback a version 1 driver gets (port/blob.h). */

static size_t count_prefix(funcd_blob *b, const char *prefix)
{
    size_t n = 0;
    return b->list(b, prefix, count_cb, &n) < 0 ? (size_t)-1 : n;
}

/* Pieces of uneven sizes, across the 1 MiB chunk boundaries of drivers that
 * keep chunks; invisible until commit. */
static void case_writer_streams(conf_case *cc, funcd_blob *b)
{
    const size_t total = (5u << 19) + 4321; /* 2.5 MiB and a bit */
    unsigned char *want = malloc(total);
    funcd_blob_writer *w = NULL;
    funcd_blob_stat st;
    EXPECT(want != NULL);
    for (size_t i = 0; i < total; i++)
        want[i] = (unsigned char)((i * 2654435761u) >> 11);
    EXPECT_OK(funcd_port_blob_put_open(b, "w/obj", &w));
    static const size_t steps[] = {1, 1000, 65536, 1u << 20, 3, 777777};
    for (size_t off = 0, i = 0; off < total; i++) {
        size_t n = steps[i % 6] < total - off ? steps[i % 6] : total - off;
        EXPECT_OK(w->write(w, want + off, n));
        off += n;
        if (i == 2)
            EXPECT_RC(b->stat(b, "w/obj", &st), FUNCD_ENOTFOUND);
    }
    EXPECT_OK(w->write(w, NULL, 0));
    EXPECT_RC(b->stat(b, "w/obj", &st), FUNCD_ENOTFOUND);
    EXPECT_INT(count_prefix(b, ""), 0);
    funcd_blob_writer *done_w = w;
    w = NULL;
    EXPECT_OK(done_w->commit(done_w));
    EXPECT_OK(b->stat(b, "w/obj", &st));
    EXPECT_INT(st.size, total);
    EXPECT_GET("w/obj", 0, TO_END, want, total);
    EXPECT_GET("w/obj", (1u << 20) - 5, 10, want + (1u << 20) - 5, 10);
    EXPECT_GET("w/obj", total - 3, TO_END, want + total - 3, 3);
    EXPECT_INT(count_prefix(b, ""), 1);
done:
    if (w)
        w->abort(w);
    free(want);
}

/* Readers see the previous object until commit; then the new one whole. */
static void case_writer_replaces(conf_case *cc, funcd_blob *b)
{
    funcd_blob_writer *w = NULL;
    EXPECT_OK(put_str(b, "w/r", "the old version"));
    EXPECT_OK(funcd_port_blob_put_open(b, "w/r", &w));
    EXPECT_OK(w->write(w, "new", 3));
    EXPECT_GET("w/r", 0, TO_END, "the old version", 15);
    funcd_blob_writer *done_w = w;
    w = NULL;
    EXPECT_OK(done_w->commit(done_w));
    EXPECT_GET("w/r", 0, TO_END, "new", 3);
    /* an empty writer makes an empty object */
    EXPECT_OK(funcd_port_blob_put_open(b, "w/r", &w));
    done_w = w;
    w = NULL;
    EXPECT_OK(done_w->commit(done_w));
    EXPECT_GET("w/r", 0, TO_END, "", 0);
done:
    if (w)
        w->abort(w);
}

/* An aborted writer leaves the previous object, and no key behind. */
static void case_writer_abort(conf_case *cc, funcd_blob *b)
{
    funcd_blob_writer *w = NULL;
    funcd_blob_stat st;
    char *big = calloc(1, (3u << 19));
    EXPECT(big != NULL);
    EXPECT_OK(put_str(b, "w/a", "kept"));
    EXPECT_OK(funcd_port_blob_put_open(b, "w/a", &w));
    EXPECT_OK(w->write(w, big, 3u << 19));
    w->abort(w);
    w = NULL;
    EXPECT_GET("w/a", 0, TO_END, "kept", 4);
    EXPECT_OK(funcd_port_blob_put_open(b, "w/new", &w));
    EXPECT_OK(w->write(w, "x", 1));
    w->abort(w);
    w = NULL;
    EXPECT_RC(b->stat(b, "w/new", &st), FUNCD_ENOTFOUND);
    EXPECT_INT(count_prefix(b, ""), 1);
    EXPECT_RC(funcd_port_blob_put_open(b, "", &w), FUNCD_EINVAL);
    EXPECT(w == NULL);
done:
    if (w)
        w->abort(w);
    free(big);
}

/* Two writers of one key, committed in turn: the last commit wins whole. */
static void case_writer_interleaved(conf_case *cc, funcd_blob *b)
{
    funcd_blob_writer *w1 = NULL, *w2 = NULL;
    EXPECT_OK(funcd_port_blob_put_open(b, "w/i", &w1));
    EXPECT_OK(funcd_port_blob_put_open(b, "w/i", &w2));
    EXPECT_OK(w1->write(w1, "first-", 6));
    EXPECT_OK(w2->write(w2, "second-", 7));
    EXPECT_OK(w1->write(w1, "one", 3));
    EXPECT_OK(w2->write(w2, "two", 3));
    funcd_blob_writer *x = w2;
    w2 = NULL;
    EXPECT_OK(x->commit(x));
    EXPECT_GET("w/i", 0, TO_END, "second-two", 10);
    x = w1;
    w1 = NULL;
    EXPECT_OK(x->commit(x));
    EXPECT_GET("w/i", 0, TO_END, "first-one", 9);
    EXPECT_INT(count_prefix(b, ""), 1);
done:
    if (w1)
        w1->abort(w1);
    if (w2)
        w2->abort(w2);
}

/* ---- the runner ------------------------------------------------------------------------ */

typedef void (*blob_case_fn)(conf_case *cc, funcd_blob *b);

static const struct {
    const char *name;
    blob_case_fn fn;
} cases[] = {
    {"put_get_stat", case_put_get},
    {"ranges", case_ranges},
    {"missing_keys_not_found", case_missing},
    {"overwrite_replaces", case_overwrite},
    {"zero_length_objects", case_zero_length},
    {"list_prefix_order_early_stop", case_list},
    {"binary_data_with_nul_bytes", case_binary},
    {"delete", case_delete},
    {"concurrent_puts", case_concurrent_puts},
    {"writer_streams", case_writer_streams},
    {"writer_replaces", case_writer_replaces},
    {"writer_abort", case_writer_abort},
    {"writer_interleaved", case_writer_interleaved},
};

static int vtable_complete(const funcd_blob *b)
{
    return b->version >= 1 && b->version <= FUNCD_BLOB_VERSION && b->name && b->put && b->get &&
           b->stat && b->list && b->del && b->free;
}

int funcd_blob_conformance_run(funcd_blob *(*make)(void *payload), void *payload, int verbose)
{
    conf_tally tally = {0, 0};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        conf_case cc = {"blob", cases[i].name, verbose, 0};
        funcd_blob *b = make(payload);
        if (!b)
            conf_fail(&cc, __FILE__, __LINE__, "the factory returned no blob store: %s",
                      funcd_error_last()->message);
        else if (!vtable_complete(b))
            conf_fail(&cc, __FILE__, __LINE__,
                      "the driver's vtable is not version 1 to %d or has NULL "
                      "required slots",
                      FUNCD_BLOB_VERSION);
        else
            cases[i].fn(&cc, b);
        if (b && b->free)
            b->free(b);
        conf_report(&cc, &tally);
    }
    if (verbose)
        fprintf(stderr, "blob conformance: %d passed, %d failed\n", tally.passed, tally.failed);
    return tally.failed;
}
