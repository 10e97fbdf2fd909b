/*
 * Egress policy end to end (issue 19, docs/egress.md): sandboxed python3 and
 * node functions with `spec.network: egress` reach "outside" servers the
 * test runs on 127.0.0.2 and 127.0.0.3 only through the proxy funcd placed
 * in their namespace, only where an EgressPolicy allows, and resolve names
 * only through funcd's DNS server (its upstream: a fake DNS server of the
 * test on 127.0.0.4). One meson test per case.
 */
#include "../harness.h"
#include "../egress_fake.h"
#include "test_serving_common.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/stat.h>

/* ---- the outside ---------------------------------------------------------- */

static fake_dns dns;
static fake_origin o2, o3;
static char dns_upstream[64];

/* A TLS origin on 127.0.0.2 serving "secure.test", its certificate from a
 * CA the test makes (ca.pem, given to the functions). */
typedef struct tls_origin {
    int fd;
    uint16_t port;
    SSL_CTX *ctx;
    pthread_t thread;
    atomic_int stop;
    atomic_int served;
} tls_origin;

static tls_origin tlso;
static char ca_dir[256]; /* ca.pem, srv.pem, srv.key */

static void *tls_main(void *arg)
{
    tls_origin *t = arg;
    while (!atomic_load(&t->stop)) {
        struct pollfd p = {t->fd, POLLIN, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept4(t->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        struct timeval tv = {10, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        SSL *ssl = SSL_new(t->ctx);
        SSL_set_fd(ssl, c);
        if (SSL_accept(ssl) == 1) {
            char head[4096];
            int len = 0, n;
            while (len < (int)sizeof(head) - 1 &&
                   (n = SSL_read(ssl, head + len, (int)sizeof(head) - 1 - len)) > 0) {
                len += n;
                head[len] = '\0';
                if (strstr(head, "\r\n\r\n"))
                    break;
            }
            static const char answer[] = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                                         "Content-Length: 25\r\nConnection: close\r\n\r\n"
                                         "hello over tls, verified\n";
            SSL_write(ssl, answer, (int)sizeof(answer) - 1);
            SSL_shutdown(ssl);
            atomic_fetch_add(&t->served, 1);
        }
        SSL_free(ssl);
        close(c);
    }
    return NULL;
}

/* The test CA and secure.test's certificate, made with the openssl program. */
static int make_certs(void)
{
    if (sv_tempdir(ca_dir, sizeof(ca_dir)) < 0)
        return -1;
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf 'subjectAltName=DNS:secure.test\\nextendedKeyUsage=serverAuth\\n' > "
             "ext && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
             "-keyout ca.key -out ca.pem -days 2 -subj /CN=funcd-egress-test-ca "
             "-addext basicConstraints=critical,CA:TRUE "
             "-addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null && "
             "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout srv.key "
             "-out srv.csr -subj /CN=secure.test 2>/dev/null && "
             "openssl x509 -req -in srv.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out srv.pem "
             "-days 2 -extfile ext 2>/dev/null && chmod 0755 . && chmod 0644 ca.pem",
             ca_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int tls_start(void)
{
    if (make_certs() < 0)
        return -1;
    char cert[512], key[512];
    snprintf(cert, sizeof(cert), "%s/srv.pem", ca_dir);
    snprintf(key, sizeof(key), "%s/srv.key", ca_dir);
    tlso.ctx = SSL_CTX_new(TLS_server_method());
    if (!tlso.ctx || SSL_CTX_use_certificate_file(tlso.ctx, cert, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_use_PrivateKey_file(tlso.ctx, key, SSL_FILETYPE_PEM) != 1)
        return -1;
    tlso.fd = fake_bind("127.0.0.2", SOCK_STREAM, &tlso.port);
    if (tlso.fd < 0)
        return -1;
    return pthread_create(&tlso.thread, NULL, tls_main, &tlso) == 0 ? 0 : -1;
}

static void tls_stop(void)
{
    if (!tlso.ctx)
        return;
    if (tlso.fd >= 0) {
        atomic_store(&tlso.stop, 1);
        pthread_join(tlso.thread, NULL);
        close(tlso.fd);
    }
    SSL_CTX_free(tlso.ctx);
    tlso.ctx = NULL;
}

/* Starts the outside and returns the platform option naming its DNS. */
static funcd_option *outside_up(void)
{
    fake_dns_add(&dns, "allowed.test", "127.0.0.2");
    fake_dns_add(&dns, "secure.test", "127.0.0.2");
    fake_dns_add(&dns, "other.test", "127.0.0.3");
    fake_dns_add(&dns, "unlisted.test", "127.0.0.3");
    if (fake_dns_start(&dns, "127.0.0.4") < 0 || fake_origin_start(&o2, "127.0.0.2") < 0 ||
        fake_origin_start(&o3, "127.0.0.3") < 0)
        return NULL;
    snprintf(dns_upstream, sizeof(dns_upstream), "127.0.0.4:%u", dns.port);
    return funcd_with_egress_dns_upstream(dns_upstream);
}

static void outside_down(void)
{
    tls_stop();
    if (dns.fd > 0)
        fake_dns_stop(&dns);
    if (o2.fd > 0)
        fake_origin_stop(&o2);
    if (o3.fd > 0)
        fake_origin_stop(&o3);
}

#define EG_TEST_WITH(name, opt_b)                                                                  \
    static void name##_body(env *e);                                                               \
    TEST(name)                                                                                     \
    {                                                                                              \
        env e_;                                                                                    \
        funcd_option *dns_ = outside_up();                                                         \
        if (!dns_ || env_up_with(&e_, NULL, dns_, (opt_b), NULL) < 0) {                            \
            env_down(&e_);                                                                         \
            outside_down();                                                                        \
            sv_cleanup();                                                                          \
            FAILF("cannot start: %s", funcd_error_last()->message);                                \
        }                                                                                          \
        name##_body(&e_);                                                                          \
        env_down(&e_);                                                                             \
        outside_down();                                                                            \
        sv_cleanup();                                                                              \
        char left_[512];                                                                           \
        if (sv_children(left_, sizeof(left_)))                                                     \
            FAILF("processes left behind after the platform was freed: %s", left_);                \
    }                                                                                              \
    static void name##_body(env *e)

#define EG_TEST(name) EG_TEST_WITH(name, NULL)

/* ---- the functions ---------------------------------------------------------- */

/* op=get&host=H&port=P&path=X[&scheme=https][&direct=1]: urllib through the
 * injected proxy (direct=1: with NO_PROXY cleared, so 127.0.0.1 goes through
 * the proxy too); op=connect&host=H&port=P: a direct connect(); op=dns&name=N:
 * getaddrinfo; op=env: the proxy variables. */
static const char python_fn[] =
    "import os, socket, ssl, urllib.request, urllib.error\n"
    "def handler(req):\n"
    "    a = req.args\n"
    "    op = a.get('op')\n"
    "    if op == 'get':\n"
    "        if a.get('direct'):\n"
    "            os.environ.pop('NO_PROXY', None); os.environ.pop('no_proxy', None)\n"
    "        url = '%s://%s:%s%s' % (a.get('scheme', 'http'), a['host'], a['port'], a.get('path', '/'))\n"
    "        try:\n"
    "            with urllib.request.urlopen(url, timeout=20) as r:\n"
    "                return 200, {}, {'status': r.status, 'body': r.read().decode()}\n"
    "        except urllib.error.HTTPError as e:\n"
    "            return 200, {}, {'status': e.code, 'body': e.read().decode()}\n"
    "        except Exception as e:\n"
    "            return 200, {}, {'status': -1, 'body': repr(e)}\n"
    "    if op == 'connect':\n"
    "        s = socket.socket()\n"
    "        s.settimeout(5)\n"
    "        try:\n"
    "            s.connect((a['host'], int(a['port'])))\n"
    "            return 200, {}, {'connected': True}\n"
    "        except OSError as e:\n"
    "            return 200, {}, {'connected': False, 'error': repr(e)}\n"
    "        finally:\n"
    "            s.close()\n"
    "    if op == 'dns':\n"
    "        try:\n"
    "            infos = socket.getaddrinfo(a['name'], 80, proto=socket.IPPROTO_TCP)\n"
    "            return 200, {}, {'addrs': sorted({i[4][0] for i in infos})}\n"
    "        except socket.gaierror as e:\n"
    "            return 200, {}, {'addrs': [], 'error': e.errno, 'nxdomain': e.errno == socket.EAI_NONAME}\n"
    "    return 200, {}, {'proxy': os.environ.get('HTTP_PROXY', ''), 'resolv': open('/etc/resolv.conf').read() if os.path.exists('/etc/resolv.conf') else ''}\n";

/* The same operations in node: http.request to the proxy named by
 * HTTP_PROXY (node's own http does not read it), CONNECT + tls.connect for
 * https (the CA from NODE_EXTRA_CA_CERTS), dns.lookup, net.connect. */
static const char node_fn[] =
    "'use strict';\n"
    "const http = require('http'), tls = require('tls'), net = require('net'), dns = require('dns');\n"
    "function viaProxy(a) {\n"
    "  const p = new URL(process.env.HTTP_PROXY);\n"
    "  const target = `${a.host}:${a.port}`;\n"
    "  return new Promise((resolve) => {\n"
    "    if (a.scheme !== 'https') {\n"
    "      const r = http.request({host: p.hostname, port: p.port, method: 'GET',\n"
    "        path: `http://${target}${a.path || '/'}`, headers: {Host: target}}, (res) => {\n"
    "        let b = ''; res.on('data', (d) => b += d); res.on('end', () => resolve({status: res.statusCode, body: b}));\n"
    "      });\n"
    "      r.on('error', (e) => resolve({status: -1, body: String(e)})); r.end(); return;\n"
    "    }\n"
    "    const r = http.request({host: p.hostname, port: p.port, method: 'CONNECT', path: target});\n"
    "    r.on('connect', (res, sock) => {\n"
    "      if (res.statusCode !== 200) {\n"
    "        let b = ''; sock.on('data', (d) => b += d); sock.on('end', () => resolve({status: res.statusCode, body: b}));\n"
    "        sock.on('error', () => resolve({status: res.statusCode, body: b})); return;\n"
    "      }\n"
    "      const s = tls.connect({socket: sock, servername: a.host}, () => {\n"
    "        s.write(`GET ${a.path || '/'} HTTP/1.1\\r\\nHost: ${a.host}\\r\\nConnection: close\\r\\n\\r\\n`);\n"
    "      });\n"
    "      let b = ''; s.on('data', (d) => b += d);\n"
    "      s.on('end', () => resolve({status: Number(b.split(' ')[1]), body: b.split('\\r\\n\\r\\n').slice(1).join('')}));\n"
    "      s.on('error', (e) => resolve({status: -1, body: String(e)}));\n"
    "    });\n"
    "    r.on('error', (e) => resolve({status: -1, body: String(e)})); r.end();\n"
    "  });\n"
    "}\n"
    "exports.handler = async (req) => {\n"
    "  const a = Object.fromEntries(new URLSearchParams(req.query));\n"
    "  if (a.op === 'get') return {status: 200, body: await viaProxy(a)};\n"
    "  if (a.op === 'connect') return {status: 200, body: await new Promise((resolve) => {\n"
    "    const s = net.connect(Number(a.port), a.host, () => { s.destroy(); resolve({connected: true}); });\n"
    "    s.setTimeout(5000, () => { s.destroy(); resolve({connected: false, error: 'timeout'}); });\n"
    "    s.on('error', (e) => resolve({connected: false, error: String(e)}));\n"
    "  })};\n"
    "  if (a.op === 'dns') return {status: 200, body: await new Promise((resolve) => {\n"
    "    dns.lookup(a.name, {all: true}, (err, addrs) => resolve(err ? {addrs: [], nxdomain: err.code === 'ENOTFOUND', error: err.code}\n"
    "      : {addrs: addrs.map((x) => x.address).sort()}));\n"
    "  })};\n"
    "  return {status: 200, body: {proxy: process.env.HTTP_PROXY || ''}};\n"
    "};\n";

static const char policy_fmt[] =
    "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"EgressPolicy\",\"metadata\":{\"name\":\"%s\"},"
    "\"spec\":{\"allow\":%s,\"defaultAction\":\"deny\"}}";

/* As admin: the test's outside servers are on loopback (127.0.0.2, .3),
 * which only an admin's CIDR rule may open. */
static long put_policy_as(env *e, const char *token, const char *name, const char *allow)
{
    char body[1024];
    snprintf(body, sizeof(body), policy_fmt, name, allow);
    return REQ("POST", NS("default") "/egresspolicies", token, body);
}

static long put_policy(env *e, const char *name, const char *allow)
{
    return put_policy_as(e, ADMIN_TOKEN, name, allow);
}

/* Deploys `name` (python3 or node) with network: egress and waits for it. */
static int deploy(env *e, const char *name, int node, const char *network)
{
    char dir[256];
    if (sv_code_dir(dir, sizeof(dir), node ? "index.js" : "main.py", node ? node_fn : python_fn) < 0)
        return -1;
    chmod(dir, 0755);
    char file[300];
    snprintf(file, sizeof(file), "%s/%s", dir, node ? "index.js" : "main.py");
    chmod(file, 0644);
    char ca_env[600] = "";
    if (ca_dir[0]) { /* the test CA, where the worker sees files: its code directory */
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "cp %s/ca.pem %s/ca.pem && chmod 0644 %s/ca.pem", ca_dir, dir,
                 dir);
        if (system(cmd) != 0)
            return -1;
        snprintf(ca_env, sizeof(ca_env),
                 ",\"env\":{\"SSL_CERT_FILE\":\"%s/ca.pem\",\"NODE_EXTRA_CA_CERTS\":\"%s/ca.pem\"},"
                 "\"source\":{\"path\":\"%s\"}",
                 dir, dir, dir);
    }
    else
        snprintf(ca_env, sizeof(ca_env), ",\"source\":{\"path\":\"%s\"}", dir);
    char net[64] = "";
    if (network)
        snprintf(net, sizeof(net), ",\"network\":\"%s\"", network);
    long code = sv_create(e, name, "{\"runtime\":\"%s\",\"handler\":\"%s\"%s%s}",
                          node ? "node" : "python3", node ? "index.js#handler" : "main.handler",
                          ca_env, net);
    return code == 201 ? 0 : -1;
}

/* Calls the function: `query` after "?"; the JSON answer in e->r.json. */
static long call(env *e, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static long call(env *e, const char *name, const char *fmt, ...)
{
    char q[512], path[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q, sizeof(q), fmt, ap);
    va_end(ap);
    snprintf(path, sizeof(path), "/fn/default/%s?%s", name, q);
    return sv_invoke(e, "GET", path, NULL);
}

/* The function's logs contain `needle` (within 10 s). */
static int logs_have(env *e, const char *name, const char *needle)
{
    char path[256];
    snprintf(path, sizeof(path), NS("default") "/functions/%s/logs", name);
    for (int i = 0; i < 100; i++) {
        if (REQ("GET", path, DEV_TOKEN, NULL) == 200 && e->r.body && strstr(e->r.body, needle))
            return 1;
        env_sleep_ms(100);
    }
    return 0;
}

/* The function's logs of invocation `id` contain `needle` (within 10 s). */
static int invocation_logs_have(env *e, const char *name, const char *id, const char *needle)
{
    char path[320];
    snprintf(path, sizeof(path), NS("default") "/functions/%s/logs?invocation=%s", name, id);
    for (int i = 0; i < 100; i++) {
        if (REQ("GET", path, DEV_TOKEN, NULL) == 200 && e->r.body && strstr(e->r.body, needle))
            return 1;
        env_sleep_ms(100);
    }
    return 0;
}

/* What every runtime must show (issue 19's list), on function `fn`. */
static void check_policy(env *e, const char *fn)
{
    char allow[512];
    snprintf(allow, sizeof(allow),
             "[{\"host\":\"allowed.test\",\"ports\":[%u]},{\"cidr\":\"127.0.0.2/32\",\"ports\":[%u]}]",
             o2.port, o2.port);
    /* A developer may not open loopback (the platform's own listeners) or
     * link-local (cloud metadata) with a CIDR rule; a host rule is fine. */
    CHECK_INT(put_policy_as(e, DEV_TOKEN, "outside", allow), 403);
    CHECK_CONTAINS(jstr(e->r.json, "message"), "spec.allow[1].cidr");
    CHECK_INT(put_policy_as(e, DEV_TOKEN, "meta", "[{\"cidr\":\"169.254.0.0/16\"}]"), 403);
    CHECK_INT(put_policy_as(e, DEV_TOKEN, "meta", "[{\"cidr\":\"0.0.0.0/0\"}]"), 403);
    CHECK_INT(put_policy_as(e, DEV_TOKEN, "ok", "[{\"cidr\":\"192.0.2.0/24\"},"
                                                "{\"host\":\"x.example\"}]"),
              201);
    CHECK_INT(REQ("DELETE", NS("default") "/egresspolicies/ok", DEV_TOKEN, NULL), 200);
    CHECK_INT(put_policy(e, "outside", allow), 201);

    /* the allowed host:port: 200 through the proxy */
    CHECK_INT(call(e, fn, "op=get&host=allowed.test&port=%u&path=/hello", o2.port), 200);
    if (jnum(e->r.json, "status") != 200)
        FAILF("allowed.test: %.500s", e->r.body);
    CHECK_CONTAINS(jstr(e->r.json, "body"), "hello from 127.0.0.2");
    CHECK_CONTAINS(jstr(e->r.json, "body"), "GET /hello");

    /* another port, another host, a raw IP outside every CIDR, funcd's own
     * control plane, cloud metadata: each a 403 from the proxy */
    const char *cp = strrchr(e->base, ':') + 1;
    char cases[5][128];
    snprintf(cases[0], 128, "host=allowed.test&port=%u", o3.port);
    snprintf(cases[1], 128, "host=other.test&port=%u", o2.port);
    snprintf(cases[2], 128, "host=127.0.0.3&port=%u", o3.port);
    snprintf(cases[3], 128, "host=127.0.0.1&port=%.*s&direct=1", (int)strcspn(cp, "/"), cp);
    snprintf(cases[4], 128, "host=169.254.169.254&port=80");
    char denied_inv[64] = "";
    for (int i = 0; i < 5; i++) {
        CHECK_INT(call(e, fn, "op=get&%s&path=/x", cases[i]), 200);
        if (i == 1) /* the only invocation its worker ran: its denial names it */
            snprintf(denied_inv, sizeof(denied_inv), "%s",
                     sv_header(&e->r, "x-funcd-invocation-id"));
        if (jnum(e->r.json, "status") != 403)
            FAILF("%s: %.500s", cases[i], e->r.body);
        CHECK_CONTAINS(jstr(e->r.json, "body"), "funcd egress:");
        CHECK_CONTAINS(jstr(e->r.json, "body"), "is not allowed");
    }
    CHECK_INT(atomic_load(&o3.requests), 0);
    CHECK(logs_have(e, fn, "funcd egress: denied HTTP other.test"));
    CHECK(denied_inv[0]);
    CHECK(invocation_logs_have(e, fn, denied_inv, "funcd egress: denied HTTP other.test"));
    CHECK(logs_have(e, fn, "funcd egress: denied HTTP 169.254.169.254:80"));
    CHECK(REQ("GET", "/metrics", ADMIN_TOKEN, NULL) == 200);
    char series[256];
    snprintf(series, sizeof(series),
             "funcd_egress_connections_total{namespace=\"default\",function=\"%s\","
             "decision=\"denied\"} 5",
             fn);
    CHECK_CONTAINS(e->r.body, series);

    /* a direct connect() to an outside address fails */
    CHECK_INT(call(e, fn, "op=connect&host=127.0.0.2&port=%u", o2.port), 200);
    if (!cJSON_IsFalse(jget(e->r.json, "connected")))
        FAILF("a direct connect went through: %.500s", e->r.body);

    /* DNS: an allowed name resolves (through funcd), an unlisted one is NXDOMAIN */
    CHECK_INT(call(e, fn, "op=dns&name=allowed.test"), 200);
    CHECK_STR(cJSON_GetStringValue(cJSON_GetArrayItem(jget(e->r.json, "addrs"), 0)), "127.0.0.2");
    CHECK_INT(call(e, fn, "op=dns&name=unlisted.test"), 200);
    if (!cJSON_IsTrue(jget(e->r.json, "nxdomain")))
        FAILF("unlisted.test: %.500s", e->r.body);

    /* a policy added now allows the next connection, no restart */
    CHECK_INT(put_policy(e, "more",
                         "[{\"host\":\"other.test\"},{\"cidr\":\"127.0.0.3/32\"}]"),
              201);
    CHECK_INT(call(e, fn, "op=get&host=other.test&port=%u&path=/now", o3.port), 200);
    if (jnum(e->r.json, "status") != 200)
        FAILF("other.test after the new policy: %.500s", e->r.body);
    CHECK_CONTAINS(jstr(e->r.json, "body"), "hello from 127.0.0.3");
    CHECK_INT(REQ("DELETE", NS("default") "/egresspolicies/more", DEV_TOKEN, NULL), 200);
}

EG_TEST(python)
{
    CHECK(deploy(e, "eg-py", 0, "egress") == 0);
    if (!sv_wait_ready(e, "eg-py", 30000))
        FAILF("not Ready: %.800s", e->r.body);
    CHECK_INT(call(e, "eg-py", "op=env"), 200);
    CHECK_STR(jstr(e->r.json, "proxy"), "http://127.0.0.1:3128");
    CHECK_CONTAINS(jstr(e->r.json, "resolv"), "nameserver 127.0.0.1");
    check_policy(e, "eg-py");
}

EG_TEST(node)
{
    CHECK(deploy(e, "eg-node", 1, "egress") == 0);
    if (!sv_wait_ready(e, "eg-node", 30000))
        FAILF("not Ready: %.800s", e->r.body);
    check_policy(e, "eg-node");
}

EG_TEST(tls)
{
    CHECK_INT(tls_start(), 0);
    fake_dns_add(&dns, "secure.test", "127.0.0.2"); /* (already there; harmless) */
    char allow[512];
    snprintf(allow, sizeof(allow),
             "[{\"host\":\"secure.test\",\"ports\":[%u]},{\"cidr\":\"127.0.0.2/32\",\"ports\":[%u]}]",
             tlso.port, tlso.port);
    CHECK_INT(put_policy(e, "tls", allow), 201);
    CHECK(deploy(e, "eg-tls-py", 0, "egress") == 0);
    CHECK(deploy(e, "eg-tls-node", 1, "egress") == 0);
    if (!sv_wait_ready(e, "eg-tls-py", 30000) || !sv_wait_ready(e, "eg-tls-node", 30000))
        FAILF("not Ready: %.800s", e->r.body);
    const char *fns[] = {"eg-tls-py", "eg-tls-node"};
    for (int i = 0; i < 2; i++) {
        CHECK_INT(call(e, fns[i], "op=get&scheme=https&host=secure.test&port=%u&path=/s", tlso.port),
                  200);
        if (jnum(e->r.json, "status") != 200)
            FAILF("%s over TLS: %.500s", fns[i], e->r.body);
        CHECK_CONTAINS(jstr(e->r.json, "body"), "hello over tls, verified");
    }
    CHECK(atomic_load(&tlso.served) >= 2);
    /* a CONNECT elsewhere is refused before any TLS */
    CHECK_INT(call(e, "eg-tls-node", "op=get&scheme=https&host=other.test&port=%u", tlso.port), 200);
    if (jnum(e->r.json, "status") != 403)
        FAILF("CONNECT other.test: %.500s", e->r.body);
    CHECK(logs_have(e, "eg-tls-node", "funcd egress: denied CONNECT other.test"));
}

/* A function without network: egress has no network and no proxy. */
EG_TEST(no_egress_no_network)
{
    char allow[256];
    snprintf(allow, sizeof(allow), "[{\"host\":\"allowed.test\"},{\"cidr\":\"127.0.0.2/32\"}]");
    CHECK_INT(put_policy(e, "outside", allow), 201);
    CHECK(deploy(e, "plain", 0, NULL) == 0);
    if (!sv_wait_ready(e, "plain", 30000))
        FAILF("not Ready: %.800s", e->r.body);
    CHECK_INT(call(e, "plain", "op=env"), 200);
    CHECK_STR(jstr(e->r.json, "proxy"), "");
    CHECK_INT(call(e, "plain", "op=connect&host=127.0.0.1&port=3128"), 200);
    CHECK(cJSON_IsFalse(jget(e->r.json, "connected")));
    CHECK_INT(call(e, "plain", "op=connect&host=127.0.0.2&port=%u", o2.port), 200);
    CHECK(cJSON_IsFalse(jget(e->r.json, "connected")));
    CHECK_INT(call(e, "plain", "op=dns&name=allowed.test"), 200);
    CHECK_INT(cJSON_GetArraySize(jget(e->r.json, "addrs")), 0);
    CHECK_INT(atomic_load(&o2.requests), 0);
}

/* Without the sandbox nothing could be enforced: refused, saying why. */
EG_TEST_WITH(refused_without_sandbox, funcd_with_sandbox(0))
{
    CHECK(deploy(e, "eg-nosb", 0, "egress") == 0);
    if (!sv_wait_condition(e, "eg-nosb", "False", 30000))
        FAILF("not Ready=False: %.800s", e->r.body);
    const cJSON *ready = sv_ready_condition(e->r.json);
    CHECK_STR(jstr(ready, "reason"), "EgressNeedsSandbox");
    CHECK_CONTAINS(jstr(ready, "message"), "--no-sandbox");
}

int main(int argc, char **argv)
{
    sv_init();
    const char *only = argc > 1 ? argv[1] : NULL;
    int ran = 0;
    SV_RUN(only, ran, python);
    if (access("/usr/bin/node", X_OK) == 0 || access("/usr/local/bin/node", X_OK) == 0) {
        SV_RUN(only, ran, node);
        SV_RUN(only, ran, tls);
    } else if (only && (strcmp(only, "node") == 0 || strcmp(only, "tls") == 0)) {
        fprintf(stderr, "SKIP %s: node is not installed on this host\n", only);
        e2e_client_global_cleanup();
        return 77;
    }
    SV_RUN(only, ran, no_egress_no_network);
    SV_RUN(only, ran, refused_without_sandbox);
    e2e_client_global_cleanup();
    if (only && !ran) {
        fprintf(stderr, "no test case named %s\n", only);
        return 1;
    }
    return HARNESS_END();
}
