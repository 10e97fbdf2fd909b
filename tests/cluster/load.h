/*
 * Constant load for the cluster tests: a few client threads, each on one
 * keep-alive connection, sending one request after another (so a thread
 * has at most one request in flight at any instant) and counting. Every
 * request carries "X-Req: <thread>-<seq>", which nginx's access log of the
 * cluster harness records next to the upstream that served it.
 *
 * A failure is any answer but 200 (0: no answer at all); the first
 * CL_LOAD_MAX_FAILS of each thread are kept with their times.
 */
#ifndef FUNCD_TESTS_CLUSTER_LOAD_H
#define FUNCD_TESTS_CLUSTER_LOAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define CL_LOAD_THREADS 8
#define CL_LOAD_MAX_FAILS 32

typedef struct cl_failure {
    char id[32];        /* its X-Req */
    int64_t start, end; /* monotonic ms */
    long status;
    char body[160];     /* the start of the answer (or curl's error) */
} cl_failure;

typedef struct cl_load_thread {
    pthread_t th;
    struct cl_load *load;
    int idx;
    const char *method; /* "GET" or "POST" (with a small body) */
    char url[256];      /* the whole URL of every request */
    atomic_long ok, failed;
    cl_failure fails[CL_LOAD_MAX_FAILS];
    int nfails;
} cl_load_thread;

typedef struct cl_load {
    atomic_int stop;
    int n, started;
    cl_load_thread t[CL_LOAD_THREADS];
} cl_load;

/* Adds a client thread sending `method` to `url` (not started yet). */
void cl_load_add(cl_load *l, const char *method, const char *url);

/* Starts every thread added; 0 or -1. */
int cl_load_start(cl_load *l);

/* Answers 200 so far over all threads, and failures. */
long cl_load_ok(cl_load *l);
long cl_load_failed(cl_load *l);

/* Stops and joins the threads (their counts and failures stay readable).
 * Safe on a load never started. */
void cl_load_stop(cl_load *l);

#endif
