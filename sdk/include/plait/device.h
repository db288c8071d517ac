/*
 * plait SDK — a compute device (ABI 1.3; streams and events 1.4; its work in
 * the step trace 1.16): where a rank's tensors live and the kernels that
 * compute on them.
 *
 * A device plugin (kind PLAIT_KIND_DEVICE, file libplait-device-<name>.so,
 * selected by `[device] plugin`) provides one `plait_device_ops` table.
 * plait ships two: `cpu` (host memory, the core's CPU kernels) and `cuda`
 * (one NVIDIA GPU: device memory, CUDA kernels, cuBLASLt). A rank opens at
 * most one device, once, after the launcher has forked it and before any
 * other plugin is created; it stays open until the rank exits. Everything
 * in this table is therefore process-wide: there is no device handle.
 *
 * Memory. Parameters, gradients, optimizer state and activations live in
 * the device's memory (`info.mem_kind`: PLAIT_MEM_HOST for cpu,
 * PLAIT_MEM_CUDA for cuda). Plugins get it through host->alloc(bytes,
 * host->device_info->mem_kind, ...) and must never dereference it on the
 * host: they read and write tensor data only through host->kernels (which,
 * from ABI 1.3 on, are the open device's kernels), copy() and the
 * collectives. Host-side control data (a loss, a norm, a few counters)
 * travels with copy().
 *
 * Ordering. Kernels and copies run in one stream, in the order they are
 * called, asynchronously to the calling thread where the device allows
 * (cuda). A copy to the host returns when the bytes are there, so it orders
 * after everything queued before it: it is the host's synchronisation point
 * (the trainer reads the loss once per step that way). synchronize() waits
 * for everything queued and reports an error a kernel raised
 * asynchronously. On the cpu device every call completes before it returns.
 * That stream is the compute stream (PLAIT_STREAM_COMPUTE below).
 *
 * Streams and events (ABI 1.4; the members after free_pinned). A device
 * with them has a second stream, the communication stream
 * (PLAIT_STREAM_COMM), on which the core moves device buffers for the
 * collectives (copy_on), and events that order one stream after a point of
 * the other without blocking the host — the way a GPU overlaps gradient
 * reduction with the backward kernels (PyTorch DDP's reducer and NCCL
 * itself work so). The rules:
 *
 *  - event_record(ev, s) marks the point of stream s after everything
 *    queued on s so far, whichever thread queued it. Any thread may record.
 *    Recording again moves the mark; a wait or synchronize uses the mark
 *    current when it is called. An event never recorded is complete.
 *  - event_wait(ev, s): work queued on stream s after this call starts only
 *    after ev's mark completed. The calling thread does not block (on a GPU
 *    it is cudaStreamWaitEvent). Any thread.
 *  - event_synchronize(ev) blocks the calling thread until ev's mark
 *    completed, and reports an asynchronous failure of the work before it.
 *    Any thread; this is a host synchronisation, but only up to the mark.
 *  - copy_on(s, ...) is copy() in the order of stream s. On the
 *    communication stream it does NOT follow the compute stream: device
 *    memory the compute stream writes or reads must be ordered with an event
 *    first (event_wait on PLAIT_STREAM_COMM, or event_synchronize). Copies
 *    to or from host memory return when the host memory may be read or
 *    reused (the bytes are there, or taken); device-to-device ones are
 *    queued. Compute reading what the communication stream wrote orders
 *    with an event recorded on PLAIT_STREAM_COMM and event_wait on
 *    PLAIT_STREAM_COMPUTE, or by the host having seen the copy return.
 *  - The collectives: plait_coll_opts.ready (plait/coll.h) names the event
 *    after which a collective may touch its device buffers (NULL: the core
 *    records one on the compute stream when the collective is called). The
 *    core's staging for host transports waits for it on the copy thread
 *    (event_synchronize, never a device-wide synchronize) and copies on the
 *    communication stream; a comm plugin moving device memory itself gets
 *    its native handle (event_native: a cudaEvent_t on cuda) and makes its
 *    own stream wait (plait_comm_ops.wait_event, plait/comm.h).
 *
 * Lifetime: event_create makes an event (NULL and the message set on
 * failure); event_destroy releases it once no event_synchronize on it is
 * running (waits already queued on a stream stay valid). Events belong to
 * the open device and are destroyed before close().
 *
 * A device without these members (its struct_size stops before
 * event_create: a plugin built against 1.3) has the compute stream only;
 * the core then copies staged buffers with copy(), which follows the
 * compute stream (PLAIT_DEVICE_HAS_EVENTS below tells which). A device
 * whose kernels run before they return (cpu) implements them trivially:
 * every mark is complete when recorded.
 *
 * Precision ([run] precision): kernels compute in float32 storage; with
 * PLAIT_PRECISION_TF32 the matrix products may use TF32 tensor cores, with
 * PLAIT_PRECISION_BF16 their operands are rounded to bfloat16 and
 * accumulated in float32. Parameters (master weights), gradients, optimizer
 * state and every reduction stay float32 in all modes. A device that cannot
 * honour a mode refuses it in open() with PLAIT_ERR_UNSUPPORTED and a reason.
 *
 * Thread-safety: open/close once per process from the main thread; alloc,
 * free, alloc_pinned, free_pinned, memory_stats, copy and (1.4) the event
 * functions and copy_on from any thread (a copy orders after what was
 * queued before it on the device's stream, whichever thread queued it: the
 * core's staging of device buffers for host transports calls it from the
 * collective's thread); fill_zero, synchronize and the kernels from the
 * thread that runs the model.
 *
 * Errors: functions returning plait_status set the message with
 * host->set_error. alloc returns NULL with the message set.
 */
