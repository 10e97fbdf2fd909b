/*
 * fn eval IMAGE: one EvaluateFunction call to the function runner, the way
 * a Porch server makes it. The ResourceList goes out as given; what comes
 * back goes to stdout (the ResourceList) and stderr (the function's log and
 * its results). The request and response messages are encoded by hand:
 * two or three length-delimited fields do not justify generated code.
 */
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <yaml.h>

#include "cli.h"
#include "grpc_client.h"
#include "output.h"

#define DEFAULT_RUNNER "127.0.0.1:9445"
#define DEFAULT_TIMEOUT_MS 30000
#define EVALUATE_PATH "/evaluator.FunctionEvaluator/EvaluateFunction"
/* Far above the runner's own limit (6 MiB by default), so that the runner,
 * not funcdctl, says what is too large. */
#define MAX_MESSAGE (64u << 20)
#define VERSION_TIMEOUT_MS 3000L
#define SUMMARY_DEPTH 8

/* Field numbers of evaluator.proto. */
#define REQ_RESOURCE_LIST 1
#define REQ_IMAGE 2
#define REQ_EXEC_PATH 100
#define RESP_RESOURCE_LIST 1
#define RESP_LOG 2

typedef struct eval_opts {
    const char *image, *file, *exec_path, *runner;
    int64_t timeout_ms;
    const char *token; /* --token / FUNCD_TOKEN, for a runner that asks for one */
    const char *cacert; /* --cacert / FUNCD_CACERT, for a runner serving TLS */
} eval_opts;

/* ---- the command line ----------------------------------------------------- */

static int parse_timeout(const ctl_ctx *ctx, const char *value, int64_t *out)
{
    uint64_t ms;
    if (!strcmp(value, "0")) {
        *out = 0;
        return 0;
    }
    if (funcd_parse_duration_ms(value, &ms) != 0 || ms == 0 || ms > INT64_MAX / 2)
        return ctl_usage(ctx, "--timeout takes a duration such as 30s, 500ms or 2m (0: none), "
                              "not \"%s\"",
                         value);
    *out = (int64_t)ms;
    return 0;
}

