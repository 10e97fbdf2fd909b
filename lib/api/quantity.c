/*
 * Durations ("1h30m"), Kubernetes quantities ("256Mi") and CPU ("500m").
 *
 * Everything is integer arithmetic with overflow checks: the inputs come
 * from users, and a double would silently round "9007199254740993".
 */
#include <stdint.h>
#include <string.h>

#include "api/api.h"
#include "funcd/sys/error.h"

typedef unsigned __int128 u128;

#define U128_MAX (~(u128)0)
#define MAX_SIGNIFICANT_DIGITS 36 /* 10^36 < 2^128 / 2^8, room for a suffix */

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int mul_u128(u128 a, u128 b, u128 *out)
{
    if (a != 0 && b > U128_MAX / a)
        return -1;
    *out = a * b;
    return 0;
}

static int pow10_u128(unsigned e, u128 *out)
{
    u128 v = 1;
    for (unsigned i = 0; i < e; i++)
        if (mul_u128(v, 10, &v) < 0)
            return -1;
    *out = v;
    return 0;
}

static int bad(const char *what, const char *s)
{
    return funcd_error_set(FUNCD_EINVAL, "invalid %s \"%.64s\"", what, s ? s : "(null)");
}

/* ---- durations ------------------------------------------------------------ */

/* Reads "<digits>[.<digits>]" as whole + frac / frac_scale. */
static int read_decimal(const char **pp, uint64_t *whole, uint64_t *frac, uint64_t *frac_scale)
{
    const char *p = *pp;
    int digits = 0;
    *whole = 0;
    *frac = 0;
    *frac_scale = 1;
    for (; is_digit(*p); p++, digits++) {
        if (__builtin_mul_overflow(*whole, 10, whole) ||
            __builtin_add_overflow(*whole, (uint64_t)(*p - '0'), whole))
            return -1;
    }
    if (*p == '.') {
        /* Digits past the 18th cannot change a millisecond result. */
        for (p++; is_digit(*p); p++, digits++) {
            if (*frac_scale < 1000000000000000000ULL) {
                *frac = *frac * 10 + (uint64_t)(*p - '0');
                *frac_scale *= 10;
            }
        }
    }
    *pp = p;
    return digits > 0 ? 0 : -1;
}

static uint64_t duration_unit_ms(const char **pp)
{
    const char *p = *pp;
    if (p[0] == 'm' && p[1] == 's') {
        *pp = p + 2;
        return 1;
    }
    *pp = p + 1;
    switch (p[0]) {
    case 's': return 1000;
    case 'm': return 60 * 1000;
    case 'h': return 60 * 60 * 1000;
    default: *pp = p; return 0;
    }
}

int funcd_parse_duration_ms(const char *s, uint64_t *out)
{
    if (!s || !*s)
        return bad("duration", s);
    if (strcmp(s, "0") == 0) {
        *out = 0;
        return 0;
    }
    uint64_t total = 0;
    for (const char *p = s; *p;) {
        uint64_t whole, frac, scale;
        if (read_decimal(&p, &whole, &frac, &scale) < 0)
            return bad("duration", s);
        uint64_t unit = duration_unit_ms(&p);
        if (!unit)
            return bad("duration", s);
        uint64_t part;
        if (__builtin_mul_overflow(whole, unit, &part) ||
            __builtin_add_overflow(part, (uint64_t)((u128)frac * unit / scale), &part) ||
            __builtin_add_overflow(total, part, &total))
            return bad("duration", s);
    }
    *out = total;
    return 0;
}

/* ---- quantities ----------------------------------------------------------- */

/* A parsed quantity: mantissa * 2^bin_shift * 10^exp10. */
typedef struct quantity {
    u128 mantissa;
    int exp10;
    unsigned bin_shift;
} quantity;

static int read_mantissa(const char **pp, quantity *q)
{
    const char *p = *pp;
    int digits = 0, significant = 0, seen_dot = 0;
    q->mantissa = 0;
    q->exp10 = 0;
    for (;; p++) {
        if (*p == '.' && !seen_dot) {
            seen_dot = 1;
            continue;
        }
        if (!is_digit(*p))
            break;
        digits++;
        if (q->mantissa == 0 && *p == '0') {
            if (seen_dot)
                q->exp10--;
            continue;
        }
        if (++significant > MAX_SIGNIFICANT_DIGITS)
            return -1;
        q->mantissa = q->mantissa * 10 + (unsigned)(*p - '0');
        if (seen_dot)
            q->exp10--;
    }
    *pp = p;
    return digits > 0 ? 0 : -1;
}

