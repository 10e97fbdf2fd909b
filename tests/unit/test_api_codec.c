/* lib/api outside validation: kinds, quantities, decoding, YAML output,
 * normalization. */
#include <math.h>
#include <stdlib.h>

#include "api_helpers.h"

/* ---- kinds ------------------------------------------------------------------------ */

TEST(kinds)
{
    size_t n = 0;
    while (funcd_kinds[n])
        n++;
    CHECK_INT(n, 8);
    CHECK_STR(funcd_kind_by_plural("egresspolicies")->kind, "EgressPolicy");
    CHECK_STR(funcd_kind_lookup("egp")->kind, "EgressPolicy");
    CHECK_STR(funcd_kind_by_plural("sites")->kind, "Site");
    CHECK_STR(funcd_kind_lookup("site")->kind, "Site");
    CHECK_STR(funcd_kind_by_plural("kvstores")->kind, "KVStore");
    CHECK_STR(funcd_kind_lookup("kv")->kind, "KVStore");
    CHECK_STR(funcd_kind_by_plural("eventsources")->kind, "EventSource");
    CHECK_STR(funcd_kind_lookup("es")->kind, "EventSource");
    CHECK_STR(funcd_kind_by_plural("workflows")->kind, "Workflow");
    CHECK_STR(funcd_kind_lookup("wf")->kind, "Workflow");
    CHECK_STR(funcd_kind_by_plural("functions")->kind, "Function");
    CHECK_STR(funcd_kind_by_plural("functionconfigs")->kind, "FunctionConfig");
    CHECK_STR(funcd_kind_by_plural("secrets")->kind, "Secret");
    CHECK(!funcd_kind_by_plural("Functions"));
    CHECK(!funcd_kind_by_plural(NULL));
    CHECK_STR(funcd_kind_by_kind("Secret")->plural, "secrets");
    CHECK(!funcd_kind_by_kind("secret"));
    CHECK_STR(funcd_kind_lookup("fn")->kind, "Function");
    CHECK_STR(funcd_kind_lookup("Functions")->kind, "Function");
    CHECK_STR(funcd_kind_lookup("FUNCTION")->kind, "Function");
    CHECK_STR(funcd_kind_lookup("functionconfig")->kind, "FunctionConfig");
    CHECK_STR(funcd_kind_lookup("fc")->kind, "FunctionConfig");
    CHECK_STR(funcd_kind_lookup("secret")->kind, "Secret");
    CHECK_STR(funcd_kind_lookup("SecretS")->list_kind, "SecretList");
    CHECK(!funcd_kind_lookup("pods"));
    CHECK(!funcd_kind_lookup(""));
    CHECK(!funcd_kind_lookup(NULL));
    CHECK_INT(funcd_kind_by_kind("Secret")->has_spec, 0);
    CHECK_INT(funcd_kind_by_kind("Function")->has_spec, 1);
}

/* ---- durations, quantities, CPU ------------------------------------------------------ */

typedef int (*parse_fn)(const char *, uint64_t *);

static const char *parsed(parse_fn fn, const char *s, uint64_t expected)
{
    static char why[256];
    uint64_t v = 0;
    if (fn(s, &v) < 0)
        snprintf(why, sizeof(why), "\"%s\" rejected: %s", s, funcd_error_last()->message);
    else if (v != expected)
        snprintf(why, sizeof(why), "\"%s\" -> %llu, expected %llu", s, (unsigned long long)v,
                 (unsigned long long)expected);
    else
        return NULL;
    return why;
}

#define PARSES(fn, s, expected)                                                                    \
    do {                                                                                           \
        const char *why_ = parsed((fn), (s), (expected));                                          \
        if (why_)                                                                                  \
            FAILF("%s", why_);                                                                     \
    } while (0)

static const char *rejected(parse_fn fn, const char *s)
{
    static char why[256];
    uint64_t v = 12345;
    if (fn(s, &v) != FUNCD_EINVAL)
        snprintf(why, sizeof(why), "\"%s\" accepted as %llu", s ? s : "(null)",
                 (unsigned long long)v);
    else if (v != 12345)
        snprintf(why, sizeof(why), "\"%s\": output written on failure", s ? s : "(null)");
    else
        return NULL;
    return why;
}

#define REJECTS(fn, s)                                                                             \
    do {                                                                                           \
        const char *why_ = rejected((fn), (s));                                                    \
        if (why_)                                                                                  \
            FAILF("%s", why_);                                                                     \
    } while (0)

