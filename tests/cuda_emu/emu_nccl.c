/*
 * NCCL over the CUDA emulator's runtime, for one rank: what the nccl comm
 * plugin calls, declared by NVIDIA's own nccl.h, its operations queued on
 * the emulated streams like any kernel (emu_queue.h). Test infrastructure
 * only (never installed).
 *
 * With the emulated runtime in one shared library, the cuda_emu device
 * plugin and the real nccl plugin (whose libcudart and libnccl calls land
 * here when a test links this library: its definitions come first in the
 * global scope) share one CUDA runtime, as the cuda and nccl plugins share
 * libcudart on a GPU. So the event round trip between them runs here: the
 * device's event, made and recorded by the cuda plugin, waited for by the
 * nccl plugin's stream; the nccl plugin's completion mark, recorded on its
 * stream, waited for by the device's compute stream. The streams are late,
 * so an operation that did not wait reads its input before the kernels
 * that write it ran, and a kernel that did not wait reads the result
 * before the collective wrote it.
 *
 * One rank: each collective is a copy from its send buffer to its receive
 * buffer (what every NCCL collective is on one rank), read and written when
 * the stream reaches it. A communicator of more ranks, point-to-point
 * operations and buffers outside emulated device memory are refused with
 * ncclInvalidUsage and a reason for ncclGetLastError.
 */
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_runtime.h"

struct ncclComm {
    int rank;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_last[256]; /* under g_lock */

__attribute__((format(printf, 1, 2))) static ncclResult_t refuse(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&g_lock);
    vsnprintf(g_last, sizeof g_last, fmt, ap);
    fprintf(stderr, "cuda_emu nccl: %s\n", g_last);
    pthread_mutex_unlock(&g_lock);
    va_end(ap);
    return ncclInvalidUsage;
}

ncclResult_t ncclGetVersion(int *version) {
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cuda_emu");
    return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    (void)id, (void)config;
    *comm = NULL;
    if (nranks != 1 || rank != 0)
        return refuse("ncclCommInitRankConfig: %d ranks; the emulator's NCCL has one rank", nranks);
    *comm = calloc(1, sizeof **comm);
    return *comm ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    return ncclCommInitRankConfig(comm, nranks, id, rank, NULL);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async) {
    (void)comm;
    *async = ncclSuccess;
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    (void)comm;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) { return ncclCommDestroy(comm); }

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    (void)comm;
    *count = 1;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    (void)comm;
    *rank = 0;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "unhandled system error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "NCCL error (emulated)";
    }
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return g_last; /* written once per refusal; read after it */
}

/* nccl.h declares these without (void): prototypes for -Wmissing-prototypes */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclGroupStart(void) { return ncclSuccess; }
ncclResult_t ncclGroupEnd(void) { return ncclSuccess; }

/* ---- the collectives: one queued copy each ------------------------------------ */

static size_t type_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

typedef struct copy_op {
    void *dst;
    const void *src;
    size_t bytes;
} copy_op;

static void copy_run(void *ctx) {
    copy_op *c = ctx;
    if (c->dst != c->src) memmove(c->dst, c->src, c->bytes);
}

static ncclResult_t one_rank_copy(const char *op, const void *send, void *recv, size_t count, ncclDataType_t type,
                                  ncclComm_t comm, cudaStream_t stream) {
    size_t esz = type_size(type);
    if (!comm) return refuse("%s: no communicator", op);
    if (!esz) return refuse("%s: data type %d", op, (int)type);
    if (!count) return ncclSuccess;
    if (!pc_emu_is_device_memory(send) || !pc_emu_is_device_memory(recv))
        return refuse("%s: a buffer outside device memory (%p, %p): a GPU would fault", op, send, recv);
    copy_op *c = malloc(sizeof *c);
    if (!c) return ncclSystemError;
    *c = (copy_op){recv, send, count * esz};
    return pc_emu_enqueue((void *)stream, copy_run, free, c) == 0 ? ncclSuccess
                                                                  : refuse("%s: an unknown stream", op);
}

ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    (void)op;
    return one_rank_copy("ncclAllReduce", send, recv, count, type, comm, stream);
}

ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    (void)op;
    if (root != 0) return refuse("ncclReduce: root %d of one rank", root);
    return one_rank_copy("ncclReduce", send, recv, count, type, comm, stream);
}

ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    if (root != 0) return refuse("ncclBroadcast: root %d of one rank", root);
    return one_rank_copy("ncclBroadcast", send, recv, count, type, comm, stream);
}

ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t type, ncclComm_t comm,
                           cudaStream_t stream) {
    return one_rank_copy("ncclAllGather", send, recv, count, type, comm, stream);
}

ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    (void)op;
    return one_rank_copy("ncclReduceScatter", send, recv, count, type, comm, stream);
}

ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    (void)send, (void)count, (void)type, (void)comm, (void)stream;
    return refuse("ncclSend to %d: the emulator's NCCL has one rank and no point-to-point", peer);
}

ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    (void)recv, (void)count, (void)type, (void)comm, (void)stream;
    return refuse("ncclRecv from %d: the emulator's NCCL has one rank and no point-to-point", peer);
}
