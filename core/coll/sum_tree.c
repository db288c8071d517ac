#include "coll/sum_tree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/reduce.h"
#include "device/device.h"
#include "runtime/error.h"
#include "runtime/memory.h"

/* Leaves are int32_t: at most 31 set bits, plus the carry level. */
#define MAX_LEVELS 32

struct plait_sum_tree {
    size_t count, esz;
    plait_dtype dtype;
    plait_redop op;
    int32_t m;
    /* Streaming: level[k] holds the pending block of 2^k leaves (count
     * elements, allocated on first use unless preset by the caller). */
    void *level[MAX_LEVELS];
    int preset; /* level[] was lent by the caller: never allocated or freed here */
    /* A streaming tree created while a device whose memory is not host
     * memory is open works on tensors in that memory: levels are device
     * allocations, merges the device's kernels (float sums only). */
    int on_device;
    /* All at once: the block starting at leaf i lives in work[i]; pending[k]
     * points at level k's block (a leaf itself while it is a single leaf). */
    void *const *work;
    const void *pending[MAX_LEVELS];
    char tag[64];
};

static void *level(plait_sum_tree *t, int k) {
    if (!t->level[k] && !t->preset)
        t->level[k] = t->on_device ? plait_device_alloc((t->count ? t->count : 1) * t->esz, t->tag)
                                   : plait_alloc((t->count ? t->count : 1) * t->esz, PLAIT_MEM_HOST, 64, t->tag);
    return t->level[k];
}

/* dst = a + b (a the earlier block). On the device: axpy with 1, which is
 * y + 1·x = y + x exactly, and float addition is commutative, so the bits
 * are plait_reduce's. */
static void merge(plait_sum_tree *t, void *dst, const void *a, const void *b, size_t n) {
    if (!t->on_device) {
        plait_reduce(dst, a, b, n, t->dtype, t->op);
        return;
    }
    const plait_kernels *k = plait_device_kernels();
    if (dst == b) {
        k->axpy(dst, a, n, 1.0f);
        return;
    }
    if (dst != a) k->copy(dst, a, n);
    k->axpy(dst, b, n, 1.0f);
}

static void copy_block(plait_sum_tree *t, void *dst, const void *src, size_t n) {
    if (t->on_device)
        plait_device_kernels()->copy(dst, src, n);
    else
        memcpy(dst, src, n * t->esz);
}

/* Where the merge of level k's block (starting at leaf `start`) with the
 * block after it goes: in place into level k, or into the block's own work
 * buffer. NULL when out of memory (error set). */
static void *merge_slot(plait_sum_tree *t, int k, int32_t start, size_t off) {
    if (t->work) return t->work[start];
    char *l = level(t, k);
    return l ? l + off * t->esz : NULL;
}

static const void *pending(plait_sum_tree *t, int k, size_t off) {
    return t->work ? t->pending[k] : (const char *)t->level[k] + off * t->esz;
}

/* The binary counter, the one evaluation of the tree. Leaf j's block merges
 * with the pending blocks of j's trailing one bits (left operand: the
 * earlier block); unless j is the last leaf, the result becomes level k's
 * pending block. At the last leaf the pending blocks of M's set bits above k
 * are folded in, smallest (latest) first, the final sum going to `total`. */
static plait_status add_leaf(plait_sum_tree *t, int32_t j, const void *value, void *total, size_t off,
                             size_t n) {
    const void *carry = value;
    int k = 0;
    for (; (j >> k) & 1; k++) {
        void *dst = merge_slot(t, k, j + 1 - (int32_t)(2u << k), off);
        if (!dst) return PLAIT_ERR_NO_MEMORY;
        merge(t, dst, pending(t, k, off), carry, n);
        carry = dst;
    }
    if (j != t->m - 1) {
        if (t->work) {
            t->pending[k] = carry;
        } else {
            char *l = level(t, k);
            if (!l) return PLAIT_ERR_NO_MEMORY;
            if (l + off * t->esz != carry) copy_block(t, l + off * t->esz, carry, n);
        }
        return PLAIT_OK;
    }
    uint32_t m = (uint32_t)t->m;
    int top = k;
    for (int b = k + 1; b < MAX_LEVELS && (m >> b); b++)
        if ((m >> b) & 1u) top = b;
    for (int b = k + 1; b <= top; b++) {
        if (!((m >> b) & 1u)) continue;
        int32_t start = (int32_t)(m & ~((2u << b) - 1u));
        void *dst = b == top ? total : merge_slot(t, b, start, off);
        if (!dst) return PLAIT_ERR_NO_MEMORY;
        merge(t, dst, pending(t, b, off), carry, n);
        carry = dst;
    }
    if (carry != total) copy_block(t, total, carry, n);
    return PLAIT_OK;
}