TEST(durations)
{
    parse_fn d = funcd_parse_duration_ms;
    PARSES(d, "500ms", 500);
    PARSES(d, "30s", 30000);
    PARSES(d, "5m", 300000);
    PARSES(d, "1h", 3600000);
    PARSES(d, "1h30m", 5400000);
    PARSES(d, "2h45m10s500ms", 9910500);
    PARSES(d, "1.5h", 5400000);
    PARSES(d, ".5s", 500);
    PARSES(d, "1.s", 1000);
    PARSES(d, "0.0015s", 1);
    PARSES(d, "1.9ms", 1);
    PARSES(d, "0", 0);
    PARSES(d, "0s", 0);
    PARSES(d, "30s1h", 3630000);
    PARSES(d, "5124095576030h", 18446744073708000000ULL);
    PARSES(d, "18446744073709551615ms", UINT64_MAX);
    PARSES(d, "0.99999999999999999999999999999s", 999);
    REJECTS(d, "");
    REJECTS(d, NULL);
    REJECTS(d, "1");
    REJECTS(d, "30");
    REJECTS(d, "1d");
    REJECTS(d, "-1s");
    REJECTS(d, "+1s");
    REJECTS(d, "s");
    REJECTS(d, ".s");
    REJECTS(d, "1hh");
    REJECTS(d, "1 h");
    REJECTS(d, " 1h");
    REJECTS(d, "1h ");
    REJECTS(d, "1us");
    REJECTS(d, "1m5");
    REJECTS(d, "5124095576031h");
    REJECTS(d, "18446744073709551616ms");
    REJECTS(d, "99999999999999999999999999h");
    REJECTS(d, "5124095576030h9999999s");
}

TEST(quantities)
{
    parse_fn q = funcd_parse_quantity;
    PARSES(q, "256Mi", 268435456);
    PARSES(q, "1Gi", 1073741824);
    PARSES(q, "512", 512);
    PARSES(q, "1k", 1000);
    PARSES(q, "1M", 1000000);
    PARSES(q, "1G", 1000000000);
    PARSES(q, "1Ki", 1024);
    PARSES(q, "+1Ki", 1024);
    PARSES(q, "1.5Gi", 1610612736);
    PARSES(q, "0.5Ki", 512);
    PARSES(q, "1e3", 1000);
    PARSES(q, "1E3", 1000);
    PARSES(q, "12e-1", 2);
    PARSES(q, "1E", 1000000000000000000ULL);
    PARSES(q, "15Ei", 15ULL << 60);
    PARSES(q, "0", 0);
    PARSES(q, "0.0", 0);
    PARSES(q, "0e1000", 0);
    PARSES(q, "0.5", 1);
    PARSES(q, "100m", 1);
    PARSES(q, "1e-1000", 1);
    PARSES(q, "000000000000000000000000000000000000000000001", 1);
    PARSES(q, "18446744073709551615", UINT64_MAX);
    PARSES(q, "18446744073709551.615k", UINT64_MAX);
    REJECTS(q, "");
    REJECTS(q, NULL);
    REJECTS(q, "Mi");
    REJECTS(q, ".Mi");
    REJECTS(q, "1Mb");
    REJECTS(q, "1mi");
    REJECTS(q, "1KiB");
    REJECTS(q, "-1");
    REJECTS(q, "1.2.3");
    REJECTS(q, "1 Mi");
    REJECTS(q, "1e");
    REJECTS(q, "1e+");
    REJECTS(q, "1e1000");
    REJECTS(q, "16Ei");
    REJECTS(q, "18446744073709551616");
    REJECTS(q, "1000000000000000000000000000000000000000000");
    REJECTS(q, "99999999999999999999999999999999999Ei");
}

TEST(cpu)
{
    parse_fn c = funcd_parse_cpu_millis;
    PARSES(c, "1", 1000);
    PARSES(c, "0.5", 500);
    PARSES(c, "500m", 500);
    PARSES(c, "1.5", 1500);
    PARSES(c, "2000m", 2000);
    PARSES(c, "100", 100000);
    PARSES(c, "0.0001", 1);
    PARSES(c, "0.1m", 1);
    PARSES(c, "0", 0);
    PARSES(c, "18446744073709551615m", UINT64_MAX);
    REJECTS(c, "");
    REJECTS(c, "m");
    REJECTS(c, "-1");
    REJECTS(c, "1x");
    REJECTS(c, "1 ");
    REJECTS(c, "1e30");
    REJECTS(c, "18446744073709552");
}

/* ---- decoding: JSON ---------------------------------------------------------------- */

static const char *decode_error(const char *text, size_t len)
{
    static funcd_api_error err;
    cJSON *obj = (cJSON *)1;
    if (funcd_api_decode(text, len, &obj, &err) == 0) {
        cJSON_Delete(obj);
        return NULL;
    }
    if (obj)
        return "output not NULL on failure";
    return err.message;
}

static const char *decode_all_error(const char *text, size_t len, funcd_api_error *err)
{
    static funcd_api_error local;
    cJSON *all = NULL;
    if (!err)
        err = &local;
    if (funcd_api_decode_all(text, len, &all, err) == 0) {
        cJSON_Delete(all);
        return NULL;
    }
    return err->message;
}

#define DECODE_FAILS(text, part) CHECK_CONTAINS(decode_error((text), strlen(text)), (part))
#define DECODE_OK(text) CHECK(decode_error((text), strlen(text)) == NULL)

/* {"a":{"a":...1...}}, `depth` objects deep. */
static char *nested(int depth)
{
    char *s = malloc((size_t)depth * 6 + 2), *p = s;
    for (int i = 0; i < depth; i++)
        p += sprintf(p, "{\"a\":");
    *p++ = '1';
    for (int i = 0; i < depth; i++)
        *p++ = '}';
    *p = '\0';
    return s;
}

