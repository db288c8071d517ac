/*
 * Deterministic gradient accumulation over micro-batches for optimizer
 * plugins that own gradient storage (ZeRO-2/3 in [run] deterministic mode).
 *
 * The same summation as the core's (core/train/grad_tree.h, which plugins
 * cannot link): the gradients of micro-batches 0..M-1 are summed as the
 * left-complete pairwise tree
 *     tree(lo, hi) = tree(lo, mid) + tree(mid, hi),  mid = lo + 2^floor(log2(hi-lo-1))
 * so a rank that holds a power-of-two block of the global micro-batches
 * computes a whole subtree of the global tree, and an ordered reduction over
 * the DP group (PLAIT_ALGO_ORDERED) finishes the same tree. The result is
 * bit-identical to the core's accumulation, hence to plain DP and to one
 * process.
 *
 * A binary counter: level k holds the sum of the last complete block of 2^k
 * micro-batches; micro-batch j merges the levels of j's trailing one bits.
 * Memory: up to floor(log2 M) + 1 level arrays of `numel` floats, allocated
 * with host->alloc on first use (tag "<owner> deterministic accumulation").
 *
 * Works on element ranges [off, off+n) of a conceptual vector of `numel`
 * elements, so each unit of gradients is folded as soon as its backward is
 * done. Not thread-safe.
 */
#ifndef PLAIT_OPTIM_TREE_H
#define PLAIT_OPTIM_TREE_H

#include <plait/host.h>

#define OPTIM_TREE_MAX_LEVELS 40

typedef struct optim_tree {
    const plait_host *host;
    char tag[64];
    size_t numel;
    int32_t m;
    float *level[OPTIM_TREE_MAX_LEVELS];
} optim_tree;

/* `numel` elements per copy, `micro_batches` >= 1 per step; `tag` names the
 * allocations in the memory report. No allocation happens here. */
plait_status optim_tree_init(optim_tree *t, const plait_host *host, size_t numel, int32_t micro_batches,
                             const char *tag);
void optim_tree_free(optim_tree *t);

/* Micro-batch j's gradient of elements [off, off+n) is fresh[0..n): fold it
 * in. When j is the last micro-batch (M-1), the step's total is written to
 * target[0..n) (fresh and target may be the same buffer) and 1 is stored in
 * *done; otherwise *done is 0 and target is untouched. Call once per range
 * and micro-batch, j in increasing order. PLAIT_ERR_NO_MEMORY (message set)
 * if a level cannot be allocated. */
plait_status optim_tree_add(optim_tree *t, int32_t j, const float *fresh, float *target, size_t off, size_t n,
                            int *done);

/* Bytes held by the levels allocated so far. */
size_t optim_tree_bytes(const optim_tree *t);

/* The number of level arrays M micro-batches can need: floor(log2 M) + 1
 * for M > 1, 0 for M = 1 (the memory plan). */
int optim_tree_max_levels(int32_t micro_batches);

#endif
