/*
 * Deterministic gradient accumulation over micro-batches ([run]
 * deterministic = true): the gradients of micro-batches 0..M-1 are summed as
 * the left-complete pairwise tree
 *     tree(lo, hi) = tree(lo, mid) + tree(mid, hi),  mid = lo + 2^floor(log2(hi-lo-1))
 * so a rank that holds a power-of-two block of the global micro-batches
 * computes a whole subtree of the global tree, and the cross-rank reduction
 * (PLAIT_ALGO_ORDERED) finishes the same tree: every (dp, accumulation) split
 * of the same global micro-batches yields bit-identical sums.
 *
 * Implemented as a binary counter: level k holds the sum of the last complete
 * block of 2^k micro-batches; merging micro-batch j combines the levels of
 * j's trailing one bits. Memory: up to floor(log2 M)+1 extra copies of the
 * gradient (allocated on first use), versus none for plain accumulation —
 * the documented cost of deterministic mode.
 *
 * Works on element ranges so a layer's gradients can be finished as soon as
 * its backward is done (and its DP bucket started). Not thread-safe.
 */
#ifndef PLAIT_CORE_GRAD_TREE_H
#define PLAIT_CORE_GRAD_TREE_H

#include <stddef.h>
#include <stdint.h>

#include <plait/types.h>

typedef struct plait_grad_tree plait_grad_tree;

/* `numel` elements per gradient copy, `micro_batches` (M >= 1) per step. */
plait_status plait_grad_tree_create(size_t numel, int32_t micro_batches, plait_grad_tree **out);
void plait_grad_tree_free(plait_grad_tree *t);

/* Micro-batch j's gradient for elements [off, off+n) is in fresh[off..]:
 * fold it into the tree. When j is the last micro-batch, the step's total for
 * those elements is written to target[off..] (fresh and target may be the
 * same buffer). Call for every range once per micro-batch, j in order. */
plait_status plait_grad_tree_add(plait_grad_tree *t, int32_t j, const float *fresh, float *target,
                                 size_t off, size_t n);

/* The same tree over M doubles (e.g. per-micro-batch losses), pure. */
double plait_tree_sum(const double *values, int64_t n);

/* Bytes held by the levels allocated so far. */
size_t plait_grad_tree_bytes(const plait_grad_tree *t);

#endif
