#include "train/grad_tree.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/memory.h"

#define MAX_LEVELS 40

struct plait_grad_tree {
    size_t numel;
    int32_t m;
    float *level[MAX_LEVELS];
};

plait_status plait_grad_tree_create(size_t numel, int32_t m, plait_grad_tree **out) {
    if (m < 1) return plait_set_error(PLAIT_ERR_INVALID_ARG, "grad tree: %d micro-batches", m);
    plait_grad_tree *t = calloc(1, sizeof *t);
    if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    t->numel = numel;
    t->m = m;
    *out = t;
    return PLAIT_OK;
}

void plait_grad_tree_free(plait_grad_tree *t) {
    if (!t) return;
    for (int k = 0; k < MAX_LEVELS; k++) plait_free(t->level[k]);
    free(t);
}

static float *level(plait_grad_tree *t, int k) {
    if (!t->level[k]) t->level[k] = plait_alloc(t->numel * sizeof(float), PLAIT_MEM_HOST, 64, "deterministic accumulation");
    return t->level[k];
}

/* dst[i] = left[i] + right[i]: the earlier micro-batches are the left operand. */
static void add_ordered(float *dst, const float *left, const float *right, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = left[i] + right[i];
}

plait_status plait_grad_tree_add(plait_grad_tree *t, int32_t j, const float *fresh, float *target,
                                 size_t off, size_t n) {
    if (t->m == 1) {
        if (target != fresh) memcpy(target + off, fresh + off, n * sizeof(float));
        return PLAIT_OK;
    }
    /* carry = fresh; for each trailing one bit k of j: carry = level[k] + carry */
    const float *carry = fresh + off;
    int k = 0;
    for (; (j >> k) & 1; k++) {
        float *lk = level(t, k);
        if (!lk) return PLAIT_ERR_NO_MEMORY;
        add_ordered(lk + off, lk + off, carry, n); /* level k now holds the merged block */
        carry = lk + off;
    }
    int last = j == t->m - 1;
    if (!last) {
        float *lk = level(t, k);
        if (!lk) return PLAIT_ERR_NO_MEMORY;
        if (lk + off != carry) memcpy(lk + off, carry, n * sizeof(float));
        return PLAIT_OK;
    }
    /* Fold the pending blocks, smallest (latest) first: total = level[hi] + (... + carry). */
    float *out = target + off;
    if (out != carry) memmove(out, carry, n * sizeof(float));
    for (int b = k + 1; b < MAX_LEVELS && (t->m >> b); b++) {
        if (!(((uint32_t)t->m >> b) & 1u)) continue;
        float *lb = level(t, b);
        if (!lb) return PLAIT_ERR_NO_MEMORY;
        add_ordered(out, lb + off, out, n);
    }
    return PLAIT_OK;
}

double plait_tree_sum(const double *v, int64_t n) {
    if (n <= 0) return 0;
    if (n == 1) return v[0];
    int64_t half = 1;
    while (half * 2 < n) half *= 2;
    return plait_tree_sum(v, half) + plait_tree_sum(v + half, n - half);
}

size_t plait_grad_tree_bytes(const plait_grad_tree *t) {
    size_t b = 0;
    for (int k = 0; k < MAX_LEVELS; k++)
        if (t->level[k]) b += t->numel * sizeof(float);
    return b;
}