static int parse_eval(ctl_ctx *ctx, int argc, char **argv, eval_opts *o)
{
    const char *timeout = NULL;
    int only = 0;
    for (int i = 0; i < argc; i++) {
        int r;
        if (ctl_end_of_flags(argv[i], &only))
            continue;
        if (only) {
            r = 0;
        } else if ((r = ctl_flag_value(ctx, argc, argv, &i, "-f", "--filename", &o->file)) != 0 ||
            (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--exec", &o->exec_path)) != 0 ||
            (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--runner", &o->runner)) != 0 ||
            (r = ctl_flag_value(ctx, argc, argv, &i, NULL, "--timeout", &timeout)) != 0) {
            if (r < 0)
                return CTL_EXIT_USAGE;
        }
        if (r != 0) {
            continue;
        } else if (!only && !strcmp(argv[i], "-")) {
            o->file = "-";
        } else if (ctl_is_flag(argv[i], only)) {
            return ctl_usage(ctx, "unknown flag \"%s\"", argv[i]);
        } else if (o->image) {
            return ctl_usage(ctx, "fn eval takes one IMAGE, got \"%s\" and \"%s\"", o->image,
                             argv[i]);
        } else {
            o->image = argv[i];
        }
    }
    o->timeout_ms = DEFAULT_TIMEOUT_MS;
    if (timeout && parse_timeout(ctx, timeout, &o->timeout_ms) != 0)
        return CTL_EXIT_USAGE;
    if (o->exec_path && !*o->exec_path)
        return ctl_usage(ctx, "--exec needs a PATH under the runner's functions directory");
    /* With --exec the runner needs no image: it names the call in messages. */
    if ((!o->image || !*o->image) && !o->exec_path)
        return ctl_usage(ctx, "fn eval needs the function's IMAGE (or --exec PATH), e.g. "
                              "`funcdctl fn eval set-namespace -f examples/krm/resources.yaml`");
    if (o->file && !*o->file)
        return ctl_usage(ctx, "-f needs a FILE, or - for standard input");
    if (!o->file && isatty(STDIN_FILENO))
        return ctl_usage(ctx, "fn eval reads a ResourceList: give -f FILE, or pipe it in");
    return 0;
}

/* ---- the ResourceList in -------------------------------------------------- */

static int read_input(const char *file, funcd_buf *out)
{
    const char *shown = file && strcmp(file, "-") ? file : "standard input";
    FILE *f = file && strcmp(file, "-") ? fopen(file, "rb") : stdin;
    char chunk[65536];
    size_t n;
    int rc = 0;
    if (!f)
        return ctl_fail("cannot open %s: %s", file, strerror(errno));
    while (rc == 0 && (n = fread(chunk, 1, sizeof(chunk), f)) > 0) {
        if (out->len + n > MAX_MESSAGE)
            rc = ctl_fail("%s is larger than %u MiB", shown, MAX_MESSAGE >> 20);
        else if (funcd_buf_append(out, chunk, n) != 0)
            rc = ctl_fail("out of memory reading %s", shown);
    }
    if (rc == 0 && ferror(f))
        rc = ctl_fail("cannot read %s: %s", shown, strerror(errno));
    if (f != stdin)
        fclose(f);
    if (rc == 0 && out->len == 0)
        rc = ctl_fail("%s is empty: fn eval needs a ResourceList", shown);
    return rc;
}

/*
 * What fn eval reads of a ResourceList, of any size (funcd_api_decode stops
 * at 1 MiB, a runner message may be 6): `kind` and `results` as cJSON, from
 * cJSON for JSON and from libyaml's document loader for YAML.
 */
static cJSON *yaml_to_json(yaml_document_t *doc, yaml_node_t *node, int depth)
{
    if (!node || depth > SUMMARY_DEPTH)
        return cJSON_CreateNull();
    if (node->type == YAML_SCALAR_NODE)
        return cJSON_CreateString((const char *)node->data.scalar.value);
    if (node->type == YAML_SEQUENCE_NODE) {
        cJSON *array = cJSON_CreateArray();
        for (yaml_node_item_t *it = node->data.sequence.items.start;
             array && it < node->data.sequence.items.top; it++)
            cJSON_AddItemToArray(array, yaml_to_json(doc, yaml_document_get_node(doc, *it),
                                                     depth + 1));
        return array;
    }
    cJSON *obj = cJSON_CreateObject();
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start;
         obj && p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        if (key && key->type == YAML_SCALAR_NODE)
            cJSON_AddItemToObject(obj, (const char *)key->data.scalar.value,
                                  yaml_to_json(doc, yaml_document_get_node(doc, p->value),
                                               depth + 1));
    }
    return obj;
}

static cJSON *summarize_yaml(const char *buf, size_t len, funcd_buf *why)
{
    yaml_parser_t parser;
    yaml_document_t doc;
    cJSON *summary = NULL;
    if (!yaml_parser_initialize(&parser))
        return funcd_buf_puts(why, "out of memory"), NULL;
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &doc)) {
        funcd_buf_printf(why, "line %zu: %s", parser.problem_mark.line + 1,
                         parser.problem ? parser.problem : "malformed YAML");
        yaml_parser_delete(&parser);
        return NULL;
    }
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root || root->type != YAML_MAPPING_NODE) {
        funcd_buf_puts(why, root ? "not a YAML mapping" : "no document");
    } else if ((summary = cJSON_CreateObject()) != NULL) {
        for (yaml_node_pair_t *p = root->data.mapping.pairs.start;
             p < root->data.mapping.pairs.top; p++) {
            yaml_node_t *key = yaml_document_get_node(&doc, p->key);
            const char *name = key && key->type == YAML_SCALAR_NODE
                                   ? (const char *)key->data.scalar.value
                                   : "";
            if (!strcmp(name, "kind") || !strcmp(name, "results"))
                cJSON_AddItemToObject(summary, name,
                                      yaml_to_json(&doc, yaml_document_get_node(&doc, p->value), 0));
        }
    }
    yaml_document_delete(&doc);
    yaml_parser_delete(&parser);
    return summary;
}

static cJSON *summarize(const char *buf, size_t len, funcd_buf *why)
{
    size_t i = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n'))
        i++;
    if (i == len || buf[i] != '{')
        return summarize_yaml(buf, len, why);
    cJSON *doc = cJSON_ParseWithLength(buf, len);
    if (!cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        funcd_buf_puts(why, "malformed JSON");
        return NULL;
    }
    return doc;
}

