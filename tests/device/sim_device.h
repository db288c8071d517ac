/*
 * The sim test device's parts (sim_device.c: memory, the compute stream's
 * queue, events, the plugin; sim_kernels.c: the kernel table, each entry
 * queued and run late by the CPU kernels). Tests only, never installed.
 */
#ifndef PLAIT_SIM_DEVICE_H
#define PLAIT_SIM_DEVICE_H

#include <stdint.h>

#include <plait/kernels.h>

#include "kernels/kernels.h"

/* Device memory is host memory at this offset: a non-canonical x86-64
 * address, so a host load or store of it faults at once. */
#define SIM_OFFSET ((uintptr_t)1 << 62)

/* device address -> host address (HN: never NULL) */
#define HN(p) ((void *)((uintptr_t)(p) - SIM_OFFSET))
#define H(p) ((void *)((p) ? (uintptr_t)(p) - SIM_OFFSET : 0))
#define HF(p) ((float *)H(p))
#define HC(p) ((const float *)H(p))
#define HI(p) ((const int32_t *)H(p))

typedef union sim_slot {
    int64_t i;
    float f;
    double d;
    const void *p;
} sim_slot;

/* One queued operation: a runner and its arguments; `extra` (malloc'ed,
 * freed after the run) holds host bytes taken at the call. */
typedef struct sim_op {
    void (*run)(const struct sim_op *o);
    sim_slot a[13];
    void *extra;
} sim_op;

/* Queue `o` on the compute stream (o->extra, if any, is freed after it
 * runs). Thread-safe. */
void sim_enqueue(const sim_op *o);
/* Run everything queued, on this thread (not counted as a host
 * synchronisation: an operation with no room to queue runs in order). */
void sim_run_all(void);
/* Run everything queued, on this thread: a host synchronisation of the
 * compute stream (counted for the model's thread). */
void sim_host_sync(void);
/* The kernel table (sim_kernels.c). */
const plait_kernels *sim_kernel_table(void);

/* a queued operation's arguments */
#define P(x) ((sim_slot){.p = (const void *)(x)})
#define I(x) ((sim_slot){.i = (int64_t)(x)})
#define F(x) ((sim_slot){.f = (x)})
#define D(x) ((sim_slot){.d = (x)})
#define Q(runner, ...) sim_enqueue(&(sim_op){.run = (runner), .a = {__VA_ARGS__}})

#endif
