/*
 * The deterministic summation tree: the one implementation of the
 * left-complete pairwise tree that fixes the bits of every layout-independent
 * sum (sdk/include/plait/sum_tree.h states what it computes). The core uses
 * it for gradient accumulation over micro-batches (train), the ordered
 * collectives (coll/coll_ordered.c) and the step's loss; plugins reach the
 * streaming tree through host->sum_tree (core/host/host_table.c).
 *
 * It lives in coll because it combines elements with the collectives'
 * reduction kernels (coll/reduce.h); it calls nothing above coll.
 *
 * Two ways to feed it, one tree:
 *   - streaming (plait_sum_tree_create/add): leaves arrive one by one and
 *     may be overwritten after add returns, so pending blocks are copied into
 *     level arrays the tree owns (allocated with plait_alloc on first use);
 *   - all at once (plait_sum_tree_fold): every leaf stays readable until the
 *     fold returns and the caller lends one writable buffer per leaf, so
 *     nothing is copied or allocated.
 * Both run the same binary counter (add_leaf in sum_tree.c).
 *
 * Thread-safety: one tree per thread at a time; fold and f64 are pure.
 */
#ifndef PLAIT_CORE_COMM_SUM_TREE_H
#define PLAIT_CORE_COMM_SUM_TREE_H

#include <stddef.h>
#include <stdint.h>

#include <plait/sum_tree.h>
#include <plait/types.h>

/* The streaming tree; semantics, errors and ownership as the SDK's
 * plait_sum_tree_api entries of the same names. */
plait_status plait_sum_tree_create(size_t count, plait_dtype dtype, plait_redop op, int32_t leaves,
                                   const char *tag, plait_sum_tree **out);
plait_status plait_sum_tree_add(plait_sum_tree *t, int32_t j, const void *value, void *total,
                                size_t offset, size_t n, int *done);
size_t plait_sum_tree_bytes(const plait_sum_tree *t);
int32_t plait_sum_tree_max_levels(int32_t leaves);
/* The level arrays a streaming tree of `leaves` leaves has allocated once
 * every leaf is added: one for each level its binary counter leaves a
 * block pending on, floor(log2(leaves - 1)) + 1 from two leaves (none for
 * one), at most plait_sum_tree_max_levels(leaves). plait_sum_tree_bytes
 * is then that many arrays of the tree's count. Pure. */
int32_t plait_sum_tree_levels_used(int32_t leaves);
void plait_sum_tree_free(plait_sum_tree *t);

/* dst = the tree over leaves[0..n) (n >= 1), `count` elements each. work[i]
 * is a writable buffer of `count` elements for leaf i; it may be leaves[i]
 * itself when that is scratch; dst may be separate memory or any work
 * buffer (it is written once, last). Never fails. */
void plait_sum_tree_fold(void *dst, const void *const *leaves, void *const *work, int32_t n,
                         size_t count, plait_dtype dtype, plait_redop op);

/* The tree over n doubles (per-micro-batch losses); 0 for n < 1. Pure. */
double plait_sum_tree_f64(const double *values, int32_t n);

/* The SDK table of the streaming entries (for the host table). */
const plait_sum_tree_api *plait_sum_tree_api_table(void);

#endif
