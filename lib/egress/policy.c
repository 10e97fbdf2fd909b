/* Egress policies: compiling EgressPolicy specs and the decisions made
 * from them (policy.h). */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "egress/policy.h"
#include "funcd/sys/error.h"
#include "util/misc.h"

#define NODE_ADDRS_MAX 64      /* this node's own addresses kept */
#define NODE_ADDRS_TTL_MS 60000 /* read again after this long */

typedef struct rule {
    char *host;              /* a host pattern, or NULL for a CIDR rule */
    funcd_egress_cidr cidr;  /* when host is NULL */
    uint16_t ports[FUNCD_EGRESS_MAX_PORTS];
    size_t n_ports;          /* 0: every port */
} rule;

typedef struct policy {
    struct policy *next;
    char *ns, *name;
    rule *rules;
    size_t n_rules;
} policy;

struct funcd_egress_policies {
    pthread_mutex_t lock;
    policy *list;
    funcd_egress_addr *platform;
    uint16_t *platform_ports;
    size_t n_platform;
};

/* ---- addresses ----------------------------------------------------------- */

/* The first 12 bytes of an IPv4-mapped IPv6 address (::ffff:a.b.c.d). */
static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

int funcd_egress_parse_cidr(const char *s, funcd_egress_cidr *out)
{
    char buf[64];
    if (!s || strlen(s) >= sizeof(buf))
        return -1;
    snprintf(buf, sizeof(buf), "%s", s);
    char *slash = strchr(buf, '/');
    long prefix = -1;
    if (slash) {
        *slash = '\0';
        const char *p = slash + 1;
        if (!*p || strlen(p) > 3)
            return -1;
        for (const char *q = p; *q; q++)
            if (!isdigit((unsigned char)*q))
                return -1;
        prefix = strtol(p, NULL, 10);
    }
    memset(out, 0, sizeof(*out));
    unsigned max;
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        max = 32;
    } else if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        out->family = AF_INET6;
        max = 128;
    } else {
        return -1;
    }
    if (prefix > (long)max)
        return -1;
    out->prefix = prefix < 0 ? max : (unsigned)prefix;
    /* Host bits must be zero: "10.0.0.1/8" is a mistake worth naming. */
    for (unsigned bit = out->prefix; bit < max; bit++)
        if (out->addr[bit / 8] & (0x80 >> (bit % 8)))
            return -1;
    /* IPv4-mapped ranges are IPv4 ones, as mapped addresses are. */
    if (out->family == AF_INET6 && out->prefix >= 96 && memcmp(out->addr, mapped, 12) == 0) {
        out->family = AF_INET;
        out->prefix -= 96;
        memmove(out->addr, out->addr + 12, 4);
        memset(out->addr + 4, 0, 12);
    }
    return 0;
}

int funcd_egress_cidr_contains(const funcd_egress_cidr *c, int family, const uint8_t *addr)
{
    if (c->family != family)
        return 0;
    unsigned full = c->prefix / 8, rest = c->prefix % 8;
    if (memcmp(c->addr, addr, full) != 0)
        return 0;
    if (rest) {
        uint8_t mask = (uint8_t)(0xff << (8 - rest));
        if ((c->addr[full] & mask) != (addr[full] & mask))
            return 0;
    }
    return 1;
}


int funcd_egress_addr_from_sockaddr(const struct sockaddr *sa, funcd_egress_addr *out)
{
    memset(out, 0, sizeof(*out));
    if (sa->sa_family == AF_INET) {
        out->family = AF_INET;
        memcpy(out->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return 0;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(a, mapped, 12) == 0) {
            out->family = AF_INET;
            memcpy(out->addr, a + 12, 4);
        } else {
            out->family = AF_INET6;
            memcpy(out->addr, a, 16);
        }
        return 0;
    }
    return -1;
}

