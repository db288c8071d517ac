#include "optim_tree.h"

#include <stdio.h>
#include <string.h>

plait_status optim_tree_init(optim_tree *t, const plait_host *host, size_t numel, int32_t m, const char *tag) {
    memset(t, 0, sizeof *t);
    t->host = host;
    if (m < 1) return host->set_error(PLAIT_ERR_INVALID_ARG, "%s: %d micro-batches per step", tag, m);
    t->numel = numel;
    t->m = m;
    snprintf(t->tag, sizeof t->tag, "%s", tag);
    return PLAIT_OK;
}

void optim_tree_free(optim_tree *t) {
    if (!t->host) return;
    for (int k = 0; k < OPTIM_TREE_MAX_LEVELS; k++) t->host->free(t->level[k]);
    memset(t->level, 0, sizeof t->level);
}

static float *level(optim_tree *t, int k) {
    if (!t->level[k]) t->level[k] = t->host->alloc((t->numel ? t->numel : 1) * sizeof(float), PLAIT_MEM_HOST, 64, t->tag);
    return t->level[k];
}

/* dst[i] = left[i] + right[i]: earlier micro-batches are the left operand
 * (the core's order, so the bits agree). */
static void add_ordered(float *dst, const float *left, const float *right, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = left[i] + right[i];
}

plait_status optim_tree_add(optim_tree *t, int32_t j, const float *fresh, float *target, size_t off, size_t n,
                            int *done) {
    *done = 0;
    if (off > t->numel || n > t->numel - off)
        return t->host->set_error(PLAIT_ERR_INTERNAL, "%s: range [%zu, %zu) outside %zu elements", t->tag, off,
                                  off + n, t->numel);
    if (j < 0 || j >= t->m)
        return t->host->set_error(PLAIT_ERR_INTERNAL, "%s: micro-batch %d of %d", t->tag, j, t->m);
    if (t->m == 1) {
        if (target != fresh) memcpy(target, fresh, n * sizeof(float));
        *done = 1;
        return PLAIT_OK;
    }
    /* carry = fresh; for each trailing one bit k of j: carry = level[k] + carry */
    const float *carry = fresh;
    int k = 0;
    for (; (j >> k) & 1; k++) {
        float *lk = level(t, k);
        if (!lk) return PLAIT_ERR_NO_MEMORY; /* alloc set the message */
        add_ordered(lk + off, lk + off, carry, n);
        carry = lk + off;
    }
    if (j != t->m - 1) {
        float *lk = level(t, k);
        if (!lk) return PLAIT_ERR_NO_MEMORY;
        if (lk + off != carry) memcpy(lk + off, carry, n * sizeof(float));
        return PLAIT_OK;
    }
    /* Fold the pending blocks, latest first: total = level[hi] + (... + carry). */
    if (target != carry) memmove(target, carry, n * sizeof(float));
    for (int b = k + 1; b < OPTIM_TREE_MAX_LEVELS && ((uint32_t)t->m >> b); b++) {
        if (!(((uint32_t)t->m >> b) & 1u)) continue;
        float *lb = level(t, b);
        if (!lb) return PLAIT_ERR_NO_MEMORY;
        add_ordered(target, lb + off, target, n);
    }
    *done = 1;
    return PLAIT_OK;
}

size_t optim_tree_bytes(const optim_tree *t) {
    size_t b = 0;
    for (int k = 0; k < OPTIM_TREE_MAX_LEVELS; k++)
        if (t->level[k]) b += (t->numel ? t->numel : 1) * sizeof(float);
    return b;
}

int optim_tree_max_levels(int32_t m) {
    if (m <= 1) return 0;
    int l = 0;
    while ((1 << (l + 1)) <= m) l++;
    return l + 1;
}
