/*
 * The cron source's checkpoint, with a fake delivery queue: a source fires
 * each tick once; another instance on the same store (a restart, a new
 * leader) goes on from the checkpoint without repeating a tick, fires the
 * ticks it missed only once (the latest), and an instance that does not
 * lead fires nothing.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "eventing/sources.h"
#include "funcd/funcd.h"
#include "harness.h"
#include "objects/objects.h"
#include "util/misc.h"

#define MAX_SUBMITS 64

typedef struct fake_queue {
    char ids[MAX_SUBMITS][64];
    int64_t ticks[MAX_SUBMITS];
    size_t n;
} fake_queue;

static int fake_submit(const funcd_evsources_event *ev, void *payload)
{
    fake_queue *q = payload;
    if (q->n == MAX_SUBMITS)
        return 0;
    snprintf(q->ids[q->n], sizeof(q->ids[q->n]), "%s", ev->id);
    cJSON *b = cJSON_ParseWithLength(ev->body, ev->body_len);
    q->ticks[q->n] = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(b, "tickMs"));
    cJSON_Delete(b);
    q->n++;
    return 0;
}

/* Runs an instance on `store` for `ms`, leading or not; *started gets the
 * time it started. */
static int run_for(funcd_store *store, fake_queue *q, int leader, int ms, int64_t *started)
{
    *started = funcd_now_ms();
    struct event_base *base = event_base_new();
    funcd_evsources_config cfg = {.loop = base, .store = store, .submit = fake_submit,
                                  .submit_payload = q};
    funcd_evsources *s = NULL;
    int rc = funcd_evsources_new(&s, &cfg);
    if (rc == 0)
        rc = funcd_evsources_start(s);
    if (rc == 0 && !leader)
        funcd_evsources_leading(s, 0);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (rc == 0) {
        event_base_loopexit(base, &tv);
        event_base_dispatch(base);
    }
    funcd_evsources_free(s);
    event_base_free(base);
    return rc;
}

static int distinct(const fake_queue *q)
{
    for (size_t i = 0; i < q->n; i++)
        for (size_t j = i + 1; j < q->n; j++)
            if (strcmp(q->ids[i], q->ids[j]) == 0 || q->ticks[i] == q->ticks[j])
                return 0;
    return 1;
}

TEST(checkpoint_across_instances)
{
    funcd_store *store = NULL;
    CHECK(funcd_store_memory_new(&store, 0) == 0);
    const char *text = "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EventSource\",\"metadata\":"
                       "{\"name\":\"tick\"},\"spec\":{\"type\":\"cron\",\"cron\":{\"schedule\":"
                       "\"@every 1s\"},\"target\":{\"function\":\"f\"}}}";
    cJSON *obj = cJSON_Parse(text), *out = NULL;
    int rc = funcd_objects_create(store, funcd_kind_by_kind("EventSource"), "default", obj, &out);
    cJSON_Delete(obj);
    cJSON_Delete(out);
    fake_queue a = {0}, b = {0}, c = {0};
    int64_t a_start, b_start, c_start;
    if (rc == 0)
        rc = run_for(store, &a, 1, 2600, &a_start); /* the ticks after its start */
    /* The last tick fired is in the store. */
    funcd_store_value v = {0};
    double kept = 0;
    if (rc == 0 && store->get(store, FUNCD_EVSOURCES_CHECKPOINTS "default/tick", &v) == 0) {
        cJSON *j = cJSON_ParseWithLength(v.value, v.len);
        kept = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(j, "lastTick"));
        cJSON_Delete(j);
        free(v.value);
    }
    if (rc == 0)
        rc = run_for(store, &c, 0, 2100, &c_start); /* not the leader: nothing */
    if (rc == 0)
        rc = run_for(store, &b, 1, 1200, &b_start); /* the latest missed tick once, then on */
    store->free(store);
    CHECK_INT(rc, 0);
    CHECK(a.n >= 1);
    CHECK(a.ticks[0] > a_start); /* a new source fires no tick from before it */
    CHECK_INT(c.n, 0);
    CHECK(b.n >= 1);
    CHECK(distinct(&a) && distinct(&b));
    /* B goes on from the checkpoint: later ticks only; of the two or more
     * missed while C ran, one fires (the latest: B's first), not each. */
    CHECK(b.ticks[0] > a.ticks[a.n - 1]);
    CHECK(b.ticks[0] - a.ticks[a.n - 1] >= 2000);
    CHECK_INT((int64_t)kept, a.ticks[a.n - 1]);
    /* The catch-up fires at once, for a tick already past (a fresh source
     * would wait for the next one). */
    CHECK(b.ticks[0] <= b_start + 200);
    for (size_t i = 1; i < b.n; i++)
        CHECK(b.ticks[i] > b.ticks[i - 1] && (b.ticks[i] - b.ticks[i - 1]) % 1000 == 0);
    for (size_t i = 1; i < a.n; i++)
        CHECK(a.ticks[i] > a.ticks[i - 1] && (a.ticks[i] - a.ticks[i - 1]) % 1000 == 0);
    for (size_t i = 0; i < b.n; i++)
        for (size_t j = 0; j < a.n; j++)
            CHECK(strcmp(a.ids[j], b.ids[i]) != 0);
}

int main(void)
{
    RUN(checkpoint_across_instances);
    return HARNESS_END();
}
