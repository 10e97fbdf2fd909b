/*
 * The ring between one gateway thread (the only producer) and the writer
 * thread (the only consumer): fixed slots, two counters, no lock. A full
 * ring drops the record and counts it.
 */
#ifndef FUNCD_TRACE_RECORDER_RING_H
#define FUNCD_TRACE_RECORDER_RING_H

#include <stdatomic.h>
#include <stdint.h>

#include "trace/edge.h"

#define FUNCD_EDGE_RING_SLOTS 2048 /* at a 10 ms drain: 200,000 records/s per thread */

struct funcd_edge_ring {
    _Atomic uint32_t head; /* the next slot the producer fills */
    _Atomic uint32_t tail; /* the next slot the consumer reads */
    _Atomic uint64_t dropped;
    int want_starts;
    struct funcd_edge_ring *next; /* the recorder's list */
    funcd_edge_rec recs[FUNCD_EDGE_RING_SLOTS];
};

/* The slot to fill, or NULL (full: counted as dropped). */
static inline funcd_edge_rec *funcd_edge_ring_claim(funcd_edge_ring *r)
{
    uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    if (h - atomic_load_explicit(&r->tail, memory_order_acquire) >= FUNCD_EDGE_RING_SLOTS) {
        atomic_fetch_add_explicit(&r->dropped, 1, memory_order_relaxed);
        return NULL;
    }
    return &r->recs[h % FUNCD_EDGE_RING_SLOTS];
}

/* Publishes the slot claim returned. */
static inline void funcd_edge_ring_commit(funcd_edge_ring *r)
{
    uint32_t h = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, h + 1, memory_order_release);
}

#endif
