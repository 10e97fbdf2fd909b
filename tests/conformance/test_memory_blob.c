/* The memory blob store against the blob conformance suite, plus what only it promises. */
#include "../harness.h"
#include "blob_suite.h"
#include "funcd/sys/blob.h"

static funcd_blob *make_memory(void *payload)
{
    funcd_blob *b = NULL;
    funcd_blob_memory_new(&b);
    return b;
}

TEST(conformance)
{
    CHECK_INT(funcd_blob_conformance_run(make_memory, NULL, 1), 0);
}

typedef struct reader {
    funcd_blob *b;
    int gets, dels;
} reader;

/* List callbacks run outside the driver's lock: they may call back in. */
static int reenter_cb(const char *key, const funcd_blob_stat *st, void *payload)
{
    reader *r = payload;
    void *data = NULL;
    size_t len = 0;
    if (r->b->get(r->b, key, 0, FUNCD_BLOB_TO_END, &data, &len) == 0)
        r->gets++;
    free(data);
    if (r->b->del(r->b, key) == 0)
        r->dels++;
    return 0;
}

TEST(list_callback_may_call_back_in)
{
    funcd_blob *b = make_memory(NULL);
    CHECK(b != NULL);
    reader r = {b, 0, 0};
    b->put(b, "x/1", "a", 1);
    b->put(b, "x/2", "b", 1);
    int rc = b->list(b, "x/", reenter_cb, &r);
    funcd_blob_stat st;
    int gone = b->stat(b, "x/1", &st);
    b->free(b);
    CHECK_INT(rc, 0);
    CHECK_INT(r.gets, 2);
    CHECK_INT(r.dels, 2);
    CHECK_INT(gone, FUNCD_ENOTFOUND);
}

TEST(errors_name_the_key)
{
    funcd_blob *b = make_memory(NULL);
    void *data = NULL;
    size_t len = 0;
    CHECK(b != NULL);
    b->put(b, "sha256:abc", "0123", 4);
    int range = b->get(b, "sha256:abc", 5, 1, &data, &len);
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", funcd_error_last()->message);
    int null_key = b->put(b, NULL, "x", 1);
    b->free(b);
    CHECK_INT(range, FUNCD_ERANGE);
    CHECK_CONTAINS(msg, "sha256:abc");
    CHECK_INT(null_key, FUNCD_EINVAL);
    CHECK_INT(funcd_blob_memory_new(NULL), FUNCD_EINVAL);
}

int main(void)
{
    RUN(conformance);
    RUN(list_callback_may_call_back_in);
    RUN(errors_name_the_key);
    return HARNESS_END();
}
