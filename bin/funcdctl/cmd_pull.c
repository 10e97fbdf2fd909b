/*
 * pull IMAGE: has the server pull an image into its cache and shows how far
 * it got. The pull itself (ctl_image_pull) is shared with `deploy --image`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "output.h"
#include "progress.h"
#include "util/misc.h"

#define POLL_MS 100

static char *pull_body(const char *image, const char *const *secrets, size_t nsecrets)
{
    cJSON *body = cJSON_CreateObject();
    cJSON *names = body && cJSON_AddStringToObject(body, "image", image)
                       ? cJSON_AddArrayToObject(body, "imagePullSecrets")
                       : NULL;
    char *text = NULL;
    for (size_t i = 0; names && i < nsecrets; i++) {
        cJSON *name = cJSON_CreateString(secrets[i]);
        if (!name || !cJSON_AddItemToArray(names, name)) {
            cJSON_Delete(name);
            names = NULL;
        }
    }
    if (names)
        text = cJSON_PrintUnformatted(body);
    cJSON_Delete(body);
    return text;
}

/* POSTs the pull; *path (malloc()ed) is where to read its progress. */
static int start_pull(ctl_ctx *ctx, ctl_client *client, const char *image,
                      const char *const *secrets, size_t nsecrets, char **path)
{
    char *body = pull_body(image, secrets, nsecrets);
    char *collection = ctl_api_path(client, ctx->ns, "imagepulls", NULL, NULL);
    ctl_response resp = CTL_RESPONSE_INIT;
    cJSON *answer = NULL;
    int rc;
    if (!body || !collection)
        rc = ctl_fail("out of memory");
    else if (ctl_request(client, "POST", collection, body, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 202 && resp.code != 200 && resp.code != 201)
        rc = ctl_report_status(client, &resp, NULL, ctx->ns);
    else if (!(answer = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    else {
        const char *id = ctl_get_string(answer, "id");
        *path = id && *id ? ctl_api_path(client, ctx->ns, "imagepulls", id, NULL) : NULL;
        rc = *path ? 0
                   : ctl_fail("%s accepted the pull of %s but named no pull id to follow",
                              ctl_client_server(client), image);
    }
    cJSON_Delete(answer);
    ctl_response_free(&resp);
    free(body);
    free(collection);
    return rc;
}

/* GETs the pull's state; 0 with *state (owned by the caller) or CTL_EXIT_ERROR. */
static int read_pull(ctl_ctx *ctx, ctl_client *client, const char *path, cJSON **state)
{
    ctl_response resp = CTL_RESPONSE_INIT;
    int rc = 0;
    *state = NULL;
    if (ctl_request(client, "GET", path, NULL, &resp) != 0)
        rc = CTL_EXIT_ERROR;
    else if (resp.code != 200)
        rc = ctl_report_status(client, &resp, "following the pull", ctx->ns);
    else if (!(*state = ctl_response_json(client, &resp)))
        rc = CTL_EXIT_ERROR;
    ctl_response_free(&resp);
    return rc;
}

static uint64_t count_at(const cJSON *state, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(state, key);
    return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

static ctl_pull_counts counts_of(const cJSON *state)
{
    ctl_pull_counts c = {
        .bytes_done = count_at(state, "bytesDone"),
        .bytes_total = count_at(state, "bytesTotal"),
        .layers_done = (unsigned)count_at(state, "layersDone"),
        .layers_total = (unsigned)count_at(state, "layersTotal"),
    };
    return c;
}

/* 1: the pull ended (*rc set and, on success, *digest); 0: still going. */
static int pull_ended(const char *image, const cJSON *state, char **digest, int *rc)
{
    const char *phase = ctl_get_string(state, "phase");
    const char *message = ctl_get_string(state, "message");
    if (phase && !strcmp(phase, "Failed")) {
        /* The server's message usually names the image already. */
        if (message && *message && strstr(message, image))
            *rc = ctl_fail("%s", message);
        else
            *rc = ctl_fail("pulling %s: %s", image, message && *message ? message : "failed");
        return 1;
    }
    if (!phase || strcmp(phase, "Done") != 0)
        return 0;
    const char *d = ctl_get_string(state, "digest");
    *digest = d && *d ? funcd_strdup(d) : NULL;
    *rc = *digest ? 0 : ctl_fail("the server finished pulling %s but named no digest", image);
    return 1;
}

static void pause_poll(void)
{
    struct timespec pause = {0, POLL_MS * 1000000L};
    nanosleep(&pause, NULL);
}

static int follow(ctl_ctx *ctx, ctl_client *client, const char *image, const char *path,
                  volatile sig_atomic_t *stop, int64_t deadline_ms, char **digest,
                  cJSON **final)
{
    ctl_progress pg;
    ctl_progress_init(&pg, image, isatty(STDERR_FILENO));
    int rc = CTL_EXIT_ERROR;
    for (;;) {
        cJSON *state = NULL;
        if (read_pull(ctx, client, path, &state) != 0)
            break;
        ctl_pull_counts c = counts_of(state);
        ctl_progress_update(&pg, &c);
        if (pull_ended(image, state, digest, &rc)) {
            if (final && rc == 0)
                *final = state;
            else
                cJSON_Delete(state);
            break;
        }
        cJSON_Delete(state);
        if (stop && *stop) {
            rc = ctl_fail("interrupted; the server goes on pulling %s", image);
            break;
        }
        if (deadline_ms && funcd_mono_ms() >= deadline_ms) {
            rc = ctl_fail("%s is still being pulled; wait longer with --wait-timeout", image);
            break;
        }
        pause_poll();
    }
    ctl_progress_end(&pg);
    return rc;
}

int ctl_image_pull(ctl_ctx *ctx, const char *image, const char *const *secrets, size_t nsecrets,
                   volatile sig_atomic_t *stop, int64_t deadline_ms, char **digest,
                   cJSON **final)
{
    ctl_client *client = ctl_ctx_client(ctx);
    char *path = NULL;
    *digest = NULL;
    if (final)
        *final = NULL;
    if (!client)
        return CTL_EXIT_ERROR;
    int rc = start_pull(ctx, client, image, secrets, nsecrets, &path);
    if (rc == 0)
        rc = follow(ctx, client, image, path, stop, deadline_ms, digest, final);
    free(path);
    return rc;
}

/* ---- the command ---------------------------------------------------------- */

static int parse(ctl_ctx *ctx, int argc, char **argv, const char **image, const char **secrets,
                 size_t *nsecrets)
{
    int positional_only = 0;
    for (int i = 0; i < argc; i++) {
        const char *value;
        int r = positional_only
                    ? 0
                    : ctl_flag_value(ctx, argc, argv, &i, NULL, "--pull-secret", &value);
        if (r < 0)
            return CTL_EXIT_USAGE;
        if (r > 0) {
            if (!*value)
                return ctl_usage(ctx, "--pull-secret needs the name of a Secret");
            secrets[(*nsecrets)++] = value;
        } else if (!positional_only && !strcmp(argv[i], "--")) {
            positional_only = 1;
        } else if (!positional_only && argv[i][0] == '-' && argv[i][1] != '\0') {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (*image) {
            return ctl_usage(ctx, "pull takes one IMAGE (got \"%s\" and \"%s\")", *image,
                             argv[i]);
        } else {
            *image = argv[i];
        }
    }
    if (!*image || !**image)
        return ctl_usage(ctx, "pull needs the IMAGE to pull, e.g. registry.example.com/fn:v1");
    return 0;
}

static int print_outcome(const ctl_ctx *ctx, const char *image, const char *digest,
                         const cJSON *final)
{
    switch (ctx->output) {
    case CTL_OUT_JSON: ctl_print_json(final, stdout); return 0;
    case CTL_OUT_YAML: return ctl_print_yaml(final, stdout) == 0 ? 0 : CTL_EXIT_ERROR;
    case CTL_OUT_NAME: printf("%s\n", digest); return 0;
    default: printf("pulled %s %s\n", image, digest); return 0;
    }
}

int cmd_pull(ctl_ctx *ctx, int argc, char **argv)
{
    const char *image = NULL;
    const char **secrets = calloc((size_t)argc + 1, sizeof(*secrets));
    size_t nsecrets = 0;
    if (!secrets)
        return ctl_fail("out of memory");
    int rc = parse(ctx, argc, argv, &image, secrets, &nsecrets);
    char *digest = NULL;
    cJSON *final = NULL;
    if (rc == 0)
        rc = ctl_image_pull(ctx, image, secrets, nsecrets, ctl_stop_on_signals(), 0, &digest,
                            &final);
    if (rc == 0)
        rc = print_outcome(ctx, image, digest, final);
    cJSON_Delete(final);
    free(digest);
    free(secrets);
    return rc;
}
