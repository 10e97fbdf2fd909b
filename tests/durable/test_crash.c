/*
 * Crash test of the durable substrate (issue 6): rounds of
 *   start `funcd --data-dir DIR` → writers create/replace/delete Secrets and
 *   Functions through the API while a watcher follows → kill -9 at a random
 *   moment → (next round) restart on the same DIR and verify.
 *
 * What "verify" means, per key (each key is written by one writer thread, so
 * its operations are ordered):
 *   - its last acknowledged (2xx) state is what the store holds, unless the
 *     write after it got no answer (the crash): then either state is fine;
 *   - a PUT with a stale resourceVersion got 409 and never shows up;
 *   - PRAGMA integrity_check is "ok" on the file funcd left behind;
 *   - a watch resumed from the last resourceVersion the watcher saw replays
 *     every acknowledged write after it: in increasing revision order, no
 *     duplicate, each with its content. Except one: a deleted Secret's
 *     history is purged (docs/security.md), so when the watcher had not yet
 *     seen a Secret DELETE of the round, resuming the Secrets' watch gets
 *     410 naming the purge; that is accepted only after a Secret DELETE was
 *     sent in the round, and the round's Secrets are then checked by their
 *     state alone, through a new watch from a list.
 *
 * FUNCD_CRASH_ROUNDS sets the number of rounds (default 50);
 * FUNCD_CRASH_SEED the random seed (printed, to replay a failure).
 */
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "../e2e/client.h"
#include "../e2e/env.h"
#include "../harness.h"
#include "daemon.h"
#include "util/misc.h"

#define THREADS 4
#define KEYS_PER_THREAD 6
#define NKEYS (THREADS * KEYS_PER_THREAD)
#define MAX_OPS 4096
#define MAX_EVENTS 16384

enum { SECRETS, FUNCTIONS, NPLURALS };
static const char *const plural_name[NPLURALS] = {"secrets", "functions"};

typedef struct state {
    int present;
    char content[64];
} state;

typedef struct key {
    int plural;
    char name[48];
    state acked;     /* the last acknowledged state */
    uint64_t rv;     /* its resourceVersion, when present */
    int unknown;     /* the last operation got no answer... */
    state if_applied; /* ...and this is the state had it been applied */
} key;

typedef struct op {
    int key;
    int is_delete;
    uint64_t rv; /* of an acknowledged PUT */
    char content[64];
} op;

typedef struct event {
    char type[12];
    char name[48];
    char content[64];
    uint64_t rv;
} event;

typedef struct round_log {
    op ops[MAX_OPS];
    size_t nops;
    char conflicts[256][64]; /* contents of writes answered 409 */
    size_t nconflicts;
    pthread_mutex_t mu;
} round_log;

typedef struct crash_test {
    char dir[256], data[300], log[320];
    key keys[NKEYS];
    round_log log_;
    event *events[NPLURALS];
    size_t nevents[NPLURALS];
    uint64_t last_seen[NPLURALS];
    dd_daemon d;
    e2e_http *h;
    unsigned round;
    atomic_int failures; /* writer-side findings */
    atomic_int secret_deletes; /* Secret DELETEs sent this round */
    unsigned purged_rounds;    /* rounds whose Secrets watch got 410 for a purge */
    /* figures */
    unsigned long acked, unknown, conflicts, errors, replayed;
} crash_test;

typedef struct writer {
    crash_test *t;
    int id;
    unsigned seed;
} writer;

/* ---- bodies ------------------------------------------------------------ */

static void base64(const char *in, char *out, size_t out_len)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = strlen(in), o = 0;
    for (size_t i = 0; i < n && o + 5 < out_len; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n)
            v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            v |= (unsigned char)in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = '\0';
}

/* A Secret or Function whose content is `content`, with a resourceVersion
 * precondition when `rv` is not 0. */
