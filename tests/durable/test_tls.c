/*
 * TLS on the real daemon (issue 14): `funcd --tls self-signed --data-dir D`
 * makes D/tls.crt and D/tls.key (mode 0600) and prints the certificate's
 * SHA-256 fingerprint; a restart serves the same certificate. Through it:
 * funcdctl --cacert lists functions over https and fails with a certificate
 * error without it; the data plane serves a function over HTTP/1.1 and
 * HTTP/2 (ALPN h2) to a client trusting the certificate; the control plane
 * offers only http/1.1 and still refuses a body without a token before
 * reading it; the function runner answers EvaluateFunction over TLS (ALPN
 * h2) to funcdctl's gRPC client; the edge's 413 from a request's head works
 * under TLS.
 */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../e2e/client.h"
#include "../harness.h"
#include "daemon.h"
#include "util/buf.h"
#include "util/misc.h"

typedef struct tls_test {
    char dir[256], data[300], fn[300], log[300], cert[340], key[340];
    char fingerprint[128];
    dd_daemon d;
} tls_test;

/* ---- a libcurl request that says which HTTP version it got --------------- */

typedef struct got {
    long status;
    long http_version; /* CURL_HTTP_VERSION_1_1, CURL_HTTP_VERSION_2_0 */
    CURLcode rc;
    char error[CURL_ERROR_SIZE];
    funcd_buf body;
} got;

static size_t on_body(char *data, size_t size, size_t n, void *payload)
{
    return funcd_buf_append(payload, data, size * n) < 0 ? 0 : size * n;
}

/* METHOD url (body: NULL none), trusting `cacert` (NULL: the system's CAs),
 * over HTTP/2 when `h2` (ALPN; HTTP/1.1 if the server declines). */
static void request(const char *method, const char *url, const char *cacert, int h2,
                    const char *token, const char *body, got *g)
{
    funcd_buf_free(&g->body);
    memset(g, 0, sizeof(*g));
    CURL *c = curl_easy_init();
    struct curl_slist *hl = curl_slist_append(NULL, "Expect:");
    char auth[128];
    if (token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", token);
        hl = curl_slist_append(hl, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, g->error);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &g->body);
    curl_easy_setopt(c, CURLOPT_HTTP_VERSION,
                     h2 ? (long)CURL_HTTP_VERSION_2TLS : (long)CURL_HTTP_VERSION_1_1);
    if (cacert)
        curl_easy_setopt(c, CURLOPT_CAINFO, cacert);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    }
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    g->rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &g->status);
    curl_easy_getinfo(c, CURLINFO_HTTP_VERSION, &g->http_version);
    curl_easy_cleanup(c);
    curl_slist_free_all(hl);
    if (!g->body.data)
        funcd_buf_puts(&g->body, "");
}

/* ---- funcdctl as a child process ----------------------------------------- */

/* The whole of `path`, malloc()ed (NUL-terminated), or NULL. */
static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "re");
    funcd_buf b = FUNCD_BUF_INIT;
    char chunk[4096];
    size_t n;
    while (f && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        funcd_buf_append(&b, chunk, n);
    if (f)
        fclose(f);
    funcd_buf_puts(&b, "");
    *len = b.len;
    return f ? funcd_buf_detach(&b, NULL) : (funcd_buf_free(&b), NULL);
}

static const char *funcdctl_path(void)
{
    static char path[1024];
    const char *root = getenv("FUNCD_BUILD_ROOT");
    snprintf(path, sizeof(path), "%s/bin/funcdctl/funcdctl", root ? root : ".");
    return path;
}

/* Runs funcdctl with `args` (NULL-terminated, after argv[0]); stdout and
 * stderr into `out` and `err`. Its exit code, or -1. */