static int read_exponent(const char *p, int *exp)
{
    int sign = 1, v = 0, digits = 0;
    if (*p == '+' || *p == '-')
        sign = *p++ == '-' ? -1 : 1;
    for (; is_digit(*p); p++, digits++) {
        if (v > 1000)
            return -1; /* far beyond anything representable */
        v = v * 10 + (*p - '0');
    }
    if (!digits || *p)
        return -1;
    *exp = sign * v;
    return 0;
}

static int read_suffix(const char *p, quantity *q)
{
    static const struct {
        const char *suffix;
        int exp10;
        unsigned bin_shift;
    } suffixes[] = {
        {"", 0, 0},   {"Ki", 0, 10}, {"Mi", 0, 20}, {"Gi", 0, 30}, {"Ti", 0, 40}, {"Pi", 0, 50},
        {"Ei", 0, 60}, {"n", -9, 0},  {"u", -6, 0},  {"m", -3, 0},  {"k", 3, 0},   {"M", 6, 0},
        {"G", 9, 0},  {"T", 12, 0},  {"P", 15, 0},  {"E", 18, 0},
    };
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        if (strcmp(p, suffixes[i].suffix) == 0) {
            q->exp10 += suffixes[i].exp10;
            q->bin_shift = suffixes[i].bin_shift;
            return 0;
        }
    }
    int exp;
    if ((p[0] == 'e' || p[0] == 'E') && read_exponent(p + 1, &exp) == 0) {
        q->exp10 += exp;
        q->bin_shift = 0;
        return 0;
    }
    return -1;
}

/* ceil(q * 10^scale10) as a uint64, or -1 when it does not fit. */
static int quantity_value(const quantity *q, int scale10, uint64_t *out)
{
    u128 num = q->mantissa, den = 1, p10;
    int exp = q->exp10 + scale10;
    if (num == 0) {
        *out = 0;
        return 0;
    }
    if (mul_u128(num, (u128)1 << q->bin_shift, &num) < 0)
        return -1;
    if (exp >= 0) {
        if (exp > 60 || pow10_u128((unsigned)exp, &p10) < 0 || mul_u128(num, p10, &num) < 0)
            return -1;
    } else if (exp < -60 || pow10_u128((unsigned)-exp, &den) < 0) {
        *out = 1; /* a positive amount smaller than one unit rounds up */
        return 0;
    }
    u128 v = num / den + (num % den != 0);
    if (v > UINT64_MAX)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

static int parse_quantity_scaled(const char *s, int scale10, uint64_t *out)
{
    if (!s || !*s)
        return -1;
    const char *p = s;
    if (*p == '+')
        p++;
    quantity q;
    if (read_mantissa(&p, &q) < 0 || read_suffix(p, &q) < 0)
        return -1;
    return quantity_value(&q, scale10, out);
}

int funcd_parse_quantity(const char *s, uint64_t *out)
{
    uint64_t v;
    if (parse_quantity_scaled(s, 0, &v) < 0)
        return bad("quantity", s);
    *out = v;
    return 0;
}

int funcd_parse_cpu_millis(const char *s, uint64_t *out)
{
    uint64_t v;
    if (parse_quantity_scaled(s, 3, &v) < 0)
        return bad("CPU quantity", s);
    *out = v;
    return 0;
}

/* ---- revisions ------------------------------------------------------------ */

int funcd_api_parse_revision(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || len == 0)
        return funcd_error_set(FUNCD_EINVAL, "a resourceVersion must not be empty");
    for (size_t i = 0; i < len; i++) {
        if (!is_digit(s[i]) || __builtin_mul_overflow(v, 10, &v) ||
            __builtin_add_overflow(v, (uint64_t)(s[i] - '0'), &v) ||
            v > (uint64_t)FUNCD_API_MAX_REVISION)
            return funcd_error_set(FUNCD_EINVAL, "a resourceVersion is a decimal number of at "
                                   "most %lld", (long long)FUNCD_API_MAX_REVISION);
    }
    *out = v;
    return 0;
}
