/*
 * The parts of oneDNN 2.6's C interface that plait calls through dlsym
 * (kernels_onednn_matmul.c), written out so that plait builds without
 * oneDNN's headers: the enum values of its C types, and buffers at least as
 * large and as aligned as the structures oneDNN fills in (opaque to plait).
 * tests/cpu/test_onednn_bf16.c checks each against the headers where
 * libdnnl-dev is installed. oneDNN 3.x changed this interface (a memory
 * descriptor became a handle); plait loads libdnnl.so.2 only.
 */
#ifndef PLAIT_CORE_KERNELS_ONEDNN_ABI_H
#define PLAIT_CORE_KERNELS_ONEDNN_ABI_H

#include <stdalign.h>

enum {
    PLAIT_DNNL_OK = 0,
    PLAIT_DNNL_UNIMPLEMENTED = 3,
    PLAIT_DNNL_ENGINE_CPU = 1,
    PLAIT_DNNL_STREAM_IN_ORDER = 1,
    PLAIT_DNNL_BF16 = 2,
    PLAIT_DNNL_F32 = 3,
    PLAIT_DNNL_SCRATCHPAD_USER = 1,
    PLAIT_DNNL_QUERY_IMPL_INFO_STR = 8,
    PLAIT_DNNL_QUERY_SCRATCHPAD_MD = 136,
    PLAIT_DNNL_ARG_SRC = 1,
    PLAIT_DNNL_ARG_DST = 17,
    PLAIT_DNNL_ARG_WEIGHTS = 33,
    PLAIT_DNNL_ARG_SCRATCHPAD = 80,
    PLAIT_DNNL_MAX_NDIMS = 12,
};
/* dnnl_memory_desc_t (696 bytes in 2.6), dnnl_matmul_desc_t (2800) and
 * dnnl_exec_arg_t */
typedef struct {
    alignas(64) unsigned char bytes[2048];
} plait_dnnl_md;
typedef struct {
    alignas(64) unsigned char bytes[8192];
} plait_dnnl_matmul_desc;
typedef struct {
    int arg;
    void *memory;
} plait_dnnl_exec_arg;

#endif