int funcd_egress_addr_parse(const char *s, funcd_egress_addr *out)
{
    char buf[64];
    size_t len = strlen(s);
    if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
        s++;
        len -= 2;
    }
    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    memset(out, 0, sizeof(*out));
    if (inet_pton(AF_INET, buf, out->addr) == 1) {
        out->family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, buf, out->addr) == 1) {
        /* An IPv4-mapped address is the IPv4 one, as from a socket's. (Not
         * through a struct sockaddr_in6 read as a struct sockaddr: at -O2
         * gcc 12 took its family as unset and "::1" did not parse.) */
        out->family = AF_INET6;
        if (memcmp(out->addr, mapped, 12) == 0) {
            out->family = AF_INET;
            memmove(out->addr, out->addr + 12, 4);
            memset(out->addr + 4, 0, 12);
        }
        return 0;
    }
    return -1;
}

void funcd_egress_addr_str(const funcd_egress_addr *a, char *out, size_t len)
{
    if (!inet_ntop(a->family, a->addr, out, (socklen_t)len))
        snprintf(out, len, "?");
}

static const struct special {
    const char *cidr, *word;
} specials[] = {
    {"127.0.0.0/8", "loopback"},      {"169.254.0.0/16", "link-local"},
    {"0.0.0.0/8", "unspecified"},     {"224.0.0.0/4", "multicast"},
    {"255.255.255.255", "broadcast"}, {"::1", "loopback"},
    {"::", "unspecified"},            {"fe80::/10", "link-local"},
    {"ff00::/8", "multicast"},
    /* Where clouds put their metadata services besides 169.254.169.254:
     * Alibaba's 100.100.100.200, AWS's fd00:ec2::254. */
    {"100.64.0.0/10", "shared (cloud metadata)"}, {"fc00::/7", "unique-local (cloud metadata)"},
    /* Azure's platform service (the metadata's neighbour, the VM agent's) */
    {"168.63.129.16", "a cloud platform service"},
    /* IPv6 ranges that reach IPv4 addresses through a translator or a relay
     * and put the IPv4 address where their operator's prefix length says:
     * local-use NAT64 (RFC 8215) and 6to4. Not read apart: the whole range. */
    {"64:ff9b:1::/48", "local-use NAT64 (carries IPv4)"}, {"2002::/16", "6to4 (carries IPv4)"},
};
#define N_SPECIALS (sizeof(specials) / sizeof(specials[0]))

/* IPv6 prefixes whose addresses carry an IPv4 one in their last 4 bytes and
 * reach it: NAT64's well-known prefix and the old IPv4-compatible form. (The
 * mapped form is turned into IPv4 wherever an address is read.) */
static const char *const carriers[] = {"64:ff9b::/96", "::/96"};
#define N_CARRIERS (sizeof(carriers) / sizeof(carriers[0]))

/* The IPv4 range a carried IPv6 range reaches, if it lies in a carrier. */
static int carried(const funcd_egress_cidr *c, funcd_egress_cidr *v4)
{
    if (c->family != AF_INET6 || c->prefix < 96)
        return 0;
    for (size_t i = 0; i < N_CARRIERS; i++) {
        funcd_egress_cidr k;
        if (funcd_egress_parse_cidr(carriers[i], &k) == 0 &&
            funcd_egress_cidr_contains(&k, AF_INET6, c->addr)) {
            memset(v4, 0, sizeof(*v4));
            v4->family = AF_INET;
            v4->prefix = c->prefix - 96;
            memcpy(v4->addr, c->addr + 12, 4);
            return 1;
        }
    }
    return 0;
}