static int check_resource_list(const eval_opts *o, const funcd_buf *in)
{
    const char *shown = o->file && strcmp(o->file, "-") ? o->file : "standard input";
    funcd_buf why = FUNCD_BUF_INIT;
    cJSON *doc = summarize(in->data, in->len, &why);
    const char *kind = ctl_get_string(doc, "kind");
    int rc = 0;
    if (!doc)
        rc = ctl_fail("%s: %s", shown, why.data ? why.data : "cannot be read");
    else if (!kind || strcmp(kind, "ResourceList"))
        rc = ctl_fail("%s is %s%s, not a ResourceList: fn eval sends one ResourceList "
                      "(apiVersion: config.kubernetes.io/v1, kind: ResourceList, items, "
                      "functionConfig)",
                      shown, kind ? "a " : "an object without kind", kind ? kind : "");
    cJSON_Delete(doc);
    funcd_buf_free(&why);
    return rc;
}

/* ---- where the runner is -------------------------------------------------- */

static size_t collect(char *data, size_t size, size_t nmemb, void *userdata)
{
    funcd_buf *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n > 65536 || funcd_buf_append(b, data, n) != 0)
        return 0;
    return n;
}

/* An "every address" host (0.0.0.0, [::]) reached through --server's host;
 * over TLS when the control plane is (funcd serves TLS on every listener
 * or on none). */
static char *reachable_host(const char *addr, const char *server);

static char *reachable(const char *addr, const char *server)
{
    char *a = reachable_host(addr, server);
    if (!a || strncmp(server, "https://", 8) != 0)
        return a;
    funcd_buf b = FUNCD_BUF_INIT;
    char *out = funcd_buf_printf(&b, "https://%s", a) == 0 ? funcd_buf_detach(&b, NULL) : NULL;
    funcd_buf_free(&b);
    free(a);
    return out;
}

static char *reachable_host(const char *addr, const char *server)
{
    const char *port = strrchr(addr, ':');
    size_t host_len = port ? (size_t)(port - addr) : 0;
    int unspecified = host_len == 0 || (host_len == 7 && !strncmp(addr, "0.0.0.0", 7)) ||
                      (host_len == 4 && !strncmp(addr, "[::]", 4));
    char *host = NULL, *out = NULL;
    CURLU *u = unspecified && port ? curl_url() : NULL;
    if (u && curl_url_set(u, CURLUPART_URL, server, CURLU_GUESS_SCHEME) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK) {
        funcd_buf b = FUNCD_BUF_INIT;
        if (funcd_buf_printf(&b, "%s%s", host, port) == 0)
            out = funcd_buf_detach(&b, NULL);
        funcd_buf_free(&b);
    }
    curl_free(host);
    curl_url_cleanup(u);
    return out ? out : strdup(addr);
}

/* The control plane's GET /version "fnRunner", or NULL with *why saying
 * what went wrong (unreachable, refused, no runner). */
static char *runner_from_version(const ctl_ctx *ctx, funcd_buf *why)
{
    char *base = ctl_normalize_url_as(ctx->server, ctx->cacert && *ctx->cacert ? "https://"
                                                                                 : "http://");
    char *addr = NULL;
    funcd_buf url = FUNCD_BUF_INIT, body = FUNCD_BUF_INIT, auth = FUNCD_BUF_INIT;
    struct curl_slist *headers = NULL;
    CURL *curl = curl_easy_init();
    long code = 0;
    if (!base || !curl || funcd_buf_printf(&url, "%s/version", base) != 0)
        goto out;
    if (ctx->token && *ctx->token && funcd_buf_printf(&auth, "Authorization: Bearer %s",
                                                      ctx->token) == 0)
        headers = curl_slist_append(NULL, auth.data);
    curl_easy_setopt(curl, CURLOPT_URL, url.data);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, VERSION_TIMEOUT_MS);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
    ctl_curl_tls(curl, ctx->cacert);
    CURLcode rc = curl_easy_perform(curl);
    if (rc != CURLE_OK) {
        const char *tls = ctl_tls_advice(rc);
        funcd_buf_printf(why, "cannot reach funcd at %s to ask where its function runner is: "
                         "%s%s%s%s", base, curl_easy_strerror(rc), tls ? " (" : "",
                         tls ? tls : "", tls ? ")" : "");
        goto out;
    }
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &code);
    if (code != 200) {
        funcd_buf_printf(why, "funcd at %s answered HTTP %ld to GET /version%s", base, code,
                         code == 401 ? " (set --token or FUNCD_TOKEN)" : "");
        goto out;
    }
    cJSON *version = cJSON_ParseWithLength(body.data, body.len);
    const char *runner = ctl_get_string(version, "fnRunner");
    if (runner && *runner)
        addr = reachable(runner, base);
    else
        funcd_buf_printf(why, "funcd at %s runs no function runner (see --fn-runner-listen)",
                         base);
    cJSON_Delete(version);