static int funcdctl(const char *const *args, funcd_buf *out, funcd_buf *err, const char *dir)
{
    char op[400], ep[400];
    snprintf(op, sizeof(op), "%s/ctl.out", dir);
    snprintf(ep, sizeof(ep), "%s/ctl.err", dir);
    const char *argv[32] = {funcdctl_path()};
    size_t n = 1;
    for (; args[n - 1] && n < 31; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int o = open(op, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        int e = open(ep, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
            _exit(127);
        unsetenv("FUNCD_CACERT");
        unsetenv("FUNCD_SERVER");
        unsetenv("FUNCD_FN_RUNNER");
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    /* funcdctl gives up on its own (connect and request timeouts). */
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    funcd_buf_reset(out);
    funcd_buf_reset(err);
    char *text;
    size_t len;
    if ((text = read_text(op, &len)) != NULL)
        funcd_buf_append(out, text, len);
    free(text);
    if ((text = read_text(ep, &len)) != NULL)
        funcd_buf_append(err, text, len);
    free(text);
    funcd_buf_puts(out, "");
    funcd_buf_puts(err, "");
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- the daemon ------------------------------------------------------------ */

/* The fingerprint funcd printed ("SHA-256 fingerprint AB:..."), into t. */
static int read_fingerprint(tls_test *t)
{
    FILE *f = fopen(t->log, "re");
    char line[1024];
    t->fingerprint[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *at = strstr(line, "SHA-256 fingerprint ");
        if (at) {
            at += strlen("SHA-256 fingerprint ");
            at[strcspn(at, "\r\n")] = '\0';
            snprintf(t->fingerprint, sizeof(t->fingerprint), "%s", at);
        }
    }
    if (f)
        fclose(f);
    return strlen(t->fingerprint) == 95 ? 0 : -1;
}

static int start(tls_test *t)
{
    static const char *const extra[] = {"--tls", "self-signed", NULL};
    const char *args[40];
    dd_default_args(args, 40, "--data-dir", t->data, extra);
    if (dd_start(&t->d, t->log, args) < 0)
        return -1;
    return read_fingerprint(t);
}

/* The control plane's URL + path. */
static void cp_url(const tls_test *t, const char *path, char *out, size_t len)
{
    snprintf(out, len, "%s%s", t->d.cp, path);
}

static void tls_body(tls_test *t)
{
    char url[600];
    got g = {0};
    funcd_buf out = FUNCD_BUF_INIT, err = FUNCD_BUF_INIT;

    /* First start: the pair is made, private, and announced. */
    CHECK(start(t) == 0);
    CHECK(strncmp(t->d.cp, "https://", 8) == 0);
    CHECK(strncmp(t->d.dp, "https://", 8) == 0);
    CHECK(dd_log_has(t->log, "(made now)"));
    struct stat st;
    CHECK(stat(t->key, &st) == 0);
    CHECK_INT(st.st_mode & 0777, 0600);
    CHECK(stat(t->cert, &st) == 0);
    CHECK_INT(st.st_mode & 077, 0);
    char first[128];
    snprintf(first, sizeof(first), "%s", t->fingerprint);

    /* A restart serves the same certificate. */
    CHECK(kill(t->d.pid, SIGTERM) == 0);
    CHECK(dd_wait_exit(&t->d, 30000));
    CHECK(start(t) == 0);
    CHECK_STR(t->fingerprint, first);
    CHECK(dd_log_has(t->log, "(kept from before)"));

    /* funcdctl over https: with the certificate as CA it works; without it
     * the error says it is the certificate. */
    const char *with_ca[] = {"--server", t->d.cp, "--token", DD_TOKEN, "--cacert", t->cert,
                             "get", "functions", NULL};
    CHECK_INT(funcdctl(with_ca, &out, &err, t->dir), 0);
    if (harness_failed_now)
        fprintf(stderr, "  funcdctl: %s\n", err.data);
    const char *without[] = {"--server", t->d.cp, "--token", DD_TOKEN, "get", "functions", NULL};
    CHECK_INT(funcdctl(without, &out, &err, t->dir), 1);
    CHECK_CONTAINS(err.data, "certificate is not trusted");
    CHECK_CONTAINS(err.data, "--cacert");

    /* The control plane: http/1.1 only, even to a client asking for h2;
     * a body without a token is still refused before it is read. */
    cp_url(t, "/healthz", url, sizeof(url));
    request("GET", url, t->cert, 1, NULL, NULL, &g);
    CHECK_INT(g.status, 200);
    CHECK_INT(g.http_version, CURL_HTTP_VERSION_1_1);
    cp_url(t, DD_NS "/functions", url, sizeof(url));
    request("POST", url, t->cert, 0, NULL, "{}", &g);
    CHECK_INT(g.status, 401);
    CHECK_CONTAINS(g.body.data, "missing bearer token");

    /* A function on the data plane, over HTTP/1.1 and HTTP/2. */
    char body[1024];
    snprintf(body, sizeof(body),
             "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Function\",\"metadata\":{\"name\":"
             "\"tls-fn\"},\"spec\":{\"runtime\":\"native\",\"handler\":\"worker\","
             "\"source\":{\"path\":\"%s\"},\"edge\":{\"limits\":{\"maxBodyBytes\":100}}}}",
             t->fn);
    cp_url(t, DD_NS "/functions/tls-fn", url, sizeof(url));
    request("PUT", url, t->cert, 0, DD_TOKEN, body, &g);
    CHECK_INT(g.status, 201);
    snprintf(url, sizeof(url), "%s/fn/default/tls-fn/hello", t->d.dp);
    int64_t t0 = e2e_now_ms();
    do {
        request("GET", url, t->cert, 0, NULL, NULL, &g);
    } while (g.status != 200 && e2e_now_ms() - t0 < 30000 && (dd_sleep_ms(50), 1));
    CHECK_INT(g.status, 200);
    CHECK_INT(g.http_version, CURL_HTTP_VERSION_1_1);
    request("GET", url, t->cert, 1, NULL, NULL, &g);
    CHECK_INT(g.status, 200);
    CHECK_INT(g.http_version, CURL_HTTP_VERSION_2_0);
    request("GET", url, NULL, 1, NULL, NULL, &g);
    CHECK_INT(g.status, 0);
    CHECK_INT(g.rc, CURLE_PEER_FAILED_VERIFICATION);
    /* The edge's 413 from the head works on the decrypted stream too. */
    char big[1001];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    request("POST", url, t->cert, 0, NULL, big, &g);
    CHECK_INT(g.status, 413);
    request("POST", url, t->cert, 1, NULL, big, &g);
    CHECK_INT(g.status, 413);

    /* The function runner over TLS: a real EvaluateFunction (the builtin
     * set-namespace), its address and scheme taken from /version. */
    char rl[400];
    snprintf(rl, sizeof(rl), "%s/rl.json", t->dir);
    static const char rl_json[] =
        "{\"apiVersion\":\"config.kubernetes.io/v1\",\"kind\":\"ResourceList\",\"items\":"
        "[{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm\"}}],"
        "\"functionConfig\":{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":"
        "{\"name\":\"fc\"},\"data\":{\"namespace\":\"over-tls\"}}}";
    int fd = open(rl, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    CHECK(fd >= 0 && funcd_write_all(fd, rl_json, sizeof(rl_json) - 1) == 0);
    if (fd >= 0)
        close(fd);
    const char *eval[] = {"--server", t->d.cp, "--token", DD_TOKEN, "--cacert", t->cert, "fn",
                          "eval", "set-namespace", "-f", rl, NULL};
    CHECK_INT(funcdctl(eval, &out, &err, t->dir), 0);
    CHECK_CONTAINS(out.data, "over-tls");
    if (harness_failed_now)
        fprintf(stderr, "  funcdctl fn eval: %s\n", err.data);
    const char *eval_untrusted[] = {"--server", t->d.cp, "--token", DD_TOKEN, "--cacert",
                                    t->cert, "fn", "eval", "set-namespace", "-f", rl,
                                    "--runner", NULL, NULL};
    /* The runner's address, with https:// and without the CA: refused. */
    char runner[200];
    FILE *f = fopen(t->log, "re");
    char line[1024];
    runner[0] = '\0';
    while (f && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, "function runner listening on TLS ");
        if (p) {
            p += strlen("function runner listening on TLS ");
            p[strcspn(p, "\r\n")] = '\0';
            snprintf(runner, sizeof(runner), "https://%s", p);
        }
    }
    if (f)
        fclose(f);
    CHECK(runner[0] != '\0');
    eval_untrusted[4] = "--namespace"; /* drop --cacert: keep the argument count */
    eval_untrusted[5] = "default";
    eval_untrusted[12] = runner;
    CHECK_INT(funcdctl(eval_untrusted, &out, &err, t->dir), 1);
    CHECK_CONTAINS(err.data, "certificate is not trusted");

    funcd_buf_free(&g.body);
    funcd_buf_free(&out);
    funcd_buf_free(&err);
}

TEST(tls_self_signed_persists_and_serves_every_listener)
{
    tls_test t = {0};
    if (dd_tempdir(t.dir, sizeof(t.dir), "tls") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    chmod(t.dir, 0755); /* sandboxed workers run as nobody and must reach their code */
    snprintf(t.data, sizeof(t.data), "%s/data", t.dir);
    snprintf(t.fn, sizeof(t.fn), "%s/fn", t.dir);
    snprintf(t.log, sizeof(t.log), "%s/funcd.log", t.dir);
    snprintf(t.cert, sizeof(t.cert), "%s/tls.crt", t.data);
    snprintf(t.key, sizeof(t.key), "%s/tls.key", t.data);
    char exe[400];
    snprintf(exe, sizeof(exe), "%s/worker", t.fn);
    if (mkdir(t.fn, 0755) == 0 && funcd_link_or_copy(SERVING_WORKER, exe, 0755) == 0)
        tls_body(&t);
    else
        FAILF("cannot copy the worker into %s", t.fn);
    if (harness_failed_now)
        dd_dump_log(&t.d);
    dd_stop(&t.d);
    funcd_remove_tree(t.dir);
}

/* A certificate file that is not there, or a key of another certificate:
 * funcd does not start, and says which file. */
TEST(tls_bad_files_are_named)
{
    char dir[256], log[300], cert[300], key[300], other[300];
    if (dd_tempdir(dir, sizeof(dir), "tlsbad") < 0)
        FAILF("mkdtemp: %s", strerror(errno));
    snprintf(log, sizeof(log), "%s/funcd.log", dir);
    snprintf(cert, sizeof(cert), "%s/missing.crt", dir);
    snprintf(key, sizeof(key), "%s/missing.key", dir);
    const char *extra[] = {"--tls-cert", cert, "--tls-key", key, NULL};
    const char *args[40];
    dd_default_args(args, 40, "--memory", NULL, extra);
    CHECK_INT(dd_run(log, args, 20000), 1);
    char expect[400];
    snprintf(expect, sizeof(expect), "cannot read the TLS certificate %s", cert);
    CHECK(dd_log_has(log, expect));

    /* Two self-signed pairs: the first's certificate with the second's key. */
    char a[300], b[300];
    snprintf(a, sizeof(a), "%s/a", dir);
    snprintf(b, sizeof(b), "%s/b", dir);
    const char *ss[] = {"--tls", "self-signed", "--state-dir", a, NULL};
    dd_default_args(args, 40, "--memory", NULL, ss);
    dd_daemon d = {0};
    CHECK(dd_start(&d, log, args) == 0);
    dd_stop(&d);
    ss[3] = b;
    dd_default_args(args, 40, "--memory", NULL, ss);
    CHECK(dd_start(&d, log, args) == 0);
    dd_stop(&d);
    snprintf(cert, sizeof(cert), "%s/tls.crt", a);
    snprintf(other, sizeof(other), "%s/tls.key", b);
    const char *mismatch[] = {"--tls-cert", cert, "--tls-key", other, NULL};
    dd_default_args(args, 40, "--memory", NULL, mismatch);
    CHECK_INT(dd_run(log, args, 20000), 1);
    snprintf(expect, sizeof(expect), "the TLS key %s does not belong to the certificate %s",
             other, cert);
    CHECK(dd_log_has(log, expect));
    if (harness_failed_now)
        dd_dump_log(&d);

    /* The self-signed key made readable by others: refused, named. */
    chmod(other, 0644);
    dd_default_args(args, 40, "--memory", NULL, ss);
    CHECK_INT(dd_run(log, args, 20000), 1);
    snprintf(expect, sizeof(expect), "the TLS key %s can be read by group or others", other);
    CHECK(dd_log_has(log, expect));
    funcd_remove_tree(dir);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    e2e_client_global_init();
    RUN(tls_self_signed_persists_and_serves_every_listener);
    RUN(tls_bad_files_are_named);
    e2e_client_global_cleanup();
    return HARNESS_END();
}
