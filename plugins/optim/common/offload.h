/*
 * The Adam family's offloaded optimizer state ([optim] offload = host or
 * nvme, plait/optim_util.h): the two moments of every element this rank
 * updates, held in host memory or in one file under offload_path instead of
 * tensor memory, and the AdamW update run where they are.
 *
 * The state is one index space of `numel` elements per moment (adam: the
 * parameters it updates, packed; ZeRO: the shard arrays). The step walks it
 * in chunks of the host buffer: with nvme, three slots, the next chunk's
 * read in flight while the current one steps and the previous one's write
 * drains (offload_io.h). Each element's update is the device's `adamw`
 * arithmetic in the same order (offload_adamw.c), so a run with offload is
 * bit-identical to one without.
 *
 * Parameters and gradients stay where the model computes them (plait keeps
 * its parameters in float32: they are the master weights, there is no
 * other copy). On a device whose memory is not host memory a chunk's
 * gradient and parameter slices are copied to the host, updated there and
 * the parameters copied back.
 *
 * Not thread-safe: one training thread drives it. Errors go through
 * host->set_error, naming the optimizer, the file and the step.
 */
#ifndef PLAIT_OPTIM_OFFLOAD_H
#define PLAIT_OPTIM_OFFLOAD_H

#include <plait/host.h>
#include <plait/optim_util.h>

typedef struct optim_offload optim_offload;

/* One run of elements the step updates: state positions [at, at + n). */
typedef struct optim_offload_seg {
    float *param;      /* tensor memory; NULL: the store's parameter slices (with_params) */
    const float *grad; /* tensor memory */
    size_t at, n;
    float weight_decay;
    int32_t layer; /* the layer whose forward reads `param` (optim_offload_defer); -1: none */
} optim_offload_seg;

/* Open the store for `numel` elements per moment (all zero) as `cfg` says,
 * and as many parameter elements when `with_params` (ZeRO-3's slices,
 * [optim] offload_params); *out is NULL when cfg->mode is NONE. `rank`
 * names this rank's file. The
 * checks before step 1 are here: the directory exists and is writable,
 * its free space holds the file (reserved at once where the file system
 * can), and a tmpfs (memory) is warned about. */
plait_status optim_offload_open(const plait_host *host, const char *who, const plait_optim_offload *cfg, int rank,
                                size_t numel, int with_params, optim_offload **out);
void optim_offload_close(optim_offload *o);

/* Fill array `which` (0: exp_avg, 1: exp_avg_sq, 2: the parameters) at [at, at + count) from
 * the value source's tensor `name` of parameter `index` from element
 * `offset`; zeros where the source lacks it. 1: read, 0: zeros, -1: error. */
int optim_offload_load(optim_offload *o, int which, size_t at, const plait_value_source *src, int32_t index,
                       const char *name, size_t offset, size_t count);
/* Copy array `which` at [at, at + count) to host memory `dst`. */
plait_status optim_offload_get(optim_offload *o, int which, size_t at, float *dst, size_t count);
/* The same into tensor memory `dst` (ZeRO-3's gather of a unit's slice);
 * not while a step runs. */
plait_status optim_offload_fetch(optim_offload *o, int which, size_t at, float *dst, size_t count);

/* Reading parameter slices ahead of their fetch (nvme with the
 * parameters; a no-op elsewhere), as ZeRO-Infinity prefetches the next
 * layers' parameters: prefetch_room allocates `count` floats of host memory
 * for the slices in flight at once (the largest layer's, one layer ahead),
 * once after open. optim_offload_prefetch starts the read of parameter
 * elements [at, at + count) through the offload I/O path (offload_io.h),
 * and an optim_offload_fetch of exactly that slice then waits for that read
 * only. A hint: a slice that does not fit is not read ahead, a full room
 * of slices nobody fetched is dropped, and a step or a load, which rewrite
 * the parameters, drop every slice first. A failed read is reported by the
 * fetch that consumes it, naming the step, the elements and the file.
 * PLAIT_OFFLOAD_READ_AHEAD = off leaves the room out (no reads ahead);
 * prefetch_room refuses a value other than on or off. */
plait_status optim_offload_prefetch_room(optim_offload *o, size_t count);
void optim_offload_prefetch(optim_offload *o, size_t at, size_t count);

/* One AdamW update of every segment (sorted by `at`, disjoint), the
 * arguments' weight_decay replaced by each segment's. `step` (1-based) is
 * named in errors. */
plait_status optim_offload_step(optim_offload *o, const optim_offload_seg *segs, size_t n_segs,
                                const plait_adamw_args *args, int64_t step);

/* With offload = host on a device with events (offload_copy.h), start
 * copying segments whose gradients are final once the compute stream's
 * work queued so far has run (a layer's, from after_backward on its last
 * micro-batch), before the step; the step then copies only the rest.
 * Only where nothing changes those gradients between now and the step (no
 * reduction, no tied gradient folded into them). A no-op elsewhere;
 * optim_offload_posts says whether posting does anything. */
plait_status optim_offload_post(optim_offload *o, const optim_offload_seg *segs, size_t n_segs);
int optim_offload_posts(const optim_offload *o);

/* Where the copies overlap (optim_offload_posts), let each step return
 * with its copies back still running beside the next forward, updating
 * the segments layer by layer (the forward's order): the caller promises
 * optim_offload_ready(layer) before each layer's forward reads its
 * parameters, and optim_offload_drain before anything else reads them (a
 * checkpoint's export). Without it (ZeRO, whose step reads the updated
 * shards at once) every step finishes its copies back before returning. */
void optim_offload_defer(optim_offload *o);
/* Block until the copies back of `layer`'s segments have run, and order
 * the compute stream after them; immediate when none is pending. */
plait_status optim_offload_ready(optim_offload *o, int32_t layer);
/* The same for every segment. */
plait_status optim_offload_drain(optim_offload *o);

/* Bytes of host memory and of disk the store holds, and the seconds the
 * steps so far waited for the disk (the metrics' share of the step). */
uint64_t optim_offload_host_bytes(const optim_offload *o);
uint64_t optim_offload_disk_bytes(const optim_offload *o);
double optim_offload_wait_seconds(const optim_offload *o);

/* The instruction sets the host's AdamW is built for (offload_adamw.c),
 * narrowest first; every one gives the same bits. */
typedef enum optim_host_isa { OPTIM_ISA_SCALAR, OPTIM_ISA_SSE2, OPTIM_ISA_AVX2, OPTIM_ISA_AVX512 } optim_host_isa;

/* The set `want` names (PLAIT_OFFLOAD_ISA: auto, the widest this CPU has,
 * when NULL or empty; avx512, avx2, sse2 or scalar) into *out: 0, or -1
 * with the reason (a name it does not know, a set this CPU lacks) in why. */
int optim_host_isa_pick(const char *want, optim_host_isa *out, char *why, size_t cap);
int optim_host_isa_supported(optim_host_isa isa);
const char *optim_host_isa_name(optim_host_isa isa);
int optim_host_isa_lanes(optim_host_isa isa);

/* The host's AdamW over n elements of host memory, the cpu device's
 * `adamw` value for value, with `isa`'s vectors (one the CPU has) on
 * `threads` threads started for the call and joined before it returns. */
void optim_host_adamw(float *param, const float *grad, float *m, float *v, size_t n, const plait_adamw_args *args,
                      int threads, optim_host_isa isa);

#endif