TEST(decode_json)
{
    cJSON *o = api_decode_text("\xef\xbb\xbf \n {\"a\": [1, \"x\", true, null, {\"b\": 2.5}]} \n");
    CHECK(o);
    CHECK_INT(cJSON_GetArraySize(cJSON_GetObjectItem(o, "a")), 5);
    cJSON_Delete(o);

    DECODE_FAILS("{\"a\": 1} x", "json: line 1 column 10: unexpected data after the object");
    DECODE_FAILS("{\"a\": 1}\n{\"b\": 2}", "line 2 column 1: unexpected data");
    DECODE_FAILS("{\n  \"a\": tru\n}", "json: line 2");
    DECODE_FAILS("{\"a\": 1", "invalid JSON");
    DECODE_FAILS("{\"a\": \"\xff\"}", "json: line 1 column 8: invalid UTF-8");
    DECODE_FAILS("{\"a\": \"\xc0\x80\"}", "invalid UTF-8");
    DECODE_FAILS("{\"a\": \"\xed\xa0\x80\"}", "invalid UTF-8");
    DECODE_FAILS("{\"a\": \"x\\u0000y\"}", "NUL");
    DECODE_OK("{\"a\": \"x\\\\u0000y\"}");
    CHECK_CONTAINS(decode_error("{\"a\": 1}\0", 9), "NUL");
    DECODE_FAILS("{\"a\": 1e999}", "json: number out of range");
    DECODE_FAILS("{\"a\": \"\\ud800\"}", "invalid JSON");

    funcd_api_error err;
    cJSON *obj;
    const char *dup = "{\"metadata\": {\"name\": \"a\", \"labels\": {}, \"name\": \"b\"}}";
    CHECK_INT(funcd_api_decode(dup, strlen(dup), &obj, &err), FUNCD_EINVAL);
    CHECK_STR(err.field, "metadata.name");
    CHECK_CONTAINS(err.message, "duplicate key");

    /* The root object is level 1: 64 levels pass, 65 do not. */
    char *ok = nested(64), *deep = nested(65);
    const char *ok_err = decode_error(ok, strlen(ok));
    const char *deep_err = decode_error(deep, strlen(deep));
    free(ok);
    free(deep);
    CHECK(ok_err == NULL);
    CHECK_CONTAINS(deep_err, "nested deeper than 64 levels");
    deep = nested(5000);
    deep_err = decode_error(deep, strlen(deep));
    free(deep);
    CHECK_CONTAINS(deep_err, "nested deeper");
}

TEST(decode_size_bounds)
{
    size_t big = FUNCD_API_MAX_OBJECT_BYTES + 1;
    char *s = malloc(big + 1);
    memset(s, ' ', big);
    memcpy(s, "{}", 2);
    s[big] = '\0';
    CHECK_CONTAINS(decode_error(s, big), "too large");
    CHECK(decode_error(s, big - 1) == NULL);
    free(s);
    DECODE_FAILS("", "empty document");
    DECODE_FAILS("  \n# only a comment\n", "empty document");
    DECODE_FAILS("---\n---\n", "empty document");
}

/* ---- decoding: YAML ------------------------------------------------------------------ */

/* Decodes "v: <text>" and returns the value's printed JSON (static). */
static const char *yaml_value(const char *text)
{
    static char out[1024];
    char doc[256];
    snprintf(doc, sizeof(doc), "v: %s\n", text);
    funcd_api_error err;
    cJSON *obj;
    if (funcd_api_decode(doc, strlen(doc), &obj, &err) < 0) {
        snprintf(out, sizeof(out), "error: %s", err.message);
        return out;
    }
    char *printed = cJSON_PrintUnformatted(cJSON_GetObjectItem(obj, "v"));
    snprintf(out, sizeof(out), "%s", printed);
    free(printed);
    cJSON_Delete(obj);
    return out;
}