static char *body_for(int plural, const char *name, const char *content, uint64_t rv)
{
    char pre[64] = "", b64[128];
    if (rv)
        snprintf(pre, sizeof(pre), ",\"resourceVersion\":\"%llu\"", (unsigned long long)rv);
    char *s = NULL;
    int n;
    if (plural == SECRETS) {
        base64(content, b64, sizeof(b64));
        n = asprintf(&s,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                     "\"%s\",\"annotations\":{\"content\":\"%s\"}%s},\"type\":\"Opaque\","
                     "\"data\":{\"v\":\"%s\"}}",
                     name, content, pre, b64);
    } else {
        n = asprintf(&s,
                     "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
                     "\"%s\",\"annotations\":{\"content\":\"%s\"}%s},\"spec\":{\"runtime\":"
                     "\"native\",\"handler\":\"worker\",\"source\":{\"bundle\":"
                     "\"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"},"
                     "\"env\":{\"CONTENT\":\"%s\"}}}",
                     name, content, pre, content);
    }
    return n < 0 ? NULL : s;
}

/* The content an object carries, checked across its fields; NULL when the
 * fields disagree (a half-applied write). */
static const char *content_of(int plural, const cJSON *obj)
{
    const char *c = jstr(obj, "metadata.annotations.content");
    if (!c)
        return NULL;
    if (plural == FUNCTIONS) {
        const char *env_c = jstr(obj, "spec.env.CONTENT");
        return env_c && strcmp(env_c, c) == 0 ? c : NULL;
    }
    char b64[128];
    base64(c, b64, sizeof(b64));
    const char *data = jstr(obj, "data.v");
    return data && strcmp(data, b64) == 0 ? c : NULL;
}

static void key_path(const key *k, char *out, size_t len)
{
    snprintf(out, len, DD_NS "/%s/%s", plural_name[k->plural], k->name);
}

/* ---- writers ----------------------------------------------------------- */

static void record_op(crash_test *t, int k, int is_delete, uint64_t rv, const char *content)
{
    round_log *l = &t->log_;
    pthread_mutex_lock(&l->mu);
    if (l->nops < MAX_OPS) {
        op *o = &l->ops[l->nops++];
        o->key = k;
        o->is_delete = is_delete;
        o->rv = rv;
        snprintf(o->content, sizeof(o->content), "%s", content ? content : "");
    }
    t->acked++;
    pthread_mutex_unlock(&l->mu);
}

static void record_conflict(crash_test *t, const char *content)
{
    round_log *l = &t->log_;
    pthread_mutex_lock(&l->mu);
    if (l->nconflicts < 256)
        snprintf(l->conflicts[l->nconflicts++], 64, "%s", content);
    t->conflicts++;
    pthread_mutex_unlock(&l->mu);
}

static void writer_finding(crash_test *t, const char *what, const key *k, const e2e_resp *r)
{
    fprintf(stderr, "  round %u: %s on %s/%s: HTTP %ld %.300s\n", t->round, what,
            plural_name[k->plural], k->name, r->status, r->body ? r->body : "");
    atomic_fetch_add(&t->failures, 1);
}

/* One operation on key `ki`; 0 to go on, -1 once funcd is gone. */
static int write_one(writer *w, e2e_http *h, e2e_resp *r, int ki, unsigned seq)
{
    crash_test *t = w->t;
    key *k = &t->keys[ki];
    char path[160], content[64];
    key_path(k, path, sizeof(path));
    int dice = (int)(rand_r(&w->seed) % 100);
    int conflict = dice >= 80 && k->acked.present && k->rv >= 2;
    int del = !conflict && dice >= 55;
    snprintf(content, sizeof(content), "%s-r%u-t%d-n%u", conflict ? "conflict" : "v", t->round,
             w->id, seq);
    if (del) {
        if (k->plural == SECRETS)
            atomic_fetch_add(&t->secret_deletes, 1);
        e2e_http_do(h, "DELETE", path, DD_TOKEN, NULL, r);
    } else {
        /* A resourceVersion below the acknowledged one is stale for sure:
         * revisions only grow. */
        char *body = body_for(k->plural, k->name, content, conflict ? k->rv - 1 : 0);
        e2e_http_do(h, "PUT", path, DD_TOKEN, body ? body : "", r);
        free(body);
    }
    long st = r->status;
    if (st == 0) { /* no answer: applied or not, we cannot know */
        k->unknown = 1;
        k->if_applied = k->acked; /* a stale write may not apply either way */
        if (del)
            k->if_applied = (state){0};
        else if (!conflict)
            memcpy(k->if_applied.content, content, sizeof(content));
        k->if_applied.present = !del && (conflict ? k->acked.present : 1);
        __atomic_add_fetch(&t->unknown, 1, __ATOMIC_RELAXED);
        return -1;
    }
    if (conflict) {
        if (st != 409)
            writer_finding(t, "a PUT with a stale resourceVersion was not refused with 409", k, r);
        record_conflict(t, content);
        return 0;
    }
    if (del && st == 404 && k->acked.present)
        writer_finding(t, "an acknowledged object vanished (DELETE answered 404)", k, r);
    if (del && st == 200) {
        k->acked.present = 0;
        k->acked.content[0] = '\0';
        record_op(t, ki, 1, 0, NULL);
    } else if (!del && (st == 200 || st == 201)) {
        k->acked.present = 1;
        snprintf(k->acked.content, sizeof(k->acked.content), "%s", content);
        k->rv = jrv(r->json);
        record_op(t, ki, 0, k->rv, content);
    } else if (!(del && st == 404)) {
        __atomic_add_fetch(&t->errors, 1, __ATOMIC_RELAXED); /* not applied: checked later */
    }
    return 0;
}

