/*
 * plait SDK — basic types shared by the core and every plugin.
 *
 * Part of ABI v1. Within a major version, enums only gain values at the end and
 * structs only grow at the end (every struct starts with `struct_size`).
 * Plugins must treat unknown enum values as "unsupported", never as a crash.
 */
#ifndef PLAIT_TYPES_H
#define PLAIT_TYPES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the one symbol a plugin exports; everything else stays hidden
 * (plugins are built with -fvisibility=hidden). */
#if defined(__GNUC__) || defined(__clang__)
#define PLAIT_EXPORT __attribute__((visibility("default")))
#define PLAIT_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define PLAIT_EXPORT
#define PLAIT_PRINTF(fmt_idx, arg_idx)
#endif

/* Result of every fallible call across the ABI. On anything but PLAIT_OK the
 * callee has stored a human-readable message with host->set_error(); the
 * caller reads it with host->last_error() (thread-local, owned by the core). */
typedef enum plait_status {
    PLAIT_OK = 0,
    PLAIT_ERR_UNSUPPORTED = 1,    /* not available here (no GPU, no RDMA device, op not provided) */
    PLAIT_ERR_INVALID_CONFIG = 2, /* a configuration value or combination is not allowed */
    PLAIT_ERR_INVALID_ARG = 3,    /* a caller broke a documented precondition */
    PLAIT_ERR_SYSTEM = 4,         /* an OS call failed (errno text in the message) */
    PLAIT_ERR_PEER_LOST = 5,      /* a remote rank closed its connection or died */
    PLAIT_ERR_TIMEOUT = 6,        /* a wait exceeded its deadline */
    PLAIT_ERR_NO_MEMORY = 7,
    PLAIT_ERR_PROTOCOL = 8,       /* malformed data from a peer or file */
    PLAIT_ERR_INTERNAL = 9,       /* a bug: an invariant did not hold */
    PLAIT_ERR_ABI = 10            /* version or struct mismatch between core and plugin */
} plait_status;

/* A bfloat16 value (ABI 1.8): the upper 16 bits of a float32, rounded to
 * nearest even from one (NaN kept NaN); what the kernel table's
 * bf16-activation entries store (plait/kernels.h, plait/kernels_moe.h). */
typedef uint16_t plait_bf16;

/* Element types of tensors and communication buffers. */
typedef enum plait_dtype {
    PLAIT_F32 = 0,
    PLAIT_F64 = 1,
    PLAIT_F16 = 2,  /* IEEE binary16 */
    PLAIT_BF16 = 3, /* bfloat16 */
    PLAIT_I32 = 4,
    PLAIT_I64 = 5,
    PLAIT_U8 = 6,
    PLAIT_DTYPE_COUNT_V1 = 7
} plait_dtype;

/* Reduction operators. AVG is SUM followed by division by the group size
 * (integer types truncate toward zero). */
typedef enum plait_redop {
    PLAIT_SUM = 0,
    PLAIT_PROD = 1,
    PLAIT_MIN = 2,
    PLAIT_MAX = 3,
    PLAIT_AVG = 4,
    PLAIT_REDOP_COUNT_V1 = 5
} plait_redop;

/* Where a buffer lives. Comm plugins report which kinds they can move
 * (plait_comm_ops.mem_kinds); the core stages through host memory otherwise. */
typedef enum plait_mem_kind {
    PLAIT_MEM_HOST = 0,        /* ordinary pageable host memory */
    PLAIT_MEM_HOST_PINNED = 1, /* page-locked host memory (cudaHostAlloc) */
    PLAIT_MEM_CUDA = 2         /* CUDA device memory; `device` says which GPU */
} plait_mem_kind;

#define PLAIT_MEM_KIND_BIT(k) (1u << (unsigned)(k))

/* A contiguous buffer with the facts a transport needs to move it.
 * Plain data: copying it does not copy or own the memory. */
typedef struct plait_buffer {
    void *ptr;
    size_t bytes;
    plait_mem_kind kind;
    int32_t device; /* CUDA ordinal for PLAIT_MEM_CUDA, else -1 */
} plait_buffer;

/* Log levels, most to least severe. */
typedef enum plait_log_level {
    PLAIT_LOG_ERROR = 0,
    PLAIT_LOG_WARN = 1,
    PLAIT_LOG_INFO = 2,
    PLAIT_LOG_DEBUG = 3,
    PLAIT_LOG_TRACE = 4
} plait_log_level;

/* Fill a caller's versioned struct `dst` (its first field, struct_size,
 * says how large the caller's version is) from `src` of `src_size` bytes:
 * copies what both versions have, keeps dst->struct_size. For the "fills up
 * to struct_size" outputs of the ABI (stats, memory reports). */
static inline void plait_fill_versioned(void *dst, const void *src, uint32_t src_size) {
    uint32_t dst_size;
    memcpy(&dst_size, dst, sizeof dst_size);
    uint32_t n = dst_size < src_size ? dst_size : src_size;
    if (n > sizeof(uint32_t))
        memcpy((char *)dst + sizeof(uint32_t), (const char *)src + sizeof(uint32_t), n - sizeof(uint32_t));
}

/* Opaque handles owned by the core. Plugins only pass them back. */
typedef struct plait_config plait_config;   /* the validated, effective configuration */
typedef struct plait_comm plait_comm;       /* a core communicator (world or a split of it) */
typedef struct plait_request plait_request; /* an in-flight core collective or p2p operation */
typedef struct plait_stream plait_stream;   /* an execution stream (CUDA stream); NULL = host, synchronous */
struct plait_host;                          /* the host API table, see host.h */

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_TYPES_H */
