/*
 * The rank's trace recorder ([run] trace, docs/trace.md): spans of work
 * (a step, a layer's forward, a collective, a send) on the monotonic clock,
 * kept in one buffer of fixed capacity per process and written as the
 * rank's file (<out_dir>/trace/rank-NNNNN.trace) for trace_merge.c.
 *
 * Cost when off: plait_trace_begin() is one relaxed load and a branch
 * that is always taken the same way; nothing is allocated.
 *
 * Ownership and lifetime: plait_trace_open allocates the buffer, which
 * lives until plait_trace_close (one per process; a second open replaces
 * the first). Thread-safety: plait_trace_span and plait_trace_begin may be
 * called from any thread at once (a slot is claimed with one atomic add;
 * a full buffer counts the span as dropped, never grows); open, close,
 * plait_trace_set_recording, plait_trace_set_clock and plait_trace_write
 * belong to the rank's main thread. plait_trace_write skips a span whose
 * writer has not finished it.
 *
 * Errors: plait_trace_open PLAIT_ERR_NO_MEMORY; plait_trace_write
 * out_file.c's (the path in the message).
 */
#ifndef PLAIT_CORE_RUNTIME_TRACE_H
#define PLAIT_CORE_RUNTIME_TRACE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

#include "runtime/clock.h"

/* What a span is; the merged file's "cat". */
typedef enum plait_trace_cat {
    PLAIT_TRACE_STEP,    /* one training step */
    PLAIT_TRACE_COMPUTE, /* a layer's forward or backward */
    PLAIT_TRACE_INSTR,   /* one pipeline instruction of the schedule */
    PLAIT_TRACE_COLL,    /* a collective, on the thread that ran it */
    PLAIT_TRACE_P2P,     /* a point-to-point send or receive, posted to completed */
    PLAIT_TRACE_OPTIM,   /* the optimizer step */
    PLAIT_TRACE_CKPT,    /* a checkpoint write */
    PLAIT_TRACE_WAIT,    /* blocked on a request or a pipeline neighbour */
    PLAIT_TRACE_KERNEL,  /* a device's kernels, on its stream's track (core/device/device_trace.c) */
    PLAIT_TRACE_COPY,    /* a device's copy or fill, on its stream's track */
    PLAIT_TRACE_CATS
} plait_trace_cat;

/* A span's integer facts; -1 (PLAIT_TRACE_NONE) where one does not apply.
 * `comm` and `detail` are copied (NULL: none). */
#define PLAIT_TRACE_NONE (-1)
typedef struct plait_trace_args {
    int64_t bytes;      /* bytes moved (a collective: count x element size) */
    int64_t peer;       /* p2p: the other side's world rank */
    int64_t tag;        /* p2p: its tag; a collective: its sequence number on the communicator */
    int64_t group;      /* the communicator's first world rank (with comm and tag: one collective) */
    int64_t members;    /* the communicator's size */
    int64_t posted_ns;  /* when it was posted or queued (the clock of plait_clock_now_ns) */
    int64_t layer, mb;  /* compute and instructions: the layer (or chunk) and micro-batch */
    const char *comm;   /* the communicator's name (dp, tp, pp, world) */
    const char *detail; /* the algorithm, the instruction's operands */
} plait_trace_args;

/* Arguments with every field absent; set those that apply. */
#define PLAIT_TRACE_ARGS                                                                                             \
    {PLAIT_TRACE_NONE, PLAIT_TRACE_NONE, PLAIT_TRACE_NONE, PLAIT_TRACE_NONE, PLAIT_TRACE_NONE, PLAIT_TRACE_NONE,     \
     PLAIT_TRACE_NONE, PLAIT_TRACE_NONE, NULL, NULL}

extern atomic_int plait_trace_recording_flag;

/* Is a span begun now recorded? */
static inline int plait_trace_on(void) {
    return __builtin_expect(atomic_load_explicit(&plait_trace_recording_flag, memory_order_relaxed), 0);
}

/* The start of a span: the clock when recording, else 0 (then
 * plait_trace_end records nothing). */
static inline uint64_t plait_trace_begin(void) { return plait_trace_on() ? plait_clock_now_ns() : 0; }

/* Record a complete span [t0, t1] (ns, plait_clock_now_ns) on the calling
 * thread. `name` is copied (at most 47 bytes kept); `args` may be NULL. */
void plait_trace_span(plait_trace_cat cat, const char *name, uint64_t t0, uint64_t t1, const plait_trace_args *args);

/* The same on the named track `track` (a device's stream: "stream
 * compute") rather than the calling thread's; its first use numbers it
 * as a thread is numbered. Main thread only. */
void plait_trace_span_on(const char *track, plait_trace_cat cat, const char *name, uint64_t t0, uint64_t t1,
                         const plait_trace_args *args);
/* Count `n` spans dropped elsewhere (a device's buffer full). */
void plait_trace_add_dropped(uint64_t n);

/* The span from plait_trace_begin's `t0` to now, when t0 != 0. */
static inline void plait_trace_end(plait_trace_cat cat, const char *name, uint64_t t0, const plait_trace_args *args) {
    if (t0) plait_trace_span(cat, name, t0, plait_clock_now_ns(), args);
}

/* Make the buffer (`capacity` spans) for world rank `rank`, whose file is
 * `path`; recording stays off until plait_trace_set_recording(1). */
plait_status plait_trace_open(size_t capacity, int rank, const char *path);
/* Start or stop recording (no-op without an open buffer). */
void plait_trace_set_recording(int on);
/* This rank's clock against rank 0's: rank 0's clock = ours + offset_ns,
 * within uncertainty_ns (half the best round trip of `rounds`). */
void plait_trace_set_clock(int64_t offset_ns, int64_t uncertainty_ns, int rounds);
/* Spans held, and spans dropped because the buffer was full. */
size_t plait_trace_count(void);
uint64_t plait_trace_dropped(void);
/* Write the rank's file (atomically: a temporary file renamed over it).
 * 0 spans are a valid file. Without an open buffer: PLAIT_OK, nothing. */
plait_status plait_trace_write(void);
/* Whether a buffer is open (a traced run). */
int plait_trace_is_open(void);
/* Free the buffer; recording stops. */
void plait_trace_close(void);

const char *plait_trace_cat_name(plait_trace_cat cat);

#endif