static void *writer_main(void *arg)
{
    writer *w = arg;
    e2e_http *h = e2e_http_new(w->t->d.cp);
    e2e_resp r = E2E_RESP_INIT;
    for (unsigned seq = 0; h; seq++) {
        int ki = w->id * KEYS_PER_THREAD + (int)(rand_r(&w->seed) % KEYS_PER_THREAD);
        if (write_one(w, h, &r, ki, seq) < 0)
            break;
    }
    e2e_resp_free(&r);
    e2e_http_free(h);
    return NULL;
}

/* ---- watch ------------------------------------------------------------- */

static void add_event(crash_test *t, int p, const cJSON *ev)
{
    const char *type = jstr(ev, "type");
    if (!type || strcmp(type, "BOOKMARK") == 0 || t->nevents[p] == MAX_EVENTS)
        return;
    event *e = &t->events[p][t->nevents[p]++];
    snprintf(e->type, sizeof(e->type), "%s", type);
    const cJSON *obj = jget(ev, "object");
    snprintf(e->name, sizeof(e->name), "%s", jstr(obj, "metadata.name") ? jstr(obj, "metadata.name") : "");
    const char *c = content_of(p, obj);
    snprintf(e->content, sizeof(e->content), "%s", c ? c : "");
    e->rv = jrv(obj);
}

/* A watch from last_seen, or (`from_list`) from a list; NULL on failure,
 * with `*purged` set when it was a 410 for a purged Secret's history. */
static e2e_watch *open_watch(crash_test *t, int p, int from_list, int *purged)
{
    char url[300];
    snprintf(url, sizeof(url), "%s" DD_NS "/%s?watch=true&resourceVersion=%llu", t->d.cp,
             plural_name[p], from_list ? 0ULL : (unsigned long long)t->last_seen[p]);
    e2e_watch *w = e2e_watch_open(url, DD_TOKEN);
    long st = w ? e2e_watch_status(w, 10000) : 0;
    *purged = 0;
    if (w && st != 200) {
        char *line = e2e_watch_next(w, 1000);
        *purged = st == 410 && line && strstr(line, "was purged when it was deleted");
        if (!*purged)
            fprintf(stderr, "  round %u: watch %s: HTTP %ld %.300s\n", t->round, url, st,
                    line ? line : "");
        free(line);
        e2e_watch_close(w);
        return NULL;
    }
    return w;
}

/* Reads events into t->events[p] until one with revision `until` (0: until
 * the stream ends or is quiet for `quiet_ms`). 1 when `until` was seen. */
static int read_events(crash_test *t, int p, e2e_watch *w, uint64_t until, int quiet_ms)
{
    for (;;) {
        cJSON *ev = e2e_watch_next_json(w, quiet_ms);
        if (!ev)
            return 0;
        add_event(t, p, ev);
        uint64_t rv = jrv(jget(ev, "object"));
        cJSON_Delete(ev);
        if (until && rv == until)
            return 1;
    }
}

/* ---- checks ------------------------------------------------------------ */

