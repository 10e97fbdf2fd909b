/*
 * Subject rules shared by the bus drivers, so that a subject the memory bus
 * refuses is refused by NATS too (libnats checks little itself and the server
 * answers a bad publish asynchronously, long after publish returned).
 */
#include "bus/subject.h"

#include <string.h>

#include "funcd/sys/error.h"

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

/* NULL if valid, else why not. */
static const char *subject_problem(const char *subject, int wildcards)
{
    if (!subject || !subject[0])
        return "it is empty";
    const char *tok = subject;
    for (;;) {
        const char *dot = strchr(tok, '.');
        size_t len = dot ? (size_t)(dot - tok) : strlen(tok);
        if (len == 0)
            return "it has an empty token";
        for (size_t i = 0; i < len; i++)
            if (is_space(tok[i]))
                return "it contains white space";
        int star = len == 1 && tok[0] == '*', tail = len == 1 && tok[0] == '>';
        if ((star || tail) && !wildcards)
            return "a publish subject cannot contain wildcards";
        if (tail && dot)
            return "'>' must be the last token";
        if (!dot)
            return NULL;
        tok = dot + 1;
    }
}

int funcd_bus_check_subject(const char *subject, int wildcards, const char *what)
{
    const char *why = subject_problem(subject, wildcards);
    if (why)
        return funcd_error_set(FUNCD_EINVAL,
                               "bus: cannot %s subject \"%s\": %s; subjects are dot-separated "
                               "non-empty tokens like \"funcd.events.default\"",
                               what, subject ? subject : "(null)", why);
    return 0;
}

int funcd_bus_check_queue_group(const char *group, const char *subject)
{
    if (group && (!group[0] || strpbrk(group, " \t\r\n\f\v")))
        return funcd_error_set(FUNCD_EINVAL,
                               "bus: queue group \"%s\" on \"%s\" is invalid; use a non-empty name "
                               "without white space, or NULL for fan-out",
                               group, subject);
    return 0;
}

static size_t token_len(const char *s)
{
    const char *dot = strchr(s, '.');
    return dot ? (size_t)(dot - s) : strlen(s);
}

int funcd_bus_subject_matches(const char *pattern, const char *subject)
{
    for (;;) {
        size_t pl = token_len(pattern), sl = token_len(subject);
        if (pl == 1 && pattern[0] == '>')
            return 1;
        if (!(pl == 1 && pattern[0] == '*') && (pl != sl || memcmp(pattern, subject, pl) != 0))
            return 0;
        int pmore = pattern[pl] == '.', smore = subject[sl] == '.';
        if (!pmore || !smore)
            return pmore == smore;
        pattern += pl + 1;
        subject += sl + 1;
    }
}

int funcd_bus_check_name(const char *what, const char *name)
{
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > 64 || strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                         "0123456789_-") != n)
        return funcd_error_set(FUNCD_EINVAL,
                               "bus: %s name \"%s\" is invalid; use 1 to 64 of A-Z a-z 0-9 _ -",
                               what, name ? name : "(null)");
    return 0;
}

int funcd_bus_patterns_overlap(const char *a, const char *b)
{
    for (;;) {
        size_t al = token_len(a), bl = token_len(b);
        if ((al == 1 && a[0] == '>') || (bl == 1 && b[0] == '>'))
            return 1;
        int wild = (al == 1 && a[0] == '*') || (bl == 1 && b[0] == '*');
        if (!wild && (al != bl || memcmp(a, b, al) != 0))
            return 0;
        int amore = a[al] == '.', bmore = b[bl] == '.';
        if (!amore || !bmore)
            return amore == bmore;
        a += al + 1;
        b += bl + 1;
    }
}

int funcd_bus_check_subscribe(const char *subject, const char *queue_group, int given)
{
    int rc = funcd_bus_check_subject(subject, 1, "subscribe to");
    if (rc < 0)
        return rc;
    if (!given)
        return funcd_error_set(FUNCD_EINVAL,
                               "bus: subscribe to \"%s\" needs a callback and an out handle",
                               subject);
    return funcd_bus_check_queue_group(queue_group, subject);
}