TEST(yaml_scalars)
{
    static const char *const cases[][2] = {
        {"", "null"},
        {"~", "null"},
        {"null", "null"},
        {"Null", "null"},
        {"NULL", "null"},
        {"nULL", "\"nULL\""},
        {"true", "true"},
        {"True", "true"},
        {"FALSE", "false"},
        {"yes", "\"yes\""},
        {"no", "\"no\""},
        {"on", "\"on\""},
        {"off", "\"off\""},
        {"y", "\"y\""},
        {"0", "0"},
        {"-12", "-12"},
        {"+12", "12"},
        {"007", "7"},
        {"0o17", "15"},
        {"0x1F", "31"},
        {"0x", "\"0x\""},
        {"0o8", "\"0o8\""},
        {"1.5", "1.5"},
        {"-.5", "-0.5"},
        {"1.", "1"},
        {"1e3", "1000"},
        {"1E+3", "1000"},
        {"2.5e-1", "0.25"},
        {"1_000", "\"1_000\""},
        {"1:30", "\"1:30\""},
        {"12abc", "\"12abc\""},
        {"500m", "\"500m\""},
        {"\"12\"", "\"12\""},
        {"'true'", "\"true\""},
        {"'null'", "\"null\""},
        {"\"\"", "\"\""},
        {"!!str 12", "\"12\""},
        {"!!str", "\"\""},
        {"! 12", "\"12\""},
        {"!!int \"12\"", "12"},
        {"!!float '1.5'", "1.5"},
        {"!!bool true", "true"},
        {"!!null ''", "null"},
        {"tag:yaml.org,2002:str", "\"tag:yaml.org,2002:str\""},
        {"99999999999999999999", "1e+20"},
        {"\"a\\tb\\u00e9\"", "\"a\\tb\xc3\xa9\""},
        {"[1, a, {b: c}]", "[1,\"a\",{\"b\":\"c\"}]"},
        {"{}", "{}"},
        {"[]", "[]"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *got = yaml_value(cases[i][0]);
        if (strcmp(got, cases[i][1]) != 0)
            FAILF("v: %s -> %s, expected %s", cases[i][0], got, cases[i][1]);
    }
    CHECK_CONTAINS(yaml_value(".inf"), "yaml: line 1 column 4: number out of range");
    CHECK_CONTAINS(yaml_value("-.Inf"), "number out of range");
    CHECK_CONTAINS(yaml_value(".nan"), "number out of range");
    CHECK_CONTAINS(yaml_value("1e999"), "number out of range");
    CHECK_STR(yaml_value("'.inf'"), "\".inf\"");
    CHECK_CONTAINS(yaml_value("!!int abc"), "unsupported tag tag:yaml.org,2002:int");
    CHECK_CONTAINS(yaml_value("!!bool yes"), "unsupported tag");
    CHECK_CONTAINS(yaml_value("!foo x"), "unsupported tag !foo");
    CHECK_CONTAINS(yaml_value("!!binary aGk="), "unsupported tag");
    CHECK_CONTAINS(yaml_value("!!set {a: null}"), "unsupported tag");
    CHECK_CONTAINS(yaml_value("!!map {a: 1}"), "");
    CHECK_STR(yaml_value("!!map {a: 1}"), "{\"a\":1}");
    CHECK_STR(yaml_value("!!seq [1]"), "[1]");
    CHECK_CONTAINS(yaml_value("\"a\\0b\""), "NUL");
    CHECK_CONTAINS(yaml_value("\"\\ud800\""), "yaml: line 1");
}

TEST(yaml_structure_errors)
{
    DECODE_FAILS("a: &x 1\nb: 2\n", "yaml: line 1 column 4: anchors (&x) and aliases are not allowed");
    DECODE_FAILS("a: 1\nb: *x\n", "yaml: line 2");
    DECODE_FAILS("a: [&x [1], *x]\n", "anchors");
    DECODE_FAILS("a: 1\nb:\n  c: 1\n  c: 2\n", "yaml: line 4 column 3: duplicate key \"c\"");
    DECODE_FAILS("a: 1\n'a': 2\n", "duplicate key \"a\"");
    DECODE_FAILS("a: {x: 1, y: 2, x: 3}\n", "line 1 column 17: duplicate key \"x\"");
    DECODE_OK("a: {x: 1}\nb: {x: 1}\n");
    DECODE_FAILS("a:\n\tb: 1\n", "yaml: line 2 column 1:");
    DECODE_FAILS("a: b: c\n", "yaml: line 1");
    DECODE_FAILS("a: [1, 2\n", "yaml: line 2");
    DECODE_FAILS("? [a]\n: 1\n", "mapping keys must be strings");
    DECODE_FAILS("? {a: 1}\n: 1\n", "mapping keys must be strings");
    DECODE_FAILS("a: 1\n---\nb: 2\n", "line 2: expected one document, found several");
    DECODE_FAILS("- a\n- b\n", "must be an object");
    DECODE_FAILS("just a string\n", "must be an object");
    DECODE_FAILS("a: \"\xff\"\n", "yaml: byte 4:");
    DECODE_FAILS("a: \x01\n", "yaml:");
    DECODE_FAILS("%TAG ! tag:x,2000:\n---\na: !b c\n", "unsupported tag");
    DECODE_OK("---\na: 1\n...\n");
    DECODE_OK("---\n---\na: 1\n---\n");
    DECODE_OK("a: 1 # comment\n");

    /* Depth: the root mapping is level 1. */
    char doc[8192], *p;
    for (int depth = 64; depth <= 65; depth++) {
        p = doc;
        p += sprintf(p, "a: ");
        for (int i = 1; i < depth; i++)
            *p++ = '[';
        for (int i = 1; i < depth; i++)
            *p++ = ']';
        strcpy(p, "\n");
        const char *e = decode_error(doc, strlen(doc));
        if (depth == 64)
            CHECK(e == NULL);
        else
            CHECK_CONTAINS(e, "nested deeper than 64 levels");
    }
    /* Block style, a mapping per level. */
    p = doc;
    for (int i = 0; i < 70; i++)
        p += sprintf(p, "%*sk:\n", i, "");
    CHECK_CONTAINS(decode_error(doc, strlen(doc)), "nested deeper");
}

/* ---- decode_all ----------------------------------------------------------------------- */

static cJSON *all_of(const char *text)
{
    funcd_api_error err;
    cJSON *all = NULL;
    if (funcd_api_decode_all(text, strlen(text), &all, &err) < 0) {
        fprintf(stderr, "  decode_all: %s: %s\n", err.field, err.message);
        return NULL;
    }
    return all;
}

static const char *names_of(const cJSON *all)
{
    static char out[256];
    size_t n = 0;
    out[0] = '\0';
    for (const cJSON *e = all ? all->child : NULL; e; e = e->next) {
        const cJSON *name = cJSON_GetObjectItem(e, "name");
        n += (size_t)snprintf(out + n, sizeof(out) - n, "%s%s", n ? "," : "",
                              cJSON_IsString(name) ? name->valuestring : "?");
    }
    return out;
}

#define ALL_NAMES(text, expected)                                                                  \
    do {                                                                                           \
        cJSON *all_ = all_of(text);                                                                \
        if (!all_)                                                                                 \
            FAILF("decode_all failed");                                                            \
        char got_[256];                                                                            \
        snprintf(got_, sizeof(got_), "%s", names_of(all_));                                        \
        cJSON_Delete(all_);                                                                        \
        CHECK_STR(got_, (expected));                                                               \
    } while (0)

TEST(decode_all_forms)
{
    ALL_NAMES("", "");
    ALL_NAMES("   \n", "");
    ALL_NAMES("name: a\n", "a");
    ALL_NAMES("---\nname: a\n---\n---\n# nothing\n---\nname: b\n...\n---\nname: c\n", "a,b,c");
    ALL_NAMES("{\"name\": \"a\"}", "a");
    ALL_NAMES("[{\"name\": \"a\"}, {\"name\": \"b\"}]", "a,b");
    ALL_NAMES("[]", "");
    ALL_NAMES("{\"name\": \"a\"}\n{\"name\": \"b\"} {\"name\": \"c\"}\n", "a,b,c");
    ALL_NAMES("{\"name\": \"a\"}\n[{\"name\": \"b\"}]\n", "a,b");
    ALL_NAMES("apiVersion: v1\nkind: List\nitems:\n- name: a\n- name: b\n---\nname: c\n",
              "a,b,c");
    ALL_NAMES("kind: List\nitems: []\n", "");
    ALL_NAMES("kind: List\n", "");
    ALL_NAMES("{\"kind\": \"FunctionList\", \"items\": [{\"name\": \"a\"}]}", "a");
    ALL_NAMES("[{\"kind\": \"List\", \"items\": [{\"name\": \"a\"}]}, {\"name\": \"b\"}]", "a,b");
    /* Items of a List are not Lists themselves. */
    ALL_NAMES("kind: List\nitems:\n- {kind: List, name: inner}\n", "inner");

    funcd_api_error err;
    CHECK_CONTAINS(decode_all_error("kind: List\nitems: {a: 1}\n", 24, &err), "items of a List");
    CHECK_CONTAINS(decode_all_error("kind: List\nitems: [1]\n", 22, NULL), "items of a List");
    CHECK_CONTAINS(decode_all_error("name: a\n---\n- x\n", 16, NULL),
                   "line 2: a document must be an object");
    CHECK_CONTAINS(decode_all_error("[1]", 3, NULL), "must be an object");
    CHECK_CONTAINS(decode_all_error("[[{}]]", 6, NULL), "must be an object");
    CHECK_CONTAINS(decode_all_error("{} 5", 4, NULL), "must be an object");
    CHECK_CONTAINS(decode_all_error("{} x", 4, NULL), "json: line 1 column 4: invalid JSON");
    CHECK_CONTAINS(decode_all_error("a: 1\n---\na: &x 2\n", 17, NULL), "yaml: line 3");
}

TEST(decode_all_size_bounds)
{
    /* Many documents of 512 KiB each: fine up to 16 MiB in total. */
    size_t doc = 512 * 1024, n = 6, len = n * doc;
    char *s = malloc(len + 1);
    for (size_t i = 0; i < n; i++) {
        char *d = s + i * doc;
        memset(d, ' ', doc);
        int k = sprintf(d, "---\nname: d%zu\npad: \"", i);
        d[k] = 'x';
        memcpy(d + doc - 2, "\"\n", 2);
    }
    s[len] = '\0';
    cJSON *all = NULL;
    funcd_api_error err;
    CHECK_INT(funcd_api_decode_all(s, len, &all, &err), 0);
    CHECK_INT(cJSON_GetArraySize(all), 6);
    cJSON_Delete(all);
    /* One document over 1 MiB is refused even inside a stream. */
    memcpy(s + doc, "   ", 3);
    memcpy(s + 2 * doc, "   ", 3);
    CHECK_CONTAINS(decode_all_error(s, len, NULL), "document is larger than 1048576 bytes");
    free(s);

    s = malloc(FUNCD_API_MAX_OBJECT_BYTES * 16 + 2);
    memset(s, '\n', FUNCD_API_MAX_OBJECT_BYTES * 16 + 1);
    CHECK_INT(funcd_api_decode_all(s, FUNCD_API_MAX_OBJECT_BYTES * 16, &all, &err), 0);
    cJSON_Delete(all);
    CHECK_CONTAINS(decode_all_error(s, FUNCD_API_MAX_OBJECT_BYTES * 16 + 1, NULL),
                   "input is too large");
    free(s);
}

/* ---- YAML output --------------------------------------------------------------------- */

static char *to_yaml(const cJSON *obj)
{
    funcd_buf b = FUNCD_BUF_INIT;
    if (funcd_api_to_yaml(obj, &b) < 0) {
        funcd_buf_free(&b);
        return NULL;
    }
    return funcd_buf_detach(&b, NULL);
}

/* NULL if `obj` survives to_yaml + decode unchanged, else the YAML (malloc). */
static char *round_trip_failure(const cJSON *obj)
{
    char *yaml = to_yaml(obj);
    funcd_api_error err;
    cJSON *back = NULL;
    if (!yaml)
        return strdup("to_yaml failed");
    if (funcd_api_decode(yaml, strlen(yaml), &back, &err) == 0 && cJSON_Compare(obj, back, 1)) {
        cJSON_Delete(back);
        free(yaml);
        return NULL;
    }
    cJSON_Delete(back);
    fprintf(stderr, "  round trip: %s\n", err.message);
    return yaml;
}

#define ROUND_TRIPS(obj)                                                                           \
    do {                                                                                           \
        char *bad_ = round_trip_failure(obj);                                                      \
        if (bad_) {                                                                                \
            fprintf(stderr, "%s", bad_);                                                           \
            free(bad_);                                                                            \
            FAILF("round trip failed");                                                            \
        }                                                                                          \
    } while (0)

TEST(yaml_output_shape)
{
    cJSON *obj = api_decode_text(
        "{\"apiVersion\": \"funcd.dev/v1\", \"kind\": \"Function\","
        " \"metadata\": {\"name\": \"hello\", \"labels\": {}, \"generation\": 3},"
        " \"spec\": {\"args\": [\"a\", \"\", \"true\"], \"env\": {\"A\": \"x: y\"},"
        " \"scaling\": {\"minReplicas\": 0, \"idle\": 1.5}, \"list\": [[1, 2], {\"k\": \"v\", \"j\": []}],"
        " \"empty\": [], \"flag\": false, \"none\": null}}");
    CHECK(obj);
    char *yaml = to_yaml(obj);
    const char *expected = "apiVersion: funcd.dev/v1\n"
                           "kind: Function\n"
                           "metadata:\n"
                           "  name: hello\n"
                           "  labels: {}\n"
                           "  generation: 3\n"
                           "spec:\n"
                           "  args:\n"
                           "    - a\n"
                           "    - \"\"\n"
                           "    - \"true\"\n"
                           "  env:\n"
                           "    A: \"x: y\"\n"
                           "  scaling:\n"
                           "    minReplicas: 0\n"
                           "    idle: 1.5\n"
                           "  list:\n"
                           "    - - 1\n"
                           "      - 2\n"
                           "    - k: v\n"
                           "      j: []\n"
                           "  empty: []\n"
                           "  flag: false\n"
                           "  none: null\n";
    int same = yaml && strcmp(yaml, expected) == 0;
    if (!same)
        fprintf(stderr, "%s", yaml ? yaml : "(null)");
    free(yaml);
    ROUND_TRIPS(obj);
    cJSON_Delete(obj);
    CHECK(same);

    cJSON *empty = cJSON_CreateObject();
    yaml = to_yaml(empty);
    cJSON_Delete(empty);
    CHECK_STR(yaml, "{}\n");
    free(yaml);
    CHECK_INT(funcd_api_to_yaml(NULL, NULL), FUNCD_EINVAL);
}

static const char *const tricky_strings[] = {
    "", " ", "true", "True", "yes", "No", "ON", "off", "y", "N", "null", "Null", "~", "123",
    "-1", "+1", "1.5", ".5", "1.", "0x1F", "0o17", "1e3", "1_000", "1:30", "2024-01-01",
    "2024-01-01T10:00:00Z", ".inf", "-.inf", ".nan", "-", "--", "---", "...", "- a", "a: b",
    "a:b", "a:", ":a", "a #b", "a#b", "#x", "*x", "&x", "!x", "%x", "@x", "`x", "{x", "[x", "x]",
    "x}", ",x", "x,y", ">x", "|x", "'x", "\"x", "x\"", "x'", "?", "? x", "<<", "=", "multi\nline",
    "trailing\n", "\nleading", "tab\there", "\t", " lead", "trail ", "a  b", "cr\rlf",
    "back\\slash", "\x01\x02\x1f\x7f", "caf\xc3\xa9", "\xc2\x85nel", "\xe2\x80\xa8ls",
    "\xe2\x80\xa9ps", "\xef\xbb\xbf" "bom", "\xef\xbf\xbe", "\xf0\x9f\x98\x80", "256Mi", "500m",
    "30s", "sha256:abc", "/abs/path", "./rel", "http://x.y/z?q=1&r=2", "a b c", "v1",
    ".dockerconfigjson", "example.com/name", "x y: z", "# comment", "a\\nb",
};

TEST(yaml_output_strings_round_trip)
{
    for (size_t i = 0; i < sizeof(tricky_strings) / sizeof(tricky_strings[0]); i++) {
        cJSON *obj = cJSON_CreateObject();
        cJSON_AddStringToObject(obj, "value", tricky_strings[i]);
        cJSON_AddStringToObject(obj, tricky_strings[i], "as a key");
        cJSON *arr = cJSON_AddArrayToObject(obj, "list");
        cJSON_AddItemToArray(arr, cJSON_CreateString(tricky_strings[i]));
        char *bad = round_trip_failure(obj);
        cJSON_Delete(obj);
        if (bad) {
            fprintf(stderr, "%s", bad);
            free(bad);
            FAILF("string #%zu does not round-trip", i);
        }
    }
    /* Plain where nothing else could be meant. */
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, "a", "256Mi");
    cJSON_AddStringToObject(obj, "b", "funcd.dev/v1");
    cJSON_AddStringToObject(obj, "c", "true");
    cJSON_AddStringToObject(obj, "d", "multi\nline");
    char *yaml = to_yaml(obj);
    cJSON_Delete(obj);
    CHECK_STR(yaml, "a: 256Mi\nb: funcd.dev/v1\nc: \"true\"\nd: \"multi\\nline\"\n");
    free(yaml);
}