static int integrity_ok(const char *db_path)
{
    sqlite3 *db = NULL;
    int ok = 0;
    if (sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW) {
            const char *res = (const char *)sqlite3_column_text(st, 0);
            ok = res && strcmp(res, "ok") == 0;
            if (!ok)
                fprintf(stderr, "  integrity_check: %s\n", res ? res : "(null)");
        }
        sqlite3_finalize(st);
    }
    if (!ok && db)
        fprintf(stderr, "  sqlite: %s\n", sqlite3_errmsg(db));
    sqlite3_close(db);
    return ok;
}

static int is_conflict_content(const char *content)
{
    return strncmp(content, "conflict", 8) == 0;
}

static int state_equals(const state *s, int present, const char *content)
{
    return s->present == present && (!present || strcmp(s->content, content) == 0);
}

/* The store (through a list per kind) against the model; adopts what it
 * finds as the new acknowledged state. 0 when all is as it must be. */
static int check_state(crash_test *t)
{
    int bad = 0;
    e2e_resp r = E2E_RESP_INIT;
    for (int p = 0; p < NPLURALS; p++) {
        char path[160];
        snprintf(path, sizeof(path), DD_NS "/%s", plural_name[p]);
        if (e2e_http_do(t->h, "GET", path, DD_TOKEN, NULL, &r) != 200 || !r.json) {
            fprintf(stderr, "  round %u: list %s: HTTP %ld\n", t->round, path, r.status);
            bad = 1;
            continue;
        }
        const cJSON *items = jget(r.json, "items");
        for (int ki = 0; ki < NKEYS; ki++) {
            key *k = &t->keys[ki];
            if (k->plural != p)
                continue;
            const cJSON *found = NULL, *it;
            cJSON_ArrayForEach(it, items)
            {
                const char *n = jstr(it, "metadata.name");
                if (n && strcmp(n, k->name) == 0)
                    found = it;
            }
            const char *c = found ? content_of(p, found) : "";
            if (found && !c) {
                fprintf(stderr, "  round %u: %s/%s is half-applied\n", t->round,
                        plural_name[p], k->name);
                bad = 1;
                continue;
            }
            int ok = state_equals(&k->acked, found != NULL, c) ||
                     (k->unknown && state_equals(&k->if_applied, found != NULL, c));
            if (!ok || is_conflict_content(c)) {
                fprintf(stderr,
                        "  round %u: %s/%s is %s \"%s\"; acknowledged: %s \"%s\"%s\n", t->round,
                        plural_name[p], k->name, found ? "present" : "absent", c,
                        k->acked.present ? "present" : "absent", k->acked.content,
                        k->unknown ? " (or the unanswered write)" : "");
                bad = 1;
            }
            k->acked.present = found != NULL;
            snprintf(k->acked.content, sizeof(k->acked.content), "%s", c);
            k->rv = found ? jrv(found) : 0;
            k->unknown = 0;
        }
    }
    e2e_resp_free(&r);
    return bad ? -1 : 0;
}

/* The events of plural `p` since the previous check against what the
 * writers were told. */
static int check_events(crash_test *t, int p)
{
    const event *ev = t->events[p];
    size_t n = t->nevents[p];
    int bad = 0;
    for (size_t i = 1; i < n; i++)
        if (ev[i].rv <= ev[i - 1].rv) {
            fprintf(stderr, "  round %u: %s watch: revision %llu after %llu (%s %s)\n", t->round,
                    plural_name[p], (unsigned long long)ev[i].rv,
                    (unsigned long long)ev[i - 1].rv, ev[i].type, ev[i].name);
            bad = 1;
        }
    for (size_t i = 0; i < n; i++)
        if (is_conflict_content(ev[i].content)) {
            fprintf(stderr, "  round %u: a write refused with 409 shows in the watch: %s\n",
                    t->round, ev[i].content);
            bad = 1;
        }
    for (int ki = 0; ki < NKEYS; ki++) {
        if (t->keys[ki].plural != p)
            continue;
        size_t pos = 0;
        for (size_t oi = 0; oi < t->log_.nops; oi++) {
            const op *o = &t->log_.ops[oi];
            if (o->key != ki)
                continue;
            size_t j = pos;
            for (; j < n; j++) {
                if (strcmp(ev[j].name, t->keys[ki].name) != 0)
                    continue;
                if (o->is_delete ? strcmp(ev[j].type, "DELETED") == 0 : ev[j].rv == o->rv)
                    break;
            }
            if (j == n) {
                fprintf(stderr, "  round %u: the watch lacks the acknowledged %s of %s/%s%s%s\n",
                        t->round, o->is_delete ? "DELETE" : "PUT", plural_name[p],
                        t->keys[ki].name, o->is_delete ? "" : " with content ",
                        o->is_delete ? "" : o->content);
                bad = 1;
                break;
            }
            if (!o->is_delete &&
                (strcmp(ev[j].content, o->content) != 0 || strcmp(ev[j].type, "DELETED") == 0)) {
                fprintf(stderr, "  round %u: watch event %s %s rv %llu has \"%s\", not \"%s\"\n",
                        t->round, ev[j].type, ev[j].name, (unsigned long long)ev[j].rv,
                        ev[j].content, o->content);
                bad = 1;
            }
            pos = j + 1;
        }
    }
    return bad ? -1 : 0;
}

