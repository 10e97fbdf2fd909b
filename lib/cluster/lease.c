#include "cluster/lease.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "funcd/sys/error.h"
#include "port/store.h"
#include "util/misc.h"

/* The holder stops this much before its TTL is over: room for clock rates
 * that differ a little and for the contender's read that follows. */
static int64_t margin(uint64_t ttl_ms)
{
    return (int64_t)(ttl_ms / 10);
}

void funcd_lease_init(funcd_lease *l, funcd_store *store, const char *key, const char *me,
                      uint64_t ttl_ms)
{
    memset(l, 0, sizeof(*l));
    l->store = store;
    l->key = key;
    l->me = me;
    l->ttl_ms = ttl_ms ? ttl_ms : FUNCD_LEASE_TTL_DEFAULT_MS;
}

int funcd_lease_record_parse(const void *value, size_t len, funcd_lease_record *out)
{
    memset(out, 0, sizeof(*out));
    cJSON *j = cJSON_ParseWithLength(value, len);
    const char *holder = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(j, "holder"));
    const cJSON *renew = cJSON_GetObjectItemCaseSensitive(j, "renewMs");
    const cJSON *acquire = cJSON_GetObjectItemCaseSensitive(j, "acquireMs");
    const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(j, "ttlMs");
    int ok = holder && *holder && strlen(holder) < sizeof(out->holder) && cJSON_IsNumber(renew) &&
             cJSON_IsNumber(ttl) && ttl->valuedouble >= 1;
    if (ok) {
        snprintf(out->holder, sizeof(out->holder), "%s", holder);
        out->renew_ms = (int64_t)renew->valuedouble;
        out->acquire_ms = cJSON_IsNumber(acquire) ? (int64_t)acquire->valuedouble : out->renew_ms;
        out->ttl_ms = (uint64_t)ttl->valuedouble;
    }
    cJSON_Delete(j);
    return ok ? 0 : -1;
}

/* Writes our record over revision `expected` (FUNCD_STORE_ABSENT: a create);
 * `mono` is the time before the write, from which our TTL counts. */
static int write_record(funcd_lease *l, uint64_t expected, int64_t wall, int64_t mono)
{
    int renewal = l->held && expected == l->rev;
    int64_t acquired = renewal ? l->acquired_wall : wall;
    char at[32], renewed[32], value[FUNCD_NODE_NAME_MAX + 256];
    funcd_rfc3339(acquired, at, sizeof(at));
    funcd_rfc3339(wall, renewed, sizeof(renewed));
    int n = snprintf(value, sizeof(value),
                     "{\"holder\":\"%s\",\"acquireTime\":\"%s\",\"renewTime\":\"%s\","
                     "\"acquireMs\":%lld,\"renewMs\":%lld,\"ttlMs\":%llu}",
                     l->me, at, renewed, (long long)acquired, (long long)wall,
                     (unsigned long long)l->ttl_ms);
    if (n < 0 || (size_t)n >= sizeof(value))
        return funcd_error_set(FUNCD_EINVAL, "lease holder name too long: %s", l->me);
    uint64_t rev = 0;
    int rc = funcd_port_store_put(l->store, l->key, value, (size_t)n, expected, &rev);
    if (rc < 0)
        return rc;
    l->held = 1;
    l->held_until = mono + (int64_t)l->ttl_ms - margin(l->ttl_ms);
    l->rev = rev;
    l->acquired_wall = acquired;
    snprintf(l->holder, sizeof(l->holder), "%s", l->me);
    return 0;
}

int funcd_lease_step(funcd_lease *l, int64_t wall, int64_t mono)
{
    if (l->held && mono >= l->held_until)
        l->held = 0; /* renewals failed for too long: another may hold it now */
    if (l->held) {
        int rc = write_record(l, l->rev, wall, mono);
        if (rc == 0)
            return 1;
        if (rc != FUNCD_ECONFLICT && rc != FUNCD_ENOTFOUND)
            return rc; /* held until the deadline; the next step retries */
        l->held = 0; /* someone changed the record: read who holds it now */
    }
    funcd_store_value v = {0};
    int rc = funcd_port_store_get(l->store, l->key, &v);
    if (rc == FUNCD_ENOTFOUND) {
        l->holder[0] = '\0';
        rc = write_record(l, FUNCD_STORE_ABSENT, wall, mono);
        return rc == 0 ? 1 : rc == FUNCD_EEXISTS ? 0 : rc;
    }
    if (rc < 0)
        return rc;
    funcd_lease_record rec;
    int parsed = funcd_lease_record_parse(v.value, v.len, &rec) == 0;
    free(v.value);
    if (parsed && strcmp(rec.holder, l->me) == 0) {
        /* Ours, from an earlier run of this node (node names are unique):
         * nobody else may take it until it expires, so it is ours again. */
        l->held = 1;
        l->rev = v.revision;
        l->acquired_wall = rec.acquire_ms;
        rc = write_record(l, v.revision, wall, mono);
        if (rc < 0)
            l->held = 0;
        return rc == 0 ? 1 : rc == FUNCD_ECONFLICT || rc == FUNCD_ENOTFOUND ? 0 : rc;
    }
    if (v.revision != l->rev) {
        /* Another's record, new to us: its TTL counts from now, on our clock. */
        l->rev = v.revision;
        l->seen_at = mono;
        l->seen_ttl = parsed ? rec.ttl_ms : l->ttl_ms;
        snprintf(l->holder, sizeof(l->holder), "%s", parsed ? rec.holder : "");
        return 0;
    }
    if (mono - l->seen_at < (int64_t)l->seen_ttl)
        return 0;
    rc = write_record(l, v.revision, wall, mono); /* expired: take it over */
    return rc == 0 ? 1 : rc == FUNCD_ECONFLICT || rc == FUNCD_ENOTFOUND ? 0 : rc;
}

int funcd_lease_held(const funcd_lease *l, int64_t mono)
{
    return l->held && mono < l->held_until;
}

void funcd_lease_release(funcd_lease *l)
{
    if (!l->held)
        return;
    l->held = 0;
    /* Only our revision: a record another wrote since stays. */
    funcd_port_store_del(l->store, l->key, l->rev, NULL);
}
