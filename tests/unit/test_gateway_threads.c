/*
 * How many threads the embedded gateway serves on when asked for "one per
 * CPU" (threads 0): one per CPU this process may run on (its affinity mask,
 * a cgroup's CPU quota), at most 4; not one per CPU of the host. A gateway
 * confined to fewer cores than the host has would otherwise run more
 * threads than cores, next to the workers and whatever else runs there.
 * The threads are named "funcd-gw/N" and run under SCHED_BATCH unless
 * FUNCD_GATEWAY_SCHED=normal (docs/adr/0061-gateway-threads-sched-batch.md).
 */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

/* The policy of each of this process's threads named funcd-gw/0..n-1, in
 * policy[]; the count of such threads found. */
static int gateway_threads_policy(int *policy, int n)
{
    int found = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        char path[64], comm[32] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        int got = fgets(comm, sizeof(comm), f) != NULL;
        fclose(f);
        unsigned i;
        if (got && sscanf(comm, "funcd-gw/%u", &i) == 1 && i < (unsigned)n) {
            int p = sched_getscheduler(atoi(e->d_name));
            policy[i] = p < 0 ? p : p & ~SCHED_RESET_ON_FORK;
            found++;
        }
    }
    closedir(d);
    return found;
}

static int policy_of_running(const char *sched, int *policy)
{
    if (sched)
        setenv("FUNCD_GATEWAY_SCHED", sched, 1);
    funcd_gateway *g = NULL;
    char bound[64];
    int found = -1;
    if (funcd_gateway_embedded_new(&g, 2) == 0 &&
        g->listen(g, "127.0.0.1:0", bound, sizeof(bound)) == 0 && g->start(g) == 0)
        found = gateway_threads_policy(policy, 2);
    if (g) {
        g->stop(g);
        g->free(g);
    }
    unsetenv("FUNCD_GATEWAY_SCHED");
    return found;
}

TEST(gateway_threads_are_named_and_batch_by_default)
{
    int policy[2] = {-1, -1};
    CHECK_INT(policy_of_running(NULL, policy), 2);
    CHECK_INT(policy[0], SCHED_BATCH);
    CHECK_INT(policy[1], SCHED_BATCH);
}

TEST(gateway_sched_normal_keeps_the_policy_it_was_started_with)
{
    int policy[2] = {-1, -1};
    int ours = sched_getscheduler(0) & ~SCHED_RESET_ON_FORK; /* (a runner under chrt) */
    CHECK_INT(policy_of_running("normal", policy), 2);
    CHECK_INT(policy[0], ours);
    CHECK_INT(policy[1], ours);
}

TEST(a_gateway_sched_of_neither_is_refused)
{
    setenv("FUNCD_GATEWAY_SCHED", "Normal", 1);
    funcd_gateway *g = NULL;
    int rc = funcd_gateway_embedded_new(&g, 1);
    unsetenv("FUNCD_GATEWAY_SCHED");
    CHECK(rc < 0);
    CHECK(g == NULL);
    CHECK(strstr(funcd_error_last()->message, "FUNCD_GATEWAY_SCHED") != NULL);
}

int main(void)
{
    unsetenv("FUNCD_GATEWAY_THREADS");
    unsetenv("FUNCD_GATEWAY_SCHED");
    RUN(one_thread_when_confined_to_one_cpu);
    RUN(one_per_usable_cpu_at_most_four);
    RUN(explicit_counts_win);
    RUN(gateway_threads_are_named_and_batch_by_default);
    RUN(gateway_sched_normal_keeps_the_policy_it_was_started_with);
    RUN(a_gateway_sched_of_neither_is_refused);
    return HARNESS_END();
}
