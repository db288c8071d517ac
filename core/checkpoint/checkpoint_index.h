/*
 * index.json of a sharded checkpoint: for every tensor by its global name,
 * its full shape and dtype and the slices that hold it, each in which of the
 * checkpoint's shard files (checkpoint.h describes the directory).
 *
 *   {"format": "plait-sharded-index", "format_version": 1, "step": N,
 *    "files": ["shard-00000.safetensors", ...],
 *    "tensors": {
 *      "<global name>": {"dtype": "F32", "shape": [d0, d1, ...],
 *                        "slices": [{"file": 0, "dim": 1, "parts": 2, "index": 0,
 *                                    "groups": 1, "padded_len": 768,
 *                                    "begin": 0, "end": 294912}, ...]}, ...}}
 *
 * A slice is what one rank held when it saved: part `index` of `parts` along
 * dimension `dim` (the TP slice, plait_shard in <plait/model.h>: with
 * `groups` > 1 the rank holds that part of each of `groups` equal groups,
 * and `padded_len` pads the dimension; dim -1: the whole tensor), and of
 * that slice its row-major local elements [begin, end) (the rank's ZeRO
 * range; 0 and the slice's size when it holds it all). Its file stores
 * those elements as a 1-D float32 tensor under the global name. A TP slice
 * with groups or padding, and a ZeRO range that cuts rows, are no box of
 * the tensor, so the index records the slice and the range rather than an
 * offset per dimension (as Megatron-Core's distributed checkpoints record a
 * "flattened range" of a sharded tensor). Format version 2 adds to a slice
 * cut twice (an expert tensor at tp × ep: its experts over ep on dimension
 * 0, each one's width over tp) "second_dim", "second_parts" and
 * "second_index": that part of the block the first split gives; an index
 * with no such slice is written as version 1, and both versions are read.
 *
 * Parsing is strict (safetensors_json.h) and checks what a reader relies on:
 * each slice's file is in "files", its geometry fits the shape, its range
 * lies in its slice, and the slices of a tensor hold as many real
 * (unpadded) elements as the tensor has; a reader that then finds an
 * element no slice holds (overlapping slices) refuses it, naming it.
 * Errors: PLAIT_ERR_PROTOCOL naming `what` and the problem.
 *
 * Thread-safety: an index is immutable after parsing; reads are
 * thread-safe. The caller owns what it builds and frees it.
 */
#ifndef PLAIT_CORE_CHECKPOINT_INDEX_H
#define PLAIT_CORE_CHECKPOINT_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <plait/model.h>

#include "checkpoint/safetensors.h"
#include "checkpoint/safetensors_json.h"

#define PLAIT_CKPT_INDEX_FILE "index.json"
#define PLAIT_CKPT_INDEX_FORMAT "plait-sharded-index"
#define PLAIT_CKPT_INDEX_VERSION 1
/* The version of an index with a slice cut twice (its "second_*" keys);
 * an index without one is written as version 1, and both are read. */
#define PLAIT_CKPT_INDEX_VERSION_TWICE 2
/* Shard file of world rank r: "shard-<r, 5+ digits>.safetensors". */
#define PLAIT_CKPT_SHARD_PREFIX "shard-"

typedef struct plait_ckpt_slice {
    int32_t file;      /* position in the index's files */
    plait_shard shard; /* the rank's TP slice (dim -1: the whole tensor) */
    /* a slice cut twice (version 2: an expert tensor at tp × ep): `shard`
     * is the split on dimension 0 (unpadded, one group) and this cuts the
     * block it gives again on another dimension (unpadded, one group);
     * dim -1 or parts 1: none */
    plait_shard second;
    uint64_t begin;    /* local elements [begin, end) of that slice */
    uint64_t end;
    const float *data; /* reader: its end - begin elements (mapped from its file), set once the file is open */
} plait_ckpt_slice;

typedef struct plait_ckpt_index_tensor {
    const char *name;
    int32_t ndim;
    int64_t shape[PLAIT_ST_MAX_DIMS];
    size_t numel;
    int32_t n_slices;
    plait_ckpt_slice *slices;
} plait_ckpt_index_tensor;

typedef struct plait_ckpt_index {
    int64_t step;
    int32_t n_files;
    const char **files;
    int32_t n_tensors;
    plait_ckpt_index_tensor *tensors;
    plait_json_doc *doc; /* parsed: owns the strings */
} plait_ckpt_index;

/* "shard-<rank>.safetensors" into buf. */
void plait_ckpt_shard_file_name(char *buf, size_t cap, int rank);

/* Append the index's JSON to `b` (the caller checks b->failed). */
void plait_ckpt_index_render(plait_jbuf *b, const plait_ckpt_index *ix);
/* Parse and check `len` bytes of index.json (`what` names it in errors).
 * The caller frees *out with plait_ckpt_index_free (NULL on failure). */
plait_status plait_ckpt_index_parse(const char *text, size_t len, const char *what, plait_ckpt_index **out);
void plait_ckpt_index_free(plait_ckpt_index *ix);
/* Tensor `name`, or NULL. */
const plait_ckpt_index_tensor *plait_ckpt_index_find(const plait_ckpt_index *ix, const char *name);

/* Local elements [offset, offset+count) of the slice `want` of tensor `t`
 * (want->dim -1: the whole tensor), padding 0, copied from the slices that
 * hold them (their `data` set). PLAIT_ERR_PROTOCOL naming the element when
 * none does; PLAIT_ERR_INVALID_ARG when `want` does not fit the shape. */
plait_status plait_ckpt_index_read(const plait_ckpt_index_tensor *t, const plait_shard *want, size_t offset,
                                   size_t count, float *dst, const char *what);

#endif