static plait_status check_kind(plait_dtype dtype, plait_redop op, int32_t leaves) {
    if (leaves < 1) return plait_set_error(PLAIT_ERR_INVALID_ARG, "sum tree: %d leaves (at least 1)", leaves);
    if (!plait_dtype_size(dtype) || (unsigned)op >= PLAIT_REDOP_COUNT_V1)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "sum tree: unknown dtype %d or operator %d", (int)dtype,
                               (int)op);
    return PLAIT_OK;
}

plait_status plait_sum_tree_create(size_t count, plait_dtype dtype, plait_redop op, int32_t leaves,
                                   const char *tag, plait_sum_tree **out) {
    *out = NULL;
    plait_status st = check_kind(dtype, op, leaves);
    if (st != PLAIT_OK) return st;
    plait_sum_tree *t = calloc(1, sizeof *t);
    if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    t->count = count;
    t->esz = plait_dtype_size(dtype);
    t->dtype = dtype;
    t->op = op;
    t->m = leaves;
    snprintf(t->tag, sizeof t->tag, "%s", tag ? tag : "sum tree");
    t->on_device = plait_device_mem_kind() != PLAIT_MEM_HOST;
    if (t->on_device && (dtype != PLAIT_F32 || op != PLAIT_SUM)) {
        free(t);
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s: a tree over device memory sums float32 only",
                               tag ? tag : "sum tree");
    }
    *out = t;
    return PLAIT_OK;
}

plait_status plait_sum_tree_add(plait_sum_tree *t, int32_t j, const void *value, void *total, size_t off,
                                size_t n, int *done) {
    if (done) *done = 0;
    if (off > t->count || n > t->count - off)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: range [%zu, %zu) outside %zu elements", t->tag, off,
                               off + n, t->count);
    if (j < 0 || j >= t->m)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: leaf %d of %d", t->tag, j, t->m);
    plait_status st = add_leaf(t, j, value, total, off, n);
    if (st == PLAIT_OK && done) *done = j == t->m - 1;
    return st;
}

size_t plait_sum_tree_bytes(const plait_sum_tree *t) {
    size_t b = 0;
    for (int k = 0; k < MAX_LEVELS; k++)
        if (t->level[k]) b += (t->count ? t->count : 1) * t->esz;
    return b;
}

int32_t plait_sum_tree_max_levels(int32_t leaves) {
    if (leaves <= 1) return 0;
    int32_t l = 0;
    while (l < 30 && (1 << (l + 1)) <= leaves) l++;
    return l + 1;
}

int32_t plait_sum_tree_levels_used(int32_t leaves) {
    /* leaf j < leaves - 1 leaves its block on the level of j's trailing
     * ones (add_leaf), the highest at the largest j = 2^k - 1 <= leaves - 2 */
    return leaves <= 1 ? 0 : (leaves == 2 ? 1 : plait_sum_tree_max_levels(leaves - 1));
}

void plait_sum_tree_free(plait_sum_tree *t) {
    if (!t) return;
    for (int k = 0; k < MAX_LEVELS; k++) {
        if (t->on_device)
            plait_device_free(t->level[k]);
        else
            plait_free(t->level[k]);
    }
    free(t);
}

void plait_sum_tree_fold(void *dst, const void *const *leaves, void *const *work, int32_t n, size_t count,
                         plait_dtype dtype, plait_redop op) {
    if (n < 1 || check_kind(dtype, op, n) != PLAIT_OK) return;
    plait_sum_tree t = {.count = count, .esz = plait_dtype_size(dtype), .dtype = dtype, .op = op, .m = n,
                        .work = work};
    for (int32_t j = 0; j < n; j++) (void)add_leaf(&t, j, leaves[j], dst, 0, count); /* no allocation: cannot fail */
}

double plait_sum_tree_f64(const double *values, int32_t n) {
    if (n < 1) return 0;
    double lv[MAX_LEVELS], total = 0;
    plait_sum_tree t = {.count = 1, .esz = sizeof(double), .dtype = PLAIT_F64, .op = PLAIT_SUM, .m = n,
                        .preset = 1};
    for (int k = 0; k < MAX_LEVELS; k++) t.level[k] = &lv[k];
    for (int32_t j = 0; j < n; j++) (void)add_leaf(&t, j, &values[j], &total, 0, 1); /* lent levels: cannot fail */
    return total;
}

static const plait_sum_tree_api g_api = {
    .struct_size = sizeof(plait_sum_tree_api),
    .create = plait_sum_tree_create,
    .add = plait_sum_tree_add,
    .bytes = plait_sum_tree_bytes,
    .max_levels = plait_sum_tree_max_levels,
    .destroy = plait_sum_tree_free,
};

const plait_sum_tree_api *plait_sum_tree_api_table(void) { return &g_api; }
