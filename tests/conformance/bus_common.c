/* The bus suites' runner: see bus_common.h. */
#include "bus_common.h"

int conf_bus_run(const char *suite, const char *title, const conf_bus_case *cases, size_t n,
                 funcd_bus *(*make)(void *payload), void *payload, int verbose,
                 int (*fit)(const funcd_bus *b, char *why, size_t len))
{
    conf_tally tally = {0, 0};
    for (size_t i = 0; i < n; i++) {
        conf_case cc = {suite, cases[i].name, verbose, 0};
        funcd_bus *b = make(payload);
        char why[200];
        if (!b)
            conf_fail(&cc, __FILE__, __LINE__, "the factory returned no bus: %s",
                      funcd_error_last()->message);
        else if (!fit(b, why, sizeof(why)))
            conf_fail(&cc, __FILE__, __LINE__, "%s", why);
        else
            cases[i].fn(&cc, b);
        if (b && b->free)
            b->free(b);
        conf_report(&cc, &tally);
    }
    if (verbose)
        fprintf(stderr, "%s: %d passed, %d failed\n", title, tally.passed, tally.failed);
    return tally.failed;
}
