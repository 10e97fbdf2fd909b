#include "registry_env.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/misc.h"
#include "net_test.h"

static int run(const char *cmd)
{
    int st = system(cmd);
    if (st != 0)
        fprintf(stderr, "  registry_env: `%s` failed (%d)\n", cmd, st);
    return st == 0 ? 0 : -1;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

int registry_env_tools_present(void)
{
    const char *tools[] = {"/usr/bin/docker-registry", "/usr/bin/skopeo", "/usr/bin/htpasswd",
                           "/usr/bin/openssl", "/usr/bin/cc"};
    for (size_t i = 0; i < sizeof(tools) / sizeof(tools[0]); i++)
        if (access(tools[i], X_OK) != 0)
            return 0;
    return 1;
}

int registry_env_build_fixtures(const char *dir, const char *names)
{
    const char *src = getenv("FUNCD_SOURCE_ROOT");
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "sh '%s/tests/oci/fixtures.sh' '%s' %s", src ? src : ".", dir,
             names);
    return run(cmd);
}

/* An ephemeral loopback port the kernel just handed out (bound, then
 * closed): the registry binds it next, or a test uses it as a port nothing
 * listens on. */
int registry_env_free_port(void)
{
    return test_free_port();
}

static int make_tls(registry_env *e)
{
    char cmd[2048], dir[400];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && printf 'subjectAltName=IP:127.0.0.1\\n' > san.ext && "
             "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
             "-subj /CN=funcd-test-ca -keyout ca.key -out ca.crt 2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null && "
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 "
             "-extfile san.ext -out server.crt 2>/dev/null",
             e->root);
    if (run(cmd) < 0)
        return -1;
    snprintf(e->certs_dir, sizeof(e->certs_dir), "%s/certs.d", e->root);
    snprintf(dir, sizeof(dir), "%s/%s", e->certs_dir, e->addr);
    snprintf(cmd, sizeof(cmd), "mkdir -p '%s' && cp '%s/ca.crt' '%s/ca.crt'", dir, e->root, dir);
    return run(cmd);
}

static int write_config(registry_env *e)
{
    char path[400], text[2048];
    int n = snprintf(text, sizeof(text),
                     "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: false\n"
                     "storage:\n  filesystem:\n    rootdirectory: %s\n"
                     "http:\n  addr: %s\n",
                     e->storage, e->addr);
    if (e->kind == REGISTRY_TLS)
        n += snprintf(text + n, sizeof(text) - (size_t)n,
                      "  tls:\n    certificate: %s/server.crt\n    key: %s/server.key\n", e->root,
                      e->root);
    if (e->kind == REGISTRY_HTPASSWD)
        snprintf(text + n, sizeof(text) - (size_t)n,
                 "auth:\n  htpasswd:\n    realm: funcd-test\n    path: %s/htpasswd\n", e->root);
    snprintf(path, sizeof(path), "%s/config.yml", e->root);
    return write_file(path, text);
}