out:
    curl_slist_free_all(headers);
    if (curl)
        curl_easy_cleanup(curl);
    funcd_buf_free(&url);
    funcd_buf_free(&body);
    funcd_buf_free(&auth);
    free(base);
    return addr;
}

/* --runner, FUNCD_FN_RUNNER, the control plane's word, or (only when no
 * control plane was named: a runner on its own is a normal setup) the
 * default. NULL with the message printed. */
static char *runner_addr(const ctl_ctx *ctx, const eval_opts *o)
{
    const char *env = getenv("FUNCD_FN_RUNNER");
    if (o->runner && *o->runner)
        return strdup(o->runner);
    if (env && *env)
        return strdup(env);
    funcd_buf why = FUNCD_BUF_INIT;
    char *addr = runner_from_version(ctx, &why);
    if (!addr && ctx->server_explicit)
        ctl_fail("%s; name the runner with --runner or FUNCD_FN_RUNNER",
                 why.data ? why.data : "cannot ask funcd where its function runner is");
    else if (!addr)
        addr = strdup(DEFAULT_RUNNER);
    funcd_buf_free(&why);
    return addr;
}

/* ---- the call ------------------------------------------------------------- */

static int encode_request(const eval_opts *o, const funcd_buf *rl, funcd_buf *out)
{
    if (ctl_pb_put_bytes(out, REQ_RESOURCE_LIST, rl->data, rl->len) != 0 ||
        (o->image && ctl_pb_put_bytes(out, REQ_IMAGE, o->image, strlen(o->image)) != 0) ||
        (o->exec_path &&
         ctl_pb_put_bytes(out, REQ_EXEC_PATH, o->exec_path, strlen(o->exec_path)) != 0))
        return ctl_fail("out of memory");
    return 0;
}

typedef struct eval_response {
    const uint8_t *rl, *log;
    size_t rl_len, log_len;
} eval_response;

static int decode_response(const funcd_buf *msg, eval_response *out)
{
    ctl_pb_reader r = {(const uint8_t *)msg->data, (const uint8_t *)msg->data + msg->len};
    ctl_pb_field f;
    int more;
    memset(out, 0, sizeof(*out));
    while ((more = ctl_pb_next(&r, &f)) > 0) {
        if (f.wire_type != CTL_PB_LEN)
            continue; /* a field of ours is bytes; anything else is someone's extension */
        if (f.number == RESP_RESOURCE_LIST) {
            out->rl = f.data;
            out->rl_len = f.len;
        } else if (f.number == RESP_LOG) {
            out->log = f.data;
            out->log_len = f.len;
        }
    }
    return more < 0 ? ctl_fail("the runner's response is not an EvaluateFunctionResponse") : 0;
}

static void write_all(FILE *f, const uint8_t *data, size_t len)
{
    if (len > 0) {
        fwrite(data, 1, len, f);
        if (data[len - 1] != '\n' && isatty(fileno(f)))
            fputc('\n', f);
    }
    fflush(f);
}

/* "Deployment/web", with ", field spec.replicas" when the result names one. */
static void describe_ref(const cJSON *result, funcd_buf *out)
{
    const char *kind = ctl_get_string(result, "resourceRef.kind");
    const char *name = ctl_get_string(result, "resourceRef.name");
    const char *field = ctl_get_string(result, "field.path");
    if (kind || name)
        funcd_buf_printf(out, "%s/%s", kind ? kind : "?", name ? name : "?");
    if (field && *field)
        funcd_buf_printf(out, "%sfield %s", out->len ? ", " : "", field);
}

