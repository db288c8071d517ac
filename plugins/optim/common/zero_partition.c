/* ZeRO partitioning: units, this rank's slices and the layer maps (zero.h). */
#include <stdlib.h>
#include <string.h>

#include "zero.h"

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* 1 if a local tied copy sharing storage points at local parameter i. */
static int has_local_copy(const plait_param_set *set, int32_t i) {
    for (int32_t j = 0; j < set->n_params; j++) {
        const plait_param *c = &set->params[j];
        if (j != i && plait_tied_local_original(set, c) == i) return 1;
    }
    return 0;
}

static plait_status nomem(zero *z) {
    return z->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory partitioning shards", z->name);
}

/* CSR map layer -> units, from a per-unit predicate listing. */
static plait_status build_layer_map(zero *z, int gather, int32_t **first_out, int32_t **list_out) {
    int32_t L = z->n_layer_slots;
    int32_t *first = calloc((size_t)L + 1, sizeof *first);
    /* at most two entries per unit (its own layer, and a copy's original) */
    int32_t *list = malloc(sizeof *list * (size_t)(2 * z->n_units + 1));
    if (!first || !list) {
        free(first);
        free(list);
        return nomem(z);
    }
    int32_t n = 0;
    for (int32_t l = 0; l < L; l++) {
        first[l] = n;
        for (int32_t u = 0; u < z->n_units; u++) {
            const zero_unit *un = &z->units[u];
            if (un->layer != l) continue;
            int32_t want = gather && un->copy ? un->original : u;
            int dup = 0;
            for (int32_t k = first[l]; k < n && !dup; k++) dup = list[k] == want;
            if (!dup) list[n++] = want;
        }
    }
    first[L] = n;
    *first_out = first;
    *list_out = list;
    return PLAIT_OK;
}

plait_status zero_partition(zero *z) {
    const plait_host *h = z->host;
    plait_param_set *set = z->params;
    int32_t np = set->n_params;
    z->n_layer_slots = set->n_layers_total;
    for (int32_t i = 0; i < np; i++)
        if (set->params[i].layer < 0 || set->params[i].layer >= z->n_layer_slots)
            return h->set_error(PLAIT_ERR_INVALID_ARG, "%s: parameter %s is in layer %d of %d", z->name,
                                set->params[i].name, set->params[i].layer, z->n_layer_slots);
    z->units = calloc((size_t)np + 1, sizeof *z->units);
    z->unit_of_param = calloc((size_t)np + 1, sizeof *z->unit_of_param);
    z->param_off = calloc((size_t)np + 1, sizeof *z->param_off);
    if (!z->units || !z->unit_of_param || !z->param_off) return nomem(z);

    /* Group consecutive parameters of one layer into units of at most the
     * bucket, or (the default bucket under ZeRO-1 and 2) ZERO_RANK_FLOOR
     * floats a rank of the group sharding them where that is more (zero.h,
     * "Partitioning"). */
    const size_t floor = z->unit_floor ? ZERO_RANK_FLOOR : 0;
    const size_t dense_cap = z->bucket_elems > (size_t)z->n * floor ? z->bucket_elems : (size_t)z->n * floor;
    const size_t expert_cap = z->bucket_elems > (size_t)z->en * floor ? z->bucket_elems : (size_t)z->en * floor;
    zero_unit *cur = NULL;
    int cur_alone = 0;
    for (int32_t i = 0; i < np; i++) {
        const plait_param *p = &set->params[i];
        int copy = plait_tied_local_original(set, p) >= 0;
        int whole = (p->flags & PLAIT_PARAM_TIED_REMOTE) != 0;
        int expert = zero_param_expert(p);
        const size_t cap = expert ? expert_cap : dense_cap;
        int alone = copy || whole || has_local_copy(set, i) || p->numel >= cap;
        /* a weight gathered in bf16 shares its unit with its like alone */
        int b16 = zero_gathers_bf16(z, i);
        size_t off = cur ? align_up(cur->numel, ZERO_ALIGN) : 0;
        int fits = cur && !alone && !cur_alone && cur->layer == p->layer && cur->expert == expert && cur->bf16 == b16 &&
                   off + p->numel <= cap;
        if (!fits) {
            cur = &z->units[z->n_units++];
            cur->layer = p->layer;
            cur->first = i;
            cur->original = -1;
            cur->copy = copy;
            cur->whole = whole;
            cur->expert = expert;
            cur->bf16 = b16;
            cur_alone = alone;
            off = 0;
        }
        cur->count++;
        z->param_off[i] = off;
        cur->numel = off + p->numel;
        z->unit_of_param[i] = (int32_t)(cur - z->units);
    }

    /* Sizes, slices, offsets. */
    size_t S = 0, CS = 0, T = 0;
    z->psi = 0;
    for (int32_t u = 0; u < z->n_units; u++) {
        zero_unit *un = &z->units[u];
        size_t N = (size_t)zero_n(z, un);
        un->padded = align_up(un->numel ? un->numel : 1, N);
        un->shard = un->padded / N;
        if (un->padded > z->max_unit) z->max_unit = un->padded;
        un->tree_off = T;
        T += un->numel;
        if (un->whole && z->owns_grads) {
            un->whole_off = z->whole_numel;
            z->whole_numel += un->padded;
        }
        if (un->copy) {
            const plait_param *c = &set->params[un->first];
            int32_t o = plait_tied_local_original(set, c);
            const plait_param *orig = &set->params[o];
            if (orig->numel != c->numel)
                return h->set_error(PLAIT_ERR_INVALID_ARG, "%s: tied parameters %s (%zu elements) and %s (%zu) differ "
                                    "in size", z->name, c->name, c->numel, orig->name, orig->numel);
            un->original = z->unit_of_param[o];
            un->shard_off = CS;
            CS += un->shard;
        } else {
            un->shard_off = S;
            S += un->shard;
            for (int32_t k = 0; k < un->count; k++) z->psi += set->params[un->first + k].numel;
        }
    }
    z->shard_numel = S;
    z->copy_shard_numel = CS;
    z->tree_numel = T;

    /* This rank's segments. */
    z->segs = calloc((size_t)np * 1 + (size_t)z->n_units + 1, sizeof *z->segs);
    if (!z->segs) return nomem(z);
    for (int32_t u = 0; u < z->n_units; u++) {
        zero_unit *un = &z->units[u];
        size_t lo = zero_lo(z, un), hi = lo + un->shard;
        un->seg_first = z->n_segs;
        for (int32_t k = 0; k < un->count; k++) {
            int32_t i = un->first + k;
            size_t a = z->param_off[i], b = a + set->params[i].numel;
            size_t s = a > lo ? a : lo, e = b < hi ? b : hi;
            if (s >= e) continue;
            z->segs[z->n_segs++] = (zero_seg){.param = i, .unit_off = s, .param_off = s - a, .len = e - s};
        }
        un->n_seg = z->n_segs - un->seg_first;
    }

    plait_status st = build_layer_map(z, 0, &z->grad_first, &z->grad_units);
    if (st == PLAIT_OK) st = build_layer_map(z, 1, &z->gather_first, &z->gather_units);
    return st;
}

void zero_partition_free(zero *z) {
    free(z->units);
    free(z->unit_of_param);
    free(z->param_off);
    free(z->segs);
    free(z->grad_first);
    free(z->grad_units);
    free(z->gather_first);
    free(z->gather_units);
    z->units = NULL;
    z->segs = NULL;
    z->unit_of_param = NULL;
    z->param_off = NULL;
    z->grad_first = z->grad_units = z->gather_first = z->gather_units = NULL;
    z->n_units = z->n_segs = 0;
}