static const struct special *special_of(const funcd_egress_addr *a, funcd_egress_cidr *range)
{
    for (size_t i = 0; i < N_SPECIALS; i++) {
        funcd_egress_cidr c;
        if (funcd_egress_parse_cidr(specials[i].cidr, &c) == 0 &&
            funcd_egress_cidr_contains(&c, a->family, a->addr)) {
            if (range)
                *range = c;
            return &specials[i];
        }
    }
    /* A carried IPv4 address is judged as itself: NAT64 of 169.254.169.254
     * is the metadata service. */
    funcd_egress_cidr host = {.family = a->family, .prefix = 128}, v4;
    memcpy(host.addr, a->addr, 16);
    int mapped_v6 = a->family == AF_INET6 && memcmp(a->addr, mapped, 12) == 0;
    if (mapped_v6 || carried(&host, &v4)) {
        funcd_egress_addr inner = {.family = AF_INET};
        memcpy(inner.addr, a->addr + 12, 4);
        const struct special *sp = special_of(&inner, NULL);
        if (sp && range)
            *range = host; /* only a rule naming this very address allows it */
        return sp;
    }
    return NULL;
}

const char *funcd_egress_cidr_special(const funcd_egress_cidr *c)
{
    for (size_t i = 0; i < N_SPECIALS; i++) {
        funcd_egress_cidr sp;
        if (funcd_egress_parse_cidr(specials[i].cidr, &sp) < 0 || sp.family != c->family)
            continue;
        /* Two ranges overlap when one holds the other's first address. */
        if (funcd_egress_cidr_contains(&sp, c->family, c->addr) ||
            funcd_egress_cidr_contains(c, sp.family, sp.addr))
            return specials[i].word;
    }
    funcd_egress_cidr v4;
    if (carried(c, &v4)) {
        const char *word = funcd_egress_cidr_special(&v4);
        if (word)
            return word;
    }
    for (size_t i = 0; c->family == AF_INET6 && i < N_CARRIERS; i++) {
        funcd_egress_cidr k; /* a range holding a whole carrier holds special ones */
        if (funcd_egress_parse_cidr(carriers[i], &k) == 0 && c->prefix < 96 &&
            funcd_egress_cidr_contains(c, AF_INET6, k.addr))
            return "carries IPv4 (NAT64)";
    }
    return NULL;
}

const char *funcd_egress_special(const funcd_egress_addr *a)
{
    const struct special *s = special_of(a, NULL);
    return s ? s->word : NULL;
}

/* ---- host names ---------------------------------------------------------- */

static int valid_label(const char *s, size_t n)
{
    if (n == 0 || n > 63 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return 0;
    return 1;
}

int funcd_egress_valid_host_pattern(const char *p)
{
    if (!p)
        return 0;
    if (p[0] == '*' && p[1] == '.')
        p += 2;
    size_t len = strlen(p);
    if (len == 0 || len > 253)
        return 0;
    size_t labels = 0;
    for (const char *s = p;;) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        if (!valid_label(s, n))
            return 0;
        labels++;
        if (!dot)
            break;
        s = dot + 1;
    }
    /* A numeric address is a CIDR rule's business. */
    funcd_egress_addr a;
    return funcd_egress_addr_parse(p, &a) < 0 && labels >= 1;
}

int funcd_egress_host_matches(const char *pattern, const char *name)
{
    size_t n = strlen(name);
    if (n && name[n - 1] == '.')
        n--;
    if (pattern[0] == '*' && pattern[1] == '.') {
        const char *suffix = pattern + 1; /* ".example.com" */
        size_t sl = strlen(suffix);
        return n > sl && strncasecmp(name + n - sl, suffix, sl) == 0;
    }
    return strlen(pattern) == n && strncasecmp(pattern, name, n) == 0;
}

/* ---- the table ----------------------------------------------------------- */

funcd_egress_policies *funcd_egress_policies_new(void)
{
    funcd_egress_policies *p = calloc(1, sizeof(*p));
    if (p)
        pthread_mutex_init(&p->lock, NULL);
    return p;
}

static void policy_free(policy *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < x->n_rules; i++)
        free(x->rules[i].host);
    free(x->rules);
    free(x->ns);
    free(x->name);
    free(x);
}

void funcd_egress_policies_free(funcd_egress_policies *p)
{
    if (!p)
        return;
    while (p->list) {
        policy *x = p->list;
        p->list = x->next;
        policy_free(x);
    }
    free(p->platform);
    free(p->platform_ports);
    pthread_mutex_destroy(&p->lock);
    free(p);
}

