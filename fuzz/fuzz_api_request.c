/*
 * Fuzzes the control-plane request handling (routing, query strings,
 * authentication, bodies) without HTTP framing: the input is
 *   METHOD SP PATH[?QUERY] LF TOKEN LF BODY
 * and goes to funcd_cp_handle against a fresh memory store, twice (so a
 * create followed by a replace/delete of the same object is exercised).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "controlplane/api.h"

static const char *next_line(const char **p, const char *end, size_t *len)
{
    const char *start = *p;
    const char *nl = memchr(start, '\n', (size_t)(end - start));
    const char *stop = nl ? nl : end;
    *len = (size_t)(stop - start);
    *p = nl ? nl + 1 : end;
    return start;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *p = (const char *)data, *end = p + size;
    size_t l1, l2;
    const char *line1 = next_line(&p, end, &l1);
    const char *token = next_line(&p, end, &l2);
    const char *sp = memchr(line1, ' ', l1);
    if (!sp)
        return 0;

    funcd_cp_request req = {0};
    req.method = line1;
    req.method_len = (size_t)(sp - line1);
    req.path = sp + 1;
    req.path_len = l1 - req.method_len - 1;
    const char *q = memchr(req.path, '?', req.path_len);
    if (q) {
        req.query = q + 1;
        req.query_len = req.path_len - (size_t)(q - req.path) - 1;
        req.path_len = (size_t)(q - req.path);
    }
    char auth[256];
    int al = snprintf(auth, sizeof(auth), "Bearer %.*s", (int)(l2 > 200 ? 200 : l2), token);
    req.authorization = auth;
    req.authorization_len = (size_t)al;
    req.body = p;
    req.body_len = (size_t)(end - p);

    funcd_store *store = NULL;
    if (funcd_store_memory_new(&store, 16) < 0)
        return 0;
    funcd_auth a = {0};
    static const char *const all[] = {"*", NULL}, *const def[] = {"default", NULL};
    funcd_auth_add(&a, "admin", FUNCD_ROLE_ADMIN, all);
    funcd_auth_add(&a, "dev", FUNCD_ROLE_DEVELOPER, def);
    funcd_auth_add(&a, "view", FUNCD_ROLE_VIEWER, def);
    funcd_cp cp;
    funcd_cp_init(&cp, store, &a, "{}");
    for (int i = 0; i < 2; i++) {
        funcd_cp_response resp = FUNCD_CP_RESPONSE_INIT;
        funcd_cp_handle(&cp, &req, &resp);
        if (resp.status < 200 || resp.status > 599)
            abort(); /* every request gets a real status */
        if (!resp.watch && !resp.content_type && (!resp.body.data || resp.body.data[0] != '{'))
            abort(); /* and a JSON body */
        funcd_cp_response_free(&resp);
    }
    funcd_auth_clear(&a);
    store->free(store);
    return 0;
}