TEST(yaml_output_long_keys_and_numbers)
{
    char key[2000];
    memset(key, 'k', sizeof(key) - 1);
    key[sizeof(key) - 1] = '\0';
    cJSON *obj = cJSON_CreateObject();
    cJSON_AddStringToObject(obj, key, "v");
    cJSON *nested = cJSON_AddObjectToObject(obj, "n");
    cJSON_AddItemToObject(nested, key, cJSON_CreateStringArray((const char *[]){"a", "b"}, 2));
    cJSON *arr = cJSON_AddArrayToObject(obj, "arr");
    cJSON *item = cJSON_CreateObject();
    cJSON_AddItemToArray(arr, item);
    cJSON_AddObjectToObject(item, key);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(item, "x"), key, 1);
    ROUND_TRIPS(obj);
    cJSON_Delete(obj);

    static const double numbers[] = {0,          1,         -1,        1.5,      0.1,
                                     -0.25,      1e300,     -1e300,    1e-300,   4.9e-324,
                                     1e15,       1e15 + 1,  1e16,      123456789012345678.0,
                                     9007199254740993.0,    0.1 + 0.2, 1.0 / 3, 2.5e-7};
    obj = cJSON_CreateObject();
    arr = cJSON_AddArrayToObject(obj, "n");
    for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++)
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(numbers[i]));
    char *yaml = to_yaml(obj);
    funcd_api_error err;
    cJSON *back = NULL;
    CHECK_INT(funcd_api_decode(yaml, strlen(yaml), &back, &err), 0);
    free(yaml);
    size_t i = 0;
    int exact = 1;
    for (cJSON *e = cJSON_GetObjectItem(back, "n")->child; e; e = e->next, i++)
        exact &= e->valuedouble == numbers[i];
    cJSON_Delete(back);
    cJSON_Delete(obj);
    CHECK(exact);
    CHECK_INT(i, sizeof(numbers) / sizeof(numbers[0]));
}

