/*
 * How many threads the embedded gateway serves on when asked for "one per
 * CPU" (threads 0): one per CPU this process may run on (its affinity mask,
 * a cgroup's CPU quota), at most 4; not one per CPU of the host. A gateway
 * confined to fewer cores than the host has would otherwise run more
 * threads than cores, next to the workers and whatever else runs there.
 */
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "../harness.h"
#include "gateway/embedded.h"

static unsigned threads_of_new(unsigned asked)
{
    funcd_gateway *g = NULL;
    if (funcd_gateway_embedded_new(&g, asked) < 0)
        return 0;
    unsigned n = funcd_gateway_embedded_threads(g);
    g->free(g);
    return n;
}

TEST(one_thread_when_confined_to_one_cpu)
{
    cpu_set_t was, one;
    CHECK(sched_getaffinity(0, sizeof(was), &was) == 0);
    int first = -1;
    for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
        if (CPU_ISSET(i, &was))
            first = i;
    CHECK(first >= 0);
    CPU_ZERO(&one);
    CPU_SET(first, &one);
    CHECK(sched_setaffinity(0, sizeof(one), &one) == 0);
    unsigned n = threads_of_new(0);
    sched_setaffinity(0, sizeof(was), &was);
    if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
        fprintf(stderr, "  (a one-CPU host: this case cannot tell the two counts apart)\n");
    CHECK_INT(n, 1);
}

TEST(one_per_usable_cpu_at_most_four)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
    unsigned usable = (unsigned)CPU_COUNT(&set);
    unsigned n = threads_of_new(0);
    CHECK(n >= 1);
    CHECK(n <= 4);
    CHECK(n <= usable); /* a cgroup quota may make it fewer still */
}

TEST(explicit_counts_win)
{
    CHECK_INT(threads_of_new(3), 3);
    setenv("FUNCD_GATEWAY_THREADS", "2", 1);
    unsigned from_env = threads_of_new(0);
    unsetenv("FUNCD_GATEWAY_THREADS");
    CHECK_INT(from_env, 2);
}

int main(void)
{
    unsetenv("FUNCD_GATEWAY_THREADS");
    RUN(one_thread_when_confined_to_one_cpu);
    RUN(one_per_usable_cpu_at_most_four);
    RUN(explicit_counts_win);
    return HARNESS_END();
}
