/*
 * The mapping between a global tensor and one rank's slice of it
 * (plait_shard, see <plait/model.h>): dimension `dim`, padded to
 * `padded_len`, is viewed as `groups` equal groups, each cut into `parts`
 * slices; the rank holds slice `index` of every group, concatenated. Global
 * positions >= the real length are padding (zeros locally, absent globally).
 *
 * Used to fill a rank's parameters and optimizer state from a checkpoint's
 * full tensors, and to assemble full tensors from slices when saving.
 * Pure functions, thread-safe.
 */
#ifndef PLAIT_CORE_CHECKPOINT_SHARD_H
#define PLAIT_CORE_CHECKPOINT_SHARD_H

#include <stddef.h>
#include <stdint.h>
#include <plait/model.h>

/* Elements of the slice (padding included). Sets *out; PLAIT_ERR_INVALID_ARG
 * if the shard does not fit the shape (dim out of range, padded_len below
 * the real length or not divisible by groups*parts, index >= parts). */
plait_status plait_shard_numel(int32_t ndim, const int64_t *shape, const plait_shard *shard,
                               size_t *out);

/* Copy local elements [offset, offset+count) of the slice out of the full
 * tensor `global` (row-major, `shape`) into dst; padding positions get 0. */
plait_status plait_shard_extract(int32_t ndim, const int64_t *shape, const plait_shard *shard,
                                 const float *global, size_t offset, size_t count, float *dst);

/* The inverse for a whole slice: write every non-padding element of `local`
 * to its place in `global`. */
plait_status plait_shard_insert(int32_t ndim, const int64_t *shape, const plait_shard *shard,
                                const float *local, float *global);

/* Where global element `at` (row-major) lies in the slice: 1 with *local its
 * local position and *run how many global elements from `at` on follow it
 * contiguously in the slice (>= 1); 0 when another rank's slice holds it.
 * The shard must fit the shape (plait_shard_numel checks). */
int plait_shard_locate(int32_t ndim, const int64_t *shape, const plait_shard *shard, size_t at, size_t *local,
                       size_t *run);

/* Visit local elements [offset, offset+count) of the slice in runs that are
 * contiguous both locally and globally: fn(ctx, local_at, global_at, n),
 * global_at < 0 for a run of padding. */
typedef void (*plait_shard_run_fn)(void *ctx, size_t local_at, long long global_at, size_t n);
plait_status plait_shard_walk(int32_t ndim, const int64_t *shape, const plait_shard *shard, size_t offset, size_t count,
                              plait_shard_run_fn fn, void *ctx);

/* A slice cut twice (an expert tensor at tp × ep, plait_plan.second_shards):
 * `local` is the rank's parameter (its shard the first split, its shape
 * the slice cut by both). Reads the block the first split gives whole,
 * through read(ctx, block, all) with `block` that parameter cut once, into
 * a buffer of its own, then copies elements [offset, offset + count) of
 * the second split's part of it into dst. Errors: read's, or
 * PLAIT_ERR_NO_MEMORY naming the parameter. */
typedef plait_status (*plait_block_read_fn)(void *ctx, const plait_param *block, float *all);
plait_status plait_shard_read_twice(const plait_param *local, const plait_shard *second, plait_block_read_fn read,
                                    void *ctx, size_t offset, size_t count, float *dst);

#endif