static int spawn_registry(registry_env *e)
{
    char config[400], log[400];
    snprintf(config, sizeof(config), "%s/config.yml", e->root);
    snprintf(log, sizeof(log), "%s/registry.log", e->root);
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        /* Should the test abort (a sanitizer), the registry goes with it. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl("/usr/bin/docker-registry", "docker-registry", "serve", config, (char *)NULL);
        _exit(127);
    }
    e->pid = pid;
    return 0;
}

static size_t discard(char *p, size_t s, size_t n, void *u)
{
    return s * n;
}

/* Polls /v2/ until it answers (200 or 401); -1 when the registry exited. */
static int wait_ready(registry_env *e)
{
    char url[128], ca[400];
    snprintf(url, sizeof(url), "%s://%s/v2/", e->kind == REGISTRY_TLS ? "https" : "http", e->addr);
    snprintf(ca, sizeof(ca), "%s/ca.crt", e->root);
    for (int i = 0; i < 200; i++) {
        int st;
        if (waitpid(e->pid, &st, WNOHANG) == e->pid) {
            e->pid = 0;
            return -1;
        }
        CURL *h = curl_easy_init();
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 1000L);
        if (e->kind == REGISTRY_TLS)
            curl_easy_setopt(h, CURLOPT_CAINFO, ca);
        long code = 0;
        if (curl_easy_perform(h) == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(h);
        if (code == 200 || code == 401)
            return 0;
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    return -1;
}

int registry_env_start(registry_env *e, registry_kind kind)
{
    memset(e, 0, sizeof(*e));
    e->kind = kind;
    snprintf(e->root, sizeof(e->root), "/tmp/funcd-registry-XXXXXX");
    if (!mkdtemp(e->root))
        return -1;
    snprintf(e->storage, sizeof(e->storage), "%s/storage", e->root);
    char cmd[2048];
    if (kind == REGISTRY_HTPASSWD) {
        snprintf(cmd, sizeof(cmd), "htpasswd -Bbn %s %s > '%s/htpasswd'", REGISTRY_USER,
                 REGISTRY_PASS, e->root);
        if (run(cmd) < 0)
            goto fail;
    }
    /* The port can be taken between pick and bind: try a few. */
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = registry_env_free_port();
        if (port < 0)
            goto fail;
        snprintf(e->addr, sizeof(e->addr), "127.0.0.1:%d", port);
        if ((kind == REGISTRY_TLS && attempt == 0 && make_tls(e) < 0) || write_config(e) < 0 ||
            spawn_registry(e) < 0)
            goto fail;
        if (kind == REGISTRY_TLS && attempt > 0) {
            /* certs.d is per host:port: move the CA to the new name. */
            snprintf(cmd, sizeof(cmd), "rm -rf '%s' && mkdir -p '%s/%s' && cp '%s/ca.crt' '%s/%s/'",
                     e->certs_dir, e->certs_dir, e->addr, e->root, e->certs_dir, e->addr);
            run(cmd);
        }
        if (wait_ready(e) == 0)
            return 0;
        if (e->pid > 0) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
            e->pid = 0;
        }
    }
    fprintf(stderr, "  registry_env: docker-registry did not start (see %s/registry.log)\n",
            e->root);
fail:
    registry_env_stop(e);
    return -1;
}

int registry_env_push(const registry_env *e, const char *layout, const char *repo_tag, int all)
{
    char cmd[4096], tls[600] = "--dest-tls-verify=false", creds[128] = "";
    if (e->kind == REGISTRY_TLS)
        snprintf(tls, sizeof(tls), "--dest-cert-dir '%s/%s'", e->certs_dir, e->addr);
    if (e->kind == REGISTRY_HTPASSWD)
        snprintf(creds, sizeof(creds), "--dest-creds %s:%s", REGISTRY_USER, REGISTRY_PASS);
    snprintf(cmd, sizeof(cmd),
             "skopeo --insecure-policy copy -q %s %s %s oci:'%s':1 docker://%s/%s >/dev/null",
             all ? "--all" : "", tls, creds, layout, e->addr, repo_tag);
    return run(cmd);
}

void registry_env_blob_path(const registry_env *e, const char *digest, char *out, size_t n)
{
    const char *hex = digest + 7;
    snprintf(out, n, "%s/docker/registry/v2/blobs/sha256/%.2s/%s/data", e->storage, hex, hex);
}

void registry_env_stop(registry_env *e)
{
    if (e->pid > 0) {
        kill(e->pid, SIGTERM);
        for (int i = 0; i < 100; i++) {
            if (waitpid(e->pid, NULL, WNOHANG) == e->pid) {
                e->pid = 0;
                break;
            }
            nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
        }
        if (e->pid > 0) {
            kill(e->pid, SIGKILL);
            waitpid(e->pid, NULL, 0);
        }
        e->pid = 0;
    }
    if (e->root[0])
        funcd_remove_tree(e->root);
    e->root[0] = 0;
}