static int compile_rule(const cJSON *item, size_t i, rule *r)
{
    const cJSON *host = cJSON_GetObjectItemCaseSensitive(item, "host");
    const cJSON *cidr = cJSON_GetObjectItemCaseSensitive(item, "cidr");
    const cJSON *ports = cJSON_GetObjectItemCaseSensitive(item, "ports");
    if (cJSON_IsString(host) == cJSON_IsString(cidr))
        return funcd_error_set(FUNCD_EINVAL, "spec.allow[%zu]: give host or cidr", i);
    if (cJSON_IsString(host)) {
        if (!funcd_egress_valid_host_pattern(host->valuestring))
            return funcd_error_set(FUNCD_EINVAL, "spec.allow[%zu].host: not a host name", i);
        if (!(r->host = strdup(host->valuestring)))
            return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    } else if (funcd_egress_parse_cidr(cidr->valuestring, &r->cidr) < 0) {
        return funcd_error_set(FUNCD_EINVAL, "spec.allow[%zu].cidr: not a CIDR", i);
    }
    if (ports && !cJSON_IsNull(ports)) {
        if (!cJSON_IsArray(ports) || cJSON_GetArraySize(ports) > FUNCD_EGRESS_MAX_PORTS)
            return funcd_error_set(FUNCD_EINVAL, "spec.allow[%zu].ports: bad", i);
        for (const cJSON *e = ports->child; e; e = e->next) {
            if (!cJSON_IsNumber(e) || e->valuedouble < 1 || e->valuedouble > 65535 ||
                (double)(int)e->valuedouble != e->valuedouble)
                return funcd_error_set(FUNCD_EINVAL, "spec.allow[%zu].ports: bad port", i);
            r->ports[r->n_ports++] = (uint16_t)e->valuedouble;
        }
    }
    return 0;
}