#ifndef PLAIT_DEVICE_H
#define PLAIT_DEVICE_H

#include <stddef.h>

#include <plait/types.h>
#include <plait/config.h>
#include <plait/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

struct plait_host;

/* [run] precision. */
typedef enum plait_precision {
    PLAIT_PRECISION_FP32 = 0,
    PLAIT_PRECISION_TF32 = 1,
    PLAIT_PRECISION_BF16 = 2
} plait_precision;

/* The device's streams (ABI 1.4). */
typedef enum plait_device_stream {
    PLAIT_STREAM_COMPUTE = 0, /* kernels, fill_zero, copy(): the one stream of ABI 1.3 */
    PLAIT_STREAM_COMM = 1     /* the communication stream: the collectives' copies */
} plait_device_stream;

/* A point in a stream (ABI 1.4): made by event_create, the device's own. */
typedef struct plait_device_event plait_device_event;

/* Direction of copy(). */
typedef enum plait_copy_dir {
    PLAIT_COPY_TO_DEVICE = 0,   /* host memory -> device memory */
    PLAIT_COPY_TO_HOST = 1,     /* device memory -> host memory; returns when done */
    PLAIT_COPY_ON_DEVICE = 2    /* device memory -> device memory */
} plait_copy_dir;

/* One span of the device's work (ABI 1.16), handed to the core's trace
 * by trace_end: a kernel-table entry's kernels ("matmul_forward_bf16") or
 * a copy, on the stream that ran it, from its start to its end on
 * CLOCK_MONOTONIC in nanoseconds. */
typedef struct plait_device_span {
    uint32_t struct_size;
    const char *name;
    int32_t is_copy;            /* 1: a copy or fill of `bytes`; 0: kernels */
    plait_device_stream stream; /* the track it is drawn on */
    uint64_t start_ns, end_ns;
    uint64_t bytes; /* a copy's bytes; 0 for kernels */
} plait_device_span;
typedef void (*plait_device_span_fn)(void *ctx, const plait_device_span *span);

/* What open() found. Filled by the plugin up to the caller's struct_size. */
typedef struct plait_device_info {
    uint32_t struct_size;
    plait_mem_kind mem_kind;   /* where alloc() memory lives */
    int32_t ordinal;           /* the GPU's ordinal among the visible ones; -1 on the cpu device */
    char name[128];            /* "NVIDIA H100 80GB HBM3", "cpu" */
    uint64_t memory_bytes;     /* total device memory; 0 for host memory */
    double peak_flops_bf16;    /* datasheet dense bf16 FLOP/s; 0 if unknown */
    double peak_flops_tf32;    /* datasheet dense tf32 FLOP/s; 0 if unknown */
} plait_device_info;

/* Arguments of open(). */
typedef struct plait_device_open_args {
    uint32_t struct_size;
    const plait_config *cfg;   /* the run's configuration ([device.<name>] keys) */
    int32_t ordinal;           /* [device] ordinal resolved by the core: >= 0, or -1 for "any" */
    int32_t math_threads;      /* host threads this rank may use */
    plait_precision precision; /* [run] precision */
    int32_t deterministic;     /* [run] deterministic: bit-identical repeats required */
} plait_device_open_args;