/* ---- rounds ------------------------------------------------------------ */

static uint64_t put_marker(crash_test *t, int p)
{
    char path[160], content[64];
    snprintf(path, sizeof(path), DD_NS "/%s/marker", plural_name[p]);
    snprintf(content, sizeof(content), "marker-r%u", t->round);
    char *body = body_for(p, "marker", content, 0);
    e2e_resp r = E2E_RESP_INIT;
    long st = e2e_http_do(t->h, "PUT", path, DD_TOKEN, body ? body : "", &r);
    uint64_t rv = st == 200 || st == 201 ? jrv(r.json) : 0;
    if (!rv)
        fprintf(stderr, "  round %u: marker PUT %s: HTTP %ld %.200s\n", t->round, path, st,
                r.body);
    e2e_resp_free(&r);
    free(body);
    return rv;
}

static void reset_round_log(crash_test *t)
{
    t->log_.nops = 0;
    t->log_.nconflicts = 0;
    for (int p = 0; p < NPLURALS; p++)
        t->nevents[p] = 0;
}

/* After a (re)start: replay each watch from where it stopped up to a fresh
 * marker write, and check it and the store. 0 when all is well; the
 * watches stay open in `w` for the next round. */
static int resume_and_check(crash_test *t, e2e_watch *w[NPLURALS])
{
    int bad = 0, purged = 0, listed[NPLURALS] = {0};
    for (int p = 0; p < NPLURALS; p++) {
        w[p] = open_watch(t, p, 0, &purged);
        if (!w[p] && purged && p == SECRETS && atomic_load(&t->secret_deletes) > 0) {
            t->purged_rounds++;
            listed[p] = 1;
            w[p] = open_watch(t, p, 1, &purged);
        }
        if (!w[p]) {
            fprintf(stderr, "  round %u: cannot resume the %s watch from %llu\n", t->round,
                    plural_name[p], (unsigned long long)t->last_seen[p]);
            return -1;
        }
    }
    for (int p = 0; p < NPLURALS; p++) {
        uint64_t marker = put_marker(t, p);
        if (!marker || !read_events(t, p, w[p], marker, 10000)) {
            fprintf(stderr, "  round %u: the %s watch never reached the marker (%llu)\n",
                    t->round, plural_name[p], (unsigned long long)marker);
            return -1;
        }
        t->nevents[p]--; /* the marker itself */
        t->last_seen[p] = marker; /* seen up to it, even if the round sees nothing more */
        if (listed[p])
            continue; /* the listed state is checked below, with the store's */
        t->replayed += t->nevents[p];
        if (check_events(t, p) < 0)
            bad = 1;
    }
    if (check_state(t) < 0)
        bad = 1;
    reset_round_log(t);
    atomic_store(&t->secret_deletes, 0);
    return bad ? -1 : 0;
}

static int run_writers_and_crash(crash_test *t, e2e_watch *w[NPLURALS], unsigned *seed)
{
    pthread_t th[THREADS];
    writer ws[THREADS];
    int started = 0;
    for (int i = 0; i < THREADS; i++) {
        ws[i] = (writer){t, i, rand_r(seed)};
        if (pthread_create(&th[i], NULL, writer_main, &ws[i]) == 0)
            started++;
        else
            break;
    }
    dd_sleep_ms(10 + (int)(rand_r(seed) % 391));
    dd_kill9(&t->d);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (int p = 0; p < NPLURALS; p++) {
        e2e_watch_wait_end(w[p], 5000);
        read_events(t, p, w[p], 0, 0);
        e2e_watch_close(w[p]);
        w[p] = NULL;
        if (t->nevents[p])
            t->last_seen[p] = t->events[p][t->nevents[p] - 1].rv;
    }
    return started == THREADS ? 0 : -1;
}

