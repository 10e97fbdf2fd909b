/*
 * The worker evaluator's hooks for tests (the evaluator itself is created
 * with funcd_eval_worker_new, declared in fnrunner/evaluator.h).
 *
 * Threads: the loop's thread only.
 */
#ifndef FUNCD_FNRUNNER_WORKER_H
#define FUNCD_FNRUNNER_WORKER_H

#include <stddef.h>

#include "fnrunner/evaluator.h"

/* The process ids of up to `max` running workers (any image) into `pids`;
 * returns how many there are in all. */
size_t funcd_eval_worker_pids(const funcd_evaluator *ev, int *pids, size_t max);

/* Warm-worker pools currently kept (one per podExecutor FunctionConfig). */
unsigned funcd_eval_worker_pools(const funcd_evaluator *ev);

#endif
