/*
 * The NCCL plugin's pure decisions: how plait's dtypes, operators and
 * statuses map onto NCCL's, which CUDA device a rank drives, and which
 * in-place form a collective's buffers have. No CUDA or NCCL calls (only
 * their enums), so the unit tests run them on machines without a GPU.
 * Every function is thread-safe (no state).
 */
#ifndef PLAIT_NCCL_MAP_H
#define PLAIT_NCCL_MAP_H

#include <stddef.h>

#include <nccl.h>

#include <plait/types.h>

/* NCCL's type for a plait dtype; 0 when NCCL has none (unknown enum value). */
int pnccl_dtype(plait_dtype dtype, ncclDataType_t *out);

/* NCCL's built-in operator for `op`; 0 for an unknown one. AVG maps to
 * ncclAvg, which divides the sum by the rank count (integers truncate
 * toward zero, as plait's AVG). */
int pnccl_redop(plait_redop op, ncclRedOp_t *out);

/* The plait status an NCCL result stands for: remote error -> peer lost,
 * system / CUDA errors -> system, invalid argument / usage -> invalid arg,
 * internal -> internal, in progress -> timeout (only ever asked after a
 * deadline passed). */
plait_status pnccl_status(ncclResult_t r);

/* A short explanation of what an NCCL result usually means in a job, for
 * messages ("a peer process exited or the network failed"). Static text. */
const char *pnccl_result_hint(ncclResult_t r);

/* The CUDA device a rank uses: `configured` when >= 0 (must be below
 * `count`), else local_rank modulo count. Returns the device, or -1 when
 * `configured` is out of range or count < 1. */
int pnccl_pick_device(int configured, int local_rank, int count);

/* How a collective's buffers relate (bytes of this rank's block `blk`,
 * group size n, rank r). */
typedef enum pnccl_overlap {
    PNCCL_SEPARATE = 0,  /* no overlap: NCCL out of place */
    PNCCL_NATIVE_IN_PLACE, /* the in-place form NCCL supports directly */
    PNCCL_STAGING,         /* in place in a form NCCL lacks: stage through a temporary */
    PNCCL_BAD_OVERLAP    /* partial overlap that no collective defines */
} pnccl_overlap;

/* Allreduce / reduce / broadcast: send and recv of `bytes` each. */
pnccl_overlap pnccl_overlap_same_size(const void *send, const void *recv, size_t bytes);
/* Reduce-scatter: send holds n blocks, recv one. NCCL's in-place form is
 * recv == send + r*blk; plait's (MPI's) is recv == send, which NCCL only
 * shares at rank 0 -> STAGE elsewhere. */
pnccl_overlap pnccl_overlap_reduce_scatter(const void *send, const void *recv, size_t blk, int n, int r);
/* Allgather: send holds one block, recv n. NCCL's in-place form is
 * send == recv + r*blk; any other overlap is staged. */
pnccl_overlap pnccl_overlap_allgather(const void *send, const void *recv, size_t blk, int n, int r);
/* Alltoall (grouped sends and receives): any overlap is staged. */
pnccl_overlap pnccl_overlap_alltoall(const void *send, const void *recv, size_t blk, int n);

#endif