static int start_daemon(crash_test *t)
{
    const char *args[32];
    dd_default_args(args, 32, "--data-dir", t->data, NULL);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    e2e_http_free(t->h);
    t->h = e2e_http_new(t->d.cp);
    return t->h ? 0 : -1;
}

static unsigned env_uint(const char *name, unsigned def)
{
    const char *v = getenv(name);
    return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

static void init_keys(crash_test *t)
{
    for (int i = 0; i < NKEYS; i++) {
        key *k = &t->keys[i];
        k->plural = i % 2 ? FUNCTIONS : SECRETS;
        snprintf(k->name, sizeof(k->name), "k%02d", i);
    }
}

static void crash_rounds(crash_test *t)
{
    unsigned rounds = env_uint("FUNCD_CRASH_ROUNDS", 50);
    const unsigned seed0 =
        env_uint("FUNCD_CRASH_SEED", (unsigned)time(NULL) ^ (unsigned)getpid());
    unsigned seed = seed0;
    fprintf(stderr, "  %u rounds, FUNCD_CRASH_SEED=%u\n", rounds, seed0);
    e2e_watch *w[NPLURALS] = {0};
    int64_t t0 = e2e_now_ms();
    for (t->round = 0; t->round <= rounds; t->round++) {
        if (start_daemon(t) < 0)
            FAILF("round %u: funcd did not start on the data directory", t->round);
        int bad = resume_and_check(t, w);
        if (bad < 0 || atomic_load(&t->failures)) {
            for (int p = 0; p < NPLURALS; p++)
                e2e_watch_close(w[p]);
            dd_dump_log(&t->d);
            FAILF("round %u: the store or the watch lost or changed acknowledged writes "
                  "(seed %u)", t->round, seed0);
        }
        if (t->round == rounds) {
            for (int p = 0; p < NPLURALS; p++)
                e2e_watch_close(w[p]);
            break;
        }
        if (run_writers_and_crash(t, w, &seed) < 0)
            FAILF("cannot start writer threads");
        char db[400];
        snprintf(db, sizeof(db), "%s/store.db", t->data);
        if (!integrity_ok(db))
            FAILF("round %u: PRAGMA integrity_check failed after kill -9 (seed %u)", t->round,
                  seed0);
    }
    dd_kill9(&t->d);
    fprintf(stderr,
            "  %u rounds in %lld ms: %lu acknowledged writes, %lu unanswered, %lu refused "
            "with 409, %lu other errors, %lu events replayed; %u rounds resumed the Secrets "
            "from a list (a DELETE purged their history)\n",
            rounds, (long long)(e2e_now_ms() - t0), t->acked, t->unknown, t->conflicts,
            t->errors, t->replayed, t->purged_rounds);
}

TEST(crash_kill9_rounds)
{
    crash_test *t = calloc(1, sizeof(*t));
    CHECK(t != NULL);
    pthread_mutex_init(&t->log_.mu, NULL);
    for (int p = 0; p < NPLURALS; p++)
        t->events[p] = calloc(MAX_EVENTS, sizeof(event));
    int ok_setup = t->events[0] && t->events[1] && dd_tempdir(t->dir, sizeof(t->dir), "crash") == 0;
    if (ok_setup) {
        snprintf(t->data, sizeof(t->data), "%s/data", t->dir);
        snprintf(t->log, sizeof(t->log), "%s/funcd.log", t->dir);
        init_keys(t);
        crash_rounds(t);
    }
    dd_kill9(&t->d);
    e2e_http_free(t->h);
    if (t->dir[0])
        funcd_remove_tree(t->dir);
    for (int p = 0; p < NPLURALS; p++)
        free(t->events[p]);
    pthread_mutex_destroy(&t->log_.mu);
    free(t);
    CHECK(ok_setup);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(crash_kill9_rounds);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