TEST(full_objects_round_trip)
{
    static const char *const docs[] = {
        FN("  args: [--port, \"8080\"]\n  mode: exec\n  imagePullSecrets: [regcred]\n"
           "  env: {GREETING: \"hello: world\", EMPTY: \"\", MULTI: \"a\\nb\"}\n"
           "  scaling: {minReplicas: 0, maxReplicas: 10, concurrency: 10, queueLength: 100,"
           " idleTimeout: 5m}\n"
           "  timeout: 30s\n  resources: {memory: 256Mi, pids: 128, cpu: \"1\"}\n"
           "status:\n  observedGeneration: 2\n  conditions:\n"
           "  - {type: Ready, status: \"True\", reason: Ok, message: \"\","
           " lastTransitionTime: \"2026-01-01T00:00:00Z\"}\n"),
        FC("  prefixes: [\"\", example.com/fns]\n"
           "  binaryExecutor: {tags: [v1], path: set-namespace}\n"
           "  podExecutor: {tags: [v1], timeToLive: 30m, maxParallelExecutions: 4,"
           " preferredMaxQueueLength: 2, templateOverrides: {}}\n"),
        SECRET("type: Opaque\ndata: {a: QQ==}\nstringData: {b: \"yes\"}\n"),
    };
    static const char *const kinds[] = {"Function", "FunctionConfig", "Secret"};
    for (size_t i = 0; i < 3; i++) {
        cJSON *obj = api_decode_text(docs[i]);
        CHECK(obj);
        funcd_api_error err;
        if (funcd_api_validate(funcd_kind_by_kind(kinds[i]), obj, &err) < 0) {
            cJSON_Delete(obj);
            FAILF("%s: %s: %s", kinds[i], err.field, err.message);
        }
        char *bad = round_trip_failure(obj);
        cJSON_Delete(obj);
        if (bad) {
            fprintf(stderr, "%s", bad);
            free(bad);
            FAILF("%s does not round-trip", kinds[i]);
        }
    }
}