typedef struct plait_device_ops {
    uint32_t struct_size;

    /* Devices of this kind visible to this process, counted without
     * initialising a driver context in the caller (CUDA does not survive
     * fork: the launcher calls this before it forks ranks), e.g. from sysfs
     * or in a child process. When there are none: *out = 0, PLAIT_OK, and
     * the reason set with host->set_error, phrased for the user as the
     * whole error ("no CUDA device found (no NVIDIA driver is loaded:
     * /proc/driver/nvidia/version is absent)"); the core prints it, naming
     * the [device] plugin key, and starts no rank. */
    plait_status (*count)(const struct plait_host *host, int32_t *out);

    /* Open the device for this process (see the header comment). */
    plait_status (*open)(const struct plait_host *host, const plait_device_open_args *args,
                         plait_device_info *info);
    /* Release everything; nothing of the device may be used afterwards. */
    void (*close)(void);

    /* Device memory of `bytes` (aligned to at least 256 bytes), counted
     * under `tag` in the rank's memory report. NULL and an error on failure.
     * free(NULL) is ignored. The core's host->alloc routes
     * info.mem_kind allocations here. */
    void *(*alloc)(size_t bytes, const char *tag);
    void (*free)(void *ptr);

    /* Copy `bytes` in the device's stream order (see the header comment). */
    plait_status (*copy)(void *dst, const void *src, size_t bytes, plait_copy_dir dir);
    /* Set `bytes` of device memory to zero, in stream order. */
    plait_status (*fill_zero)(void *dst, size_t bytes);
    /* Wait for everything queued; report a kernel's asynchronous failure. */
    plait_status (*synchronize)(void);

    /* Bytes of device memory allocated now and at most since open(). */
    void (*memory_stats)(uint64_t *in_use, uint64_t *peak);

    /* The kernels on this device's memory (the same contract as
     * plait/kernels.h; pointers are device pointers). Valid after open(). */
    const plait_kernels *(*kernels)(void);

    /* Page-locked host memory of `bytes` (cudaHostAlloc), aligned to a
     * page (4096 bytes) at least, which copy() moves at full bus speed and
     * asynchronously; the core counts it under `tag`. The
     * core's host->alloc routes PLAIT_MEM_HOST_PINNED here, and its staging
     * of device buffers for host-memory transports pools it. Host code may
     * dereference it. NULL members, or NULL with a reason, mean "none": the
     * core then uses plain host memory. Any thread. */
    void *(*alloc_pinned)(size_t bytes, const char *tag);
    void (*free_pinned)(void *ptr);

    /* --- ABI 1.4: streams and events (see the header comment) --------- */
    /* All or none: a device with events sets every member below. */
    plait_device_event *(*event_create)(void);
    void (*event_destroy)(plait_device_event *ev);
    plait_status (*event_record)(plait_device_event *ev, plait_device_stream stream);
    plait_status (*event_wait)(plait_device_event *ev, plait_device_stream stream);
    plait_status (*event_synchronize)(plait_device_event *ev);
    plait_status (*copy_on)(plait_device_stream stream, void *dst, const void *src, size_t bytes,
                            plait_copy_dir dir);
    /* The event's native handle for a comm plugin sharing the device's
     * driver (a cudaEvent_t on cuda), or NULL where there is none (cpu). */
    void *(*event_native)(plait_device_event *ev);

    /* --- ABI 1.16: the device's own work in the step trace ------------- */
    /* Both or neither (PLAIT_DEVICE_HAS_TRACE). While [run] trace records
     * a step, the core calls trace_begin before the step's first kernel and
     * trace_end after its last: from the one call to the other the device
     * times its kernels and copies on its streams (a GPU: timing events
     * recorded around each), and trace_end waits for them, hands each span
     * to `fn` (in each stream's order, times on CLOCK_MONOTONIC, the clock
     * of the core's trace) and stops timing; trace_begin called again
     * before trace_end (a step that failed) discards the spans timed so
     * far. Outside the two calls nothing is timed and nothing costs. `ctx` is handed to fn unchanged; a span
     * and its name live for the call to fn only. *dropped: the spans the
     * device did not keep (its buffer full). Main thread; errors set with
     * host->set_error (a failed timing read is not one: its span is left
     * out). A device without them (cpu, a plugin built before 1.16) shows
     * no device spans: its kernels run inside the host's spans. */
    plait_status (*trace_begin)(void);
    plait_status (*trace_end)(plait_device_span_fn fn, void *ctx, uint64_t *dropped);
} plait_device_ops;

/* True if device table `ops` (from a possibly older plugin) has streams and
 * events (ABI 1.4). */
#define PLAIT_DEVICE_HAS_EVENTS(ops)                                                                   \
    ((ops) != NULL &&                                                                                  \
     (ops)->struct_size >= offsetof(plait_device_ops, event_native) + sizeof((ops)->event_native) &&   \
     (ops)->event_create != NULL)

/* True if device table `ops` times its work for the step trace (ABI 1.16). */
#define PLAIT_DEVICE_HAS_TRACE(ops)                                                                                    \
    ((ops) != NULL && (ops)->struct_size >= offsetof(plait_device_ops, trace_end) + sizeof((ops)->trace_end) &&        \
     (ops)->trace_begin != NULL && (ops)->trace_end != NULL)

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_DEVICE_H */
