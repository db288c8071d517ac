/*
 * plait SDK — the deterministic summation tree (ABI 1.2 addition).
 *
 * The one tree by which the core sums anything whose bits must not depend
 * on the layout: micro-batch gradients in deterministic mode ([run]
 * deterministic = true), the ordered collectives (PLAIT_ALGO_ORDERED), the
 * step's loss. Plugins that own gradients (ZeRO-2/3) reach the same code
 * through host->sum_tree, so their sums agree bit for bit with the core's.
 *
 * What it computes: with leaves 0..M-1 (micro-batches, or ranks in rank
 * order), element by element, the left-complete pairwise tree
 *     tree(lo, hi) = tree(lo, mid) op tree(mid, hi),
 *     mid = lo + 2^floor(log2(hi - lo - 1))      (the largest power of two below hi-lo)
 *     tree(i, i+1) = leaf i
 * where the earlier leaves are always the left operand. For M = 6:
 * ((L0+L1)+(L2+L3)) + (L4+L5). A rank holding an aligned power-of-two
 * block of the leaves computes a whole subtree, so splitting M micro-batches
 * over data-parallel ranks (blocks of 2^k) and finishing with an ordered
 * reduction over the ranks gives the same bits as one process; so does any
 * cutting of the vector into element ranges. f16/bf16 round every pairwise
 * step (see the collectives); PLAIT_AVG sums (the caller divides).
 *
 * Streaming: leaf j is added as soon as it exists (a layer's gradient of
 * micro-batch j right after its backward); the tree keeps one pending block
 * per set bit of j (a binary counter), so it holds at most max_levels(M)
 * copies of the vector, allocated with host->alloc on first use under the
 * creator's tag (the documented memory cost of deterministic mode).
 *
 * Device memory (ABI 1.3): a tree created while the rank's device keeps
 * tensors outside host memory (host->device_info->mem_kind not
 * PLAIT_MEM_HOST) works on that memory: value, total and its levels are
 * device memory, merged with the device's kernels in the same order, so the
 * bits are the host tree's. Such a tree sums PLAIT_F32 only (create fails
 * with PLAIT_ERR_UNSUPPORTED otherwise).
 *
 * Ownership and lifetime: the core allocates the tree in create and frees it
 * and its level arrays in destroy; the values and totals stay the caller's.
 * Thread-safety: one tree is used by one thread at a time; separate trees
 * are independent. Errors set host->last_error.
 */
#ifndef PLAIT_SUM_TREE_H
#define PLAIT_SUM_TREE_H

#include <plait/types.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct plait_sum_tree plait_sum_tree; /* opaque, owned by the core */

typedef struct plait_sum_tree_api {
    uint32_t struct_size; /* sizeof as compiled by the core: check before calling a later field */

    /* A tree over `leaves` (M >= 1) values of `count` elements of `dtype`,
     * combined with `op`. `tag` (copied; NULL = "sum tree") names the level
     * arrays in the memory report. No level is allocated here.
     * PLAIT_ERR_INVALID_ARG for M < 1 or an unknown dtype or operator;
     * PLAIT_ERR_NO_MEMORY. */
    plait_status (*create)(size_t count, plait_dtype dtype, plait_redop op, int32_t leaves,
                           const char *tag, plait_sum_tree **out);

    /* Leaf j's elements [offset, offset+n) are value[0..n): fold them in.
     * When j is the last leaf (M-1), the total of those elements is written
     * to total[0..n) and *done (if not NULL) is set to 1; otherwise *done is
     * 0 and total is untouched. value and total may be the same buffer (not
     * partially overlapping). Call once per range and leaf, j increasing;
     * ranges of one leaf are independent of each other. PLAIT_ERR_INVALID_ARG
     * for j or the range out of bounds, PLAIT_ERR_NO_MEMORY when a level
     * cannot be allocated (nothing of the tree is lost; the step fails). */
    plait_status (*add)(plait_sum_tree *t, int32_t j, const void *value, void *total, size_t offset,
                        size_t n, int *done);

    /* Bytes held by the level arrays allocated so far. */
    size_t (*bytes)(const plait_sum_tree *t);

    /* The most level arrays M leaves can need: floor(log2 M) + 1 for M > 1,
     * 0 for M = 1 (for memory plans). */
    int32_t (*max_levels)(int32_t leaves);

    /* Free the tree and its levels; NULL is ignored. */
    void (*destroy)(plait_sum_tree *t);
} plait_sum_tree_api;

#ifdef __cplusplus
}
#endif
#endif /* PLAIT_SUM_TREE_H */