/* ---- normalize ---------------------------------------------------------------------- */

TEST(normalize_secret)
{
    cJSON *obj = api_decode_text(
        SECRET("data: {keep: QQ==, both: b2xk}\nstringData: {both: new, added: \"s3cret\"}\n"));
    CHECK(obj);
    const funcd_kind *secret = funcd_kind_by_kind("Secret");
    funcd_api_error err;
    CHECK_INT(funcd_api_validate(secret, obj, &err), 0);
    CHECK_INT(funcd_api_normalize(secret, obj), 0);
    char *json = cJSON_PrintUnformatted(obj);
    cJSON_Delete(obj);
    CHECK_STR(json, "{\"apiVersion\":\"funcd.dev/v1\",\"kind\":\"Secret\",\"metadata\":{\"name\":"
                    "\"creds\"},\"data\":{\"keep\":\"QQ==\",\"both\":\"bmV3\",\"added\":"
                    "\"czNjcmV0\"},\"type\":\"Opaque\"}");
    free(json);

    /* stringData alone creates data; the result validates again. */
    obj = api_decode_text(SECRET("type: Opaque\nstringData: {a: \"\", b: \"ab\", c: \"abc\"}\n"));
    CHECK(obj);
    CHECK_INT(funcd_api_normalize(secret, obj), 0);
    CHECK(!cJSON_GetObjectItem(obj, "stringData"));
    cJSON *data = cJSON_GetObjectItem(obj, "data");
    int ok = cJSON_IsObject(data) &&
             strcmp(cJSON_GetObjectItem(data, "a")->valuestring, "") == 0 &&
             strcmp(cJSON_GetObjectItem(data, "b")->valuestring, "YWI=") == 0 &&
             strcmp(cJSON_GetObjectItem(data, "c")->valuestring, "YWJj") == 0 &&
             funcd_api_validate(secret, obj, &err) == 0;
    cJSON_Delete(obj);
    CHECK(ok);

    /* Docker config given in plain text survives the move into data. */
    obj = api_decode_text(SECRET("type: kubernetes.io/dockerconfigjson\n"
                                 "stringData: {.dockerconfigjson: '{\"auths\": {}}'}\n"));
    CHECK(obj);
    CHECK_INT(funcd_api_normalize(secret, obj), 0);
    int rc = funcd_api_validate(secret, obj, &err);
    cJSON_Delete(obj);
    CHECK_INT(rc, 0);
    CHECK_INT(funcd_api_normalize(NULL, NULL), FUNCD_EINVAL);
}