static int compile(const char *ns, const char *name, const cJSON *spec, policy **out)
{
    *out = NULL;
    policy *x = calloc(1, sizeof(*x));
    if (!x || !(x->ns = strdup(ns)) || !(x->name = strdup(name))) {
        policy_free(x);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    const cJSON *allow = cJSON_GetObjectItemCaseSensitive(spec, "allow");
    int n = cJSON_IsArray(allow) ? cJSON_GetArraySize(allow) : 0;
    if (n > FUNCD_EGRESS_MAX_RULES) {
        policy_free(x);
        return funcd_error_set(FUNCD_EINVAL, "spec.allow: at most %d rules",
                               FUNCD_EGRESS_MAX_RULES);
    }
    if (n && !(x->rules = calloc((size_t)n, sizeof(rule)))) {
        policy_free(x);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    size_t i = 0;
    for (const cJSON *e = allow ? allow->child : NULL; e; e = e->next, i++) {
        x->n_rules = i + 1;
        int rc = compile_rule(e, i, &x->rules[i]);
        if (rc < 0) {
            policy_free(x);
            return rc;
        }
    }
    *out = x;
    return 0;
}

int funcd_egress_policies_put(funcd_egress_policies *p, const char *ns, const char *name,
                              const cJSON *spec)
{
    policy *x;
    int rc = compile(ns, name, spec, &x);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->lock);
    policy **pp = &p->list;
    while (*pp && !(strcmp((*pp)->ns, ns) == 0 && strcmp((*pp)->name, name) == 0))
        pp = &(*pp)->next;
    policy *old = *pp;
    x->next = old ? old->next : NULL;
    *pp = x;
    pthread_mutex_unlock(&p->lock);
    policy_free(old);
    return 0;
}

void funcd_egress_policies_remove(funcd_egress_policies *p, const char *ns, const char *name)
{
    pthread_mutex_lock(&p->lock);
    policy *old = NULL;
    for (policy **pp = &p->list; *pp; pp = &(*pp)->next) {
        if (strcmp((*pp)->ns, ns) == 0 && strcmp((*pp)->name, name) == 0) {
            old = *pp;
            *pp = old->next;
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
    policy_free(old);
}

int funcd_egress_policies_set_platform(funcd_egress_policies *p, const funcd_egress_addr *addrs,
                                       const uint16_t *ports, size_t n)
{
    funcd_egress_addr *a = n ? malloc(n * sizeof(*a)) : NULL;
    uint16_t *pt = n ? malloc(n * sizeof(*pt)) : NULL;
    if (n && (!a || !pt)) {
        free(a);
        free(pt);
        return funcd_error_set(FUNCD_ENOMEM, "out of memory");
    }
    if (n) {
        memcpy(a, addrs, n * sizeof(*a));
        memcpy(pt, ports, n * sizeof(*pt));
    }
    pthread_mutex_lock(&p->lock);
    free(p->platform);
    free(p->platform_ports);
    p->platform = a;
    p->platform_ports = pt;
    p->n_platform = n;
    pthread_mutex_unlock(&p->lock);
    return 0;
}

/* ---- decisions ----------------------------------------------------------- */

static int port_ok(const rule *r, uint16_t port)
{
    if (port == 0 || r->n_ports == 0)
        return 1;
    for (size_t i = 0; i < r->n_ports; i++)
        if (r->ports[i] == port)
            return 1;
    return 0;
}

static int port_listed(const rule *r, uint16_t port)
{
    for (size_t i = 0; i < r->n_ports; i++)
        if (r->ports[i] == port)
            return 1;
    return 0;
}

static void describe(funcd_egress_decision *d, const policy *x, size_t i)
{
    const rule *r = &x->rules[i];
    if (r->host) {
        snprintf(d->rule, sizeof(d->rule), "%s allow[%zu] host=%s", x->name, i, r->host);
    } else {
        char a[INET6_ADDRSTRLEN];
        funcd_egress_addr ad = {.family = r->cidr.family};
        memcpy(ad.addr, r->cidr.addr, 16);
        funcd_egress_addr_str(&ad, a, sizeof(a));
        snprintf(d->rule, sizeof(d->rule), "%s allow[%zu] cidr=%s/%u", x->name, i, a,
                 r->cidr.prefix);
    }
}

void funcd_egress_check_name(funcd_egress_policies *p, const char *ns, const char *name,
                             uint16_t port, funcd_egress_decision *d)
{
    d->allowed = 0;
    snprintf(d->rule, sizeof(d->rule), "no rule allows %s%s", name, port ? " on that port" : "");
    int name_seen = 0;
    pthread_mutex_lock(&p->lock);
    for (policy *x = p->list; x && !d->allowed; x = x->next) {
        if (strcmp(x->ns, ns) != 0)
            continue;
        for (size_t i = 0; i < x->n_rules; i++) {
            const rule *r = &x->rules[i];
            if (!r->host || !funcd_egress_host_matches(r->host, name))
                continue;
            name_seen = 1;
            if (port_ok(r, port)) {
                d->allowed = 1;
                describe(d, x, i);
                break;
            }
        }
    }
    pthread_mutex_unlock(&p->lock);
    if (!d->allowed && name_seen)
        snprintf(d->rule, sizeof(d->rule), "port %u is not allowed for %s", port, name);
}

/* Whether the CIDR rule names range `special` explicitly: it lies wholly
 * inside it (127.0.0.2/32 names loopback; 0.0.0.0/0 does not). */
static int inside(const funcd_egress_cidr *rule_cidr, const funcd_egress_cidr *special)
{
    return rule_cidr->prefix >= special->prefix &&
           funcd_egress_cidr_contains(special, rule_cidr->family, rule_cidr->addr);
}

/* This node's own addresses, read from its interfaces at most once a
 * minute: a name resolving to one reaches the node's own services (sshd,
 * a kubelet, anything bound to all addresses), which no tenant's host rule
 * (nor a callback URL) should open. One set for the process. */
static struct {
    pthread_mutex_t lock;
    funcd_egress_addr addr[NODE_ADDRS_MAX];
    size_t n;
    int64_t read_ms; /* when they were read (again after NODE_ADDRS_TTL_MS) */
} node = {PTHREAD_MUTEX_INITIALIZER, {{0}}, 0, 0};

int funcd_egress_node_address(const funcd_egress_addr *a)
{
    int64_t now = funcd_mono_ms();
    pthread_mutex_lock(&node.lock);
    if (!node.read_ms || now - node.read_ms >= NODE_ADDRS_TTL_MS) {
        struct ifaddrs *all = NULL;
        if (getifaddrs(&all) == 0) {
            node.n = 0;
            for (struct ifaddrs *i = all; i && node.n < NODE_ADDRS_MAX; i = i->ifa_next)
                if (i->ifa_addr &&
                    funcd_egress_addr_from_sockaddr(i->ifa_addr, &node.addr[node.n]) == 0)
                    node.n++;
            freeifaddrs(all);
        }
        node.read_ms = now;
    }
    int found = 0;
    for (size_t i = 0; i < node.n && !found; i++)
        found = node.addr[i].family == a->family && memcmp(node.addr[i].addr, a->addr, 16) == 0;
    pthread_mutex_unlock(&node.lock);
    return found;
}

static int is_platform_locked(funcd_egress_policies *p, const funcd_egress_addr *a, uint16_t port)
{
    for (size_t i = 0; i < p->n_platform; i++) {
        if (p->platform_ports[i] != port)
            continue;
        const funcd_egress_addr *l = &p->platform[i];
        static const uint8_t zero[16];
        if (memcmp(l->addr, zero, 16) == 0) /* a wildcard listener: any address here */
            return 1;
        if (l->family == a->family && memcmp(l->addr, a->addr, 16) == 0)
            return 1;
    }
    return 0;
}

void funcd_egress_check_addr(funcd_egress_policies *p, const char *ns, const funcd_egress_addr *a,
                             uint16_t port, int by_name, funcd_egress_decision *d)
{
    char as[INET6_ADDRSTRLEN];
    funcd_egress_addr_str(a, as, sizeof(as));
    funcd_egress_cidr special_range;
    const struct special *sp = special_of(a, &special_range);
    static const struct special node_word = {NULL, "this node's own address"};
    d->allowed = 0;
    pthread_mutex_lock(&p->lock);
    int platform = is_platform_locked(p, a, port);
    if (!sp && funcd_egress_node_address(a)) { /* only a rule naming this very address */
        sp = &node_word;
        memset(&special_range, 0, sizeof(special_range));
        special_range.family = a->family;
        special_range.prefix = a->family == AF_INET ? 32 : 128;
        memcpy(special_range.addr, a->addr, 16);
    }
    if (platform)
        snprintf(d->rule, sizeof(d->rule), "%s:%u is funcd's own listener", as, port);
    else if (sp)
        snprintf(d->rule, sizeof(d->rule), "%s is %s; only a CIDR rule naming it allows it", as,
                 sp->word);
    else if (by_name)
        d->allowed = 1, snprintf(d->rule, sizeof(d->rule), "resolved");
    else
        snprintf(d->rule, sizeof(d->rule), "no CIDR rule allows %s port %u", as, port);
    for (policy *x = p->list; x && !d->allowed; x = x->next) {
        if (strcmp(x->ns, ns) != 0)
            continue;
        for (size_t i = 0; i < x->n_rules; i++) {
            const rule *r = &x->rules[i];
            if (r->host || !funcd_egress_cidr_contains(&r->cidr, a->family, a->addr) ||
                !port_ok(r, port))
                continue;
            if (platform && !(r->cidr.prefix == (a->family == AF_INET ? 32u : 128u) &&
                              port_listed(r, port)))
                continue;
            if (!platform && sp && !inside(&r->cidr, &special_range))
                continue;
            d->allowed = 1;
            describe(d, x, i);
            break;
        }
    }
    pthread_mutex_unlock(&p->lock);
}
