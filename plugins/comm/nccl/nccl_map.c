/* Pure mappings of the NCCL plugin; see nccl_map.h. */
#include "nccl_map.h"

#include <stdint.h>

int pnccl_dtype(plait_dtype dtype, ncclDataType_t *out) {
    switch (dtype) {
    case PLAIT_F32: *out = ncclFloat32; return 1;
    case PLAIT_F64: *out = ncclFloat64; return 1;
    case PLAIT_F16: *out = ncclFloat16; return 1;
    case PLAIT_BF16: *out = ncclBfloat16; return 1;
    case PLAIT_I32: *out = ncclInt32; return 1;
    case PLAIT_I64: *out = ncclInt64; return 1;
    case PLAIT_U8: *out = ncclUint8; return 1;
    default: return 0;
    }
}

int pnccl_redop(plait_redop op, ncclRedOp_t *out) {
    switch (op) {
    case PLAIT_SUM: *out = ncclSum; return 1;
    case PLAIT_PROD: *out = ncclProd; return 1;
    case PLAIT_MIN: *out = ncclMin; return 1;
    case PLAIT_MAX: *out = ncclMax; return 1;
    case PLAIT_AVG: *out = ncclAvg; return 1;
    default: return 0;
    }
}

plait_status pnccl_status(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return PLAIT_OK;
    case ncclRemoteError: return PLAIT_ERR_PEER_LOST;
    case ncclUnhandledCudaError:
    case ncclSystemError: return PLAIT_ERR_SYSTEM;
    case ncclInvalidArgument:
    case ncclInvalidUsage: return PLAIT_ERR_INVALID_ARG;
    case ncclInProgress: return PLAIT_ERR_TIMEOUT;
    case ncclInternalError:
    default: return PLAIT_ERR_INTERNAL;
    }
}

const char *pnccl_result_hint(ncclResult_t r) {
    switch (r) {
    case ncclRemoteError: return "a peer process exited, was aborted, or the network between the ranks failed";
    case ncclSystemError: return "a system call failed (often a socket to a peer that died, or a resource limit)";
    case ncclUnhandledCudaError: return "a CUDA call failed inside NCCL (the device may be in an error state)";
    case ncclInvalidArgument:
    case ncclInvalidUsage: return "NCCL was called incorrectly (mismatched arguments across ranks?)";
    case ncclInternalError: return "NCCL hit an internal error (a bug, or memory corruption)";
    case ncclInProgress: return "the operation was still in progress";
    default: return "";
    }
}

int pnccl_pick_device(int configured, int local_rank, int count) {
    if (count < 1) return -1;
    if (configured >= 0) return configured < count ? configured : -1;
    if (local_rank < 0) local_rank = 0;
    return local_rank % count;
}

static int ranges_overlap(uintptr_t a, size_t alen, uintptr_t b, size_t blen) {
    if (alen == 0 || blen == 0) return 0;
    return a < b + blen && b < a + alen;
}

pnccl_overlap pnccl_overlap_same_size(const void *send, const void *recv, size_t bytes) {
    if (send == recv) return PNCCL_NATIVE_IN_PLACE;
    return ranges_overlap((uintptr_t)send, bytes, (uintptr_t)recv, bytes) ? PNCCL_BAD_OVERLAP : PNCCL_SEPARATE;
}

pnccl_overlap pnccl_overlap_reduce_scatter(const void *send, const void *recv, size_t blk, int n, int r) {
    uintptr_t s = (uintptr_t)send, d = (uintptr_t)recv;
    if (!ranges_overlap(s, blk * (size_t)n, d, blk)) return PNCCL_SEPARATE;
    if (d == s + blk * (size_t)r) return PNCCL_NATIVE_IN_PLACE; /* includes recv == send at rank 0 */
    return d == s ? PNCCL_STAGING : PNCCL_BAD_OVERLAP;
}

pnccl_overlap pnccl_overlap_allgather(const void *send, const void *recv, size_t blk, int n, int r) {
    uintptr_t s = (uintptr_t)send, d = (uintptr_t)recv;
    if (!ranges_overlap(s, blk, d, blk * (size_t)n)) return PNCCL_SEPARATE;
    return s == d + blk * (size_t)r ? PNCCL_NATIVE_IN_PLACE : PNCCL_STAGING;
}

pnccl_overlap pnccl_overlap_alltoall(const void *send, const void *recv, size_t blk, int n) {
    size_t all = blk * (size_t)n;
    return ranges_overlap((uintptr_t)send, all, (uintptr_t)recv, all) ? PNCCL_STAGING : PNCCL_SEPARATE;
}