/* The results on stderr; the number of severity "error". */
static int report_results(const eval_response *resp)
{
    funcd_buf why = FUNCD_BUF_INIT;
    cJSON *doc = summarize((const char *)resp->rl, resp->rl_len, &why);
    const cJSON *result;
    int errors = 0;
    if (!doc && resp->rl_len > 0)
        ctl_warn("the function's output is not a ResourceList (%s)", why.data ? why.data : "?");
    cJSON_ArrayForEach(result, cJSON_GetObjectItemCaseSensitive(doc, "results"))
    {
        const char *severity = ctl_get_string(result, "severity");
        const char *message = ctl_get_string(result, "message");
        funcd_buf ref = FUNCD_BUF_INIT;
        if (!severity || !*severity)
            severity = "info";
        errors += !strcmp(severity, "error");
        describe_ref(result, &ref);
        fprintf(stderr, "%s: %s%s%s%s\n", severity, message ? message : "(no message)",
                ref.len ? " (" : "", ref.len ? ref.data : "", ref.len ? ")" : "");
        funcd_buf_free(&ref);
    }
    cJSON_Delete(doc);
    funcd_buf_free(&why);
    return errors;
}

static int report_failure(const ctl_grpc_result *res)
{
    const char *message = res->message.len ? res->message.data : "the runner said no more";
    if (res->status == CTL_GRPC_TRANSPORT && strstr(message, " TLS "))
        return ctl_fail("%s", message); /* it says what to do */
    if (res->status == CTL_GRPC_TRANSPORT)
        return ctl_fail("%s (is funcd running, with --fn-runner-listen at that address? "
                        "set --runner or FUNCD_FN_RUNNER)",
                        message);
    return ctl_fail("%s (%s)", message, ctl_grpc_status_name(res->status));
}

static int evaluate(const eval_opts *o, const char *runner, const funcd_buf *request)
{
    ctl_grpc_call call = {
        .addr = runner,
        .path = EVALUATE_PATH,
        .request = (const uint8_t *)request->data,
        .request_len = request->len,
        .timeout_ms = o->timeout_ms,
        .max_response = MAX_MESSAGE,
        .token = o->token,
        .cacert = o->cacert,
    };
    ctl_grpc_result res = CTL_GRPC_RESULT_INIT;
    eval_response resp;
    int rc;
    if (ctl_grpc_unary(&call, &res) != CTL_GRPC_OK)
        rc = report_failure(&res);
    else if ((rc = decode_response(&res.response, &resp)) == 0) {
        write_all(stderr, resp.log, resp.log_len);
        write_all(stdout, resp.rl, resp.rl_len);
        rc = report_results(&resp) > 0 ? CTL_EXIT_ERROR : CTL_EXIT_OK;
    }
    ctl_grpc_result_free(&res);
    return rc;
}

static int cmd_fn_eval(ctl_ctx *ctx, int argc, char **argv)
{
    eval_opts o = {.token = ctx->token, .cacert = ctx->cacert};
    funcd_buf input = FUNCD_BUF_INIT, request = FUNCD_BUF_INIT;
    char *runner = NULL;
    int rc = parse_eval(ctx, argc, argv, &o);
    if (rc == 0)
        rc = read_input(o.file, &input);
    if (rc == 0)
        rc = check_resource_list(&o, &input);
    if (rc == 0)
        rc = encode_request(&o, &input, &request);
    if (rc == 0 && !(runner = runner_addr(ctx, &o)))
        rc = CTL_EXIT_ERROR;
    if (rc == 0)
        rc = evaluate(&o, runner, &request);
    free(runner);
    funcd_buf_free(&input);
    funcd_buf_free(&request);
    return rc;
}

int cmd_fn(ctl_ctx *ctx, int argc, char **argv)
{
    if (argc == 0)
        return ctl_usage(ctx, "fn needs a subcommand: eval");
    if (!strcmp(argv[0], "eval"))
        return cmd_fn_eval(ctx, argc - 1, argv + 1);
    return ctl_usage(ctx, "unknown fn subcommand \"%s\": use eval", argv[0]);
}