TEST(normalize_strips_nulls)
{
    cJSON *obj = api_decode_text(FN("  timeout: null\n  scaling: {minReplicas: ~}\n"));
    CHECK(obj);
    cJSON_AddNullToObject(obj, "status");
    cJSON *spec = cJSON_GetObjectItem(obj, "spec");
    cJSON_AddNullToObject(spec, "args");
    CHECK_INT(funcd_api_normalize(funcd_kind_by_kind("Function"), obj), 0);
    CHECK(!cJSON_GetObjectItem(spec, "timeout"));
    CHECK(!cJSON_GetObjectItem(spec, "args"));
    CHECK(cJSON_IsObject(cJSON_GetObjectItem(spec, "scaling")));
    CHECK(!cJSON_GetObjectItem(cJSON_GetObjectItem(spec, "scaling"), "minReplicas"));
    CHECK(!cJSON_GetObjectItem(obj, "status"));
    cJSON_Delete(obj);

    obj = api_decode_text(FC("  podExecutor: {templateOverrides: {a: null}}\n") "status: {x: null}\n");
    CHECK(obj);
    CHECK_INT(funcd_api_normalize(funcd_kind_by_kind("FunctionConfig"), obj), 0);
    cJSON *over = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "spec"),
                                                          "podExecutor"),
                                      "templateOverrides");
    int kept = cJSON_IsNull(cJSON_GetObjectItem(over, "a")) &&
               cJSON_IsNull(cJSON_GetObjectItem(cJSON_GetObjectItem(obj, "status"), "x"));
    cJSON_Delete(obj);
    CHECK(kept);
}

int main(void)
{
    RUN(kinds);
    RUN(durations);
    RUN(quantities);
    RUN(cpu);
    RUN(decode_json);
    RUN(decode_size_bounds);
    RUN(yaml_scalars);
    RUN(yaml_structure_errors);
    RUN(decode_all_forms);
    RUN(decode_all_size_bounds);
    RUN(yaml_output_shape);
    RUN(yaml_output_strings_round_trip);
    RUN(yaml_output_long_keys_and_numbers);
    RUN(full_objects_round_trip);
    RUN(normalize_secret);
    RUN(normalize_strips_nulls);
    return HARNESS_END();
}
