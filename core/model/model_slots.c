/*
 * Activation memory: what each slot holds for this rank's layers, carved
 * from one device block per slot (allocated when the slot is first used);
 * the recompute buffers shared by the slots (recompute.c) and the backward
 * scratch shared by every layer and slot. cost/activations.c counts the
 * same bytes.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "model/model_bodies.h"
#include "runtime/error.h"

#define ALIGN_FLOATS 16 /* 64-byte alignment of every buffer inside a slot */

static size_t align_up(size_t n) { return (n + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

static size_t slot_carve(plait_model *m, model_slot *s, float *base);

int plait_model_layer_kind(int32_t l, int32_t n_layer, int sparse) {
    return l == 0 ? 0 : l > n_layer ? 1 : sparse ? 2 : 3;
}

static int layer_kind(const plait_model *m, int32_t l) {
    const int32_t n = m->desc->n_layer;
    return plait_model_layer_kind(l, n, l >= 1 && l <= n && desc_block_sparse(m->desc, l - 1));
}

int plait_model_layers_alike(const plait_model *m, int32_t a_first, int32_t a_last, int32_t b_first, int32_t b_last) {
    if (a_last - a_first != b_last - b_first) return 0;
    for (int32_t i = 0; i <= a_last - a_first; i++)
        if (layer_kind(m, a_first + i) != layer_kind(m, b_first + i)) return 0;
    return 1;
}

static size_t host_carve(plait_model *m, model_slot *s, char *base);

/* An allocated slot laid out again for first..last (alike to its range)
 * in its own memory: its parts carved afresh, nothing it held kept. A
 * sparse block's part (moe.c) follows at the slot's next sparse forward,
 * which finds it carved for another range (moe_first). */
static plait_status slot_move(plait_model *m, model_slot *s, int32_t first, int32_t last) {
    if (s->gbuf[0] || s->gbuf[1])
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: a slot holding buffers of the boundary pool (an output "
                               "to send, boundary gradients) cannot move before it gives them back");
    m->dres_of = NULL; /* it may point into this slot */
    if (m->staged_slot >= 0 && &m->slots[m->staged_slot] == s) m->staged_slot = -1;
    const size_t n = (size_t)m->desc->n_layer + 1;
    memset(s->bound, 0, n * sizeof *s->bound);
    memset(s->bound16, 0, n * sizeof *s->bound16);
    if (s->host_bound) memset(s->host_bound, 0, n * sizeof *s->host_bound);
    memset(s->blocks, 0, n * sizeof *s->blocks);
    if (s->wg) memset(s->wg, 0, n * sizeof *s->wg);
    if (s->weight_due) memset(s->weight_due, 0, (size_t)m->n_layers);
    s->has_tokens = s->has_targets = s->has_loss = s->has_logits = s->has_dlogits = 0;
    s->first = first;
    s->last = last;
    if (slot_carve(m, s, NULL) * sizeof(float) != s->mem_bytes)
        return plait_set_error(PLAIT_ERR_INTERNAL, "model: layers %d..%d do not fit the slot laid out before",
                               (int)first, (int)last);
    slot_carve(m, s, s->mem);
    if (host_carve(m, s, NULL) != s->host_bytes)
        return plait_set_error(PLAIT_ERR_INTERNAL, "model: layers %d..%d do not fit the slot's host memory", (int)first,
                               (int)last);
    host_carve(m, s, s->host_mem);
    return PLAIT_OK;
}

plait_status plait_model_slot_layers(plait_model *m, int32_t slot, int32_t first, int32_t last) {
    if (slot < 0 || slot >= m->max_slots || first < 0 || last >= m->n_layers || first > last)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: slot %d cannot hold layers %d..%d (%d slots, %d layers)",
                               (int)slot, (int)first, (int)last, (int)m->max_slots, (int)m->n_layers);
    model_slot *s = &m->slots[slot];
    if (s->ranged && s->first == first && s->last == last) return PLAIT_OK;
    if (s->allocated && s->ranged && plait_model_layers_alike(m, s->first, s->last, first, last))
        return slot_move(m, s, first, last);
    if (s->allocated)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: slot %d is already laid out for layers %d..%d; it cannot change to %d..%d",
                               (int)slot, s->ranged ? (int)s->first : 0,
                               s->ranged ? (int)s->last : (int)m->n_layers - 1, (int)first, (int)last);
    s->ranged = 1;
    s->first = first;
    s->last = last;
    return PLAIT_OK;
}

void plait_model_slot_release(plait_model *m, model_slot *s) {
    m->dres_of = NULL; /* it may point into this slot, whose memory a later one may reuse */
    if (m->staged_slot >= 0 && &m->slots[m->staged_slot] == s) m->staged_slot = -1;
    for (int p = 0; p < 2; p++) plait_model_boundary_give(m, s->gbuf[p]);
    if (s->mem) {
        plait_device_free(s->mem);
        m->act_bytes -= s->mem_bytes;
    }
    if (s->host_mem) {
        plait_device_free(s->host_mem);
        m->host_act_bytes -= s->host_bytes;
    }
    free(s->host_bound);
    free(s->bound);
    free(s->bound16);
    free(s->blocks);
    free(s->wg);
    free(s->weight_due);
    if (s->moe_mem) {
        plait_device_free(s->moe_mem);
        m->act_bytes -= s->moe_bytes;
    }
    free(s->moe);
    for (int32_t l = 0; s->moe_held && l < m->desc->n_layer; l++) {
        free(s->moe_held[l]);
        plait_device_free(s->moe_held_dev[l]);
    }
    free(s->moe_held);
    free(s->moe_held_dev);
    m->act_bytes -= s->moe_held_bytes;
    int ranged = s->ranged;
    int32_t first = s->first, last = s->last;
    memset(s, 0, sizeof *s);
    s->ranged = ranged; /* the range outlives a failed allocation */
    s->first = first;
    s->last = last;
}

/* ---- activation slots ---------------------------------------------------- */

int plait_model_slot_has(const plait_model *m, const model_slot *s, int64_t l) {
    if (l < 0 || l >= m->n_layers || !m->local_layer[l]) return 0;
    return !s->ranged || (l >= s->first && l <= s->last);
}

/* A block's stash for its weight half (block_grads; under bf16
 * activations block_grads_bf16, in bf16): in the slot's own buffers that
 * the input half leaves dead where there are such (recompute none: c_attn's
 * and c_fc's outputs, the attention probabilities when they hold two
 * residual-stream tensors), the rest laid out from `base` (NULL: just
 * measure). A sparse block (!dense) keeps no dense MLP product's
 * gradients: its experts' are moe.c's; under bf16 activations its norm's
 * output gradient is float32 as the half computes it (moe_bf16.c), in
 * dln2 in place of bf.dln2. Returns the floats taken from base. */
static size_t stash_carve(plait_model *m, block_acts *a, block_grads *g, float *base, int dense) {
    const int64_t BT = m->B * m->T, C = m->C, R = m->R; /* R: the residual stream's rows (tp_conjugates.c) */
    const int gpt = m->desc->is_gpt, none = m->desc->recompute == PLAIT_RECOMPUTE_NONE;
    const int att_room = gpt && none && !m->fused_attn && m->NHl * m->T >= 2 * C;
    size_t off = 0;
#define STASH(ptr, n)                                                  \
    do {                                                               \
        if (base) (ptr) = base + off;                                  \
        off += align_up((size_t)(n));                                  \
    } while (0)
#define STASH_BF16(ptr, n)                                             \
    do {                                                               \
        if (base) (ptr) = (plait_bf16 *)(void *)(base + off);          \
        off += align_up(((size_t)(n) + 1) / 2);                        \
    } while (0)
    if (m->desc->is_llama && m->bf16) { /* bf16, all in the stash (llama_bf16.c) */
        if (dense) {
            STASH_BF16(g->bf.dy, BT * C);
            STASH_BF16(g->bf.dln2, R * C);
            STASH_BF16(g->bf.dfc, BT * 2 * m->Fl);
        } else {
            STASH(g->dln2, R * C);
        }
        STASH_BF16(g->bf.dres2, BT * C);
        STASH_BF16(g->bf.dqkv, BT * m->Wq);
        STASH_BF16(g->bf.dln1, R * C);
        if (m->desc->qk_norm) STASH(g->dqk_norm, 2 * m->HS);
        return off;
    }
    if (m->desc->is_llama) { /* float32, all in the stash (llama_layers.c) */
        if (dense) STASH(g->dy, BT * C);
        STASH(g->dln2, R * C);
        if (dense) STASH(g->dfch, BT * m->Fl);
        if (dense) STASH(g->dgate, BT * m->Fl);
        STASH(g->dres2, BT * C);
        STASH(g->dqkv, BT * m->Wq);
        STASH(g->dln1, R * C);
        if (m->desc->qk_norm) STASH(g->dqk_norm, 2 * m->HS);
        return off;
    }
    if (m->bf16) { /* a GPT's (block_grads_bf16); c_fc's and c_attn's outputs as above */
        if (dense) {
            STASH_BF16(g->bf.dy, BT * C);
            STASH_BF16(g->bf.dln2, BT * C);
        } else {
            STASH(g->dln2, R * C);
        }
        STASH_BF16(g->bf.dres2, BT * C);
        STASH_BF16(g->bf.dln1, BT * C);
        if (none && dense) g->bf.dfc = a->bf.fch;
        else if (dense) STASH_BF16(g->bf.dfc, BT * m->Fl);
        if (none) g->bf.dqkv = a->bf.qkv;
        else STASH_BF16(g->bf.dqkv, BT * 3 * m->Cl);
        return off;
    }
    if (dense) STASH(g->dy, BT * C);
    STASH(g->dln2, R * C);
    if (none) g->dfch = a->fch;
    else if (dense) STASH(g->dfch, BT * m->Fl);
    if (gpt) {
        if (none) g->dqkv = a->qkv;
        else STASH(g->dqkv, BT * 3 * m->Cl);
        if (att_room) {
            g->dres2 = a->att;
            g->dln1 = a->att ? a->att + BT * C : NULL;
        } else {
            STASH(g->dres2, BT * C);
            STASH(g->dln1, R * C);
        }
    }
#undef STASH_BF16
#undef STASH
    return off;
}

/* Carves (or, with base == NULL, just measures) everything one slot holds
 * for this rank's layers. Returns the float count. */
static size_t slot_carve(plait_model *m, model_slot *s, float *base) {
    const int64_t BT = m->B * m->T, C = m->C, L = m->desc->n_layer, R = m->R;
    size_t off = 0;
#define TAKE(ptr, n)                                                   \
    do {                                                               \
        if (base) (ptr) = (void *)(base + off);                        \
        off += align_up((size_t)(n));                                  \
    } while (0)
    /* a bf16 buffer: n halves of floats, as aligned */
#define TAKE_BF16(ptr, n)                                              \
    do {                                                               \
        if (base) (ptr) = (plait_bf16 *)(void *)(base + off);          \
        off += align_up(((size_t)(n) + 1) / 2);                        \
    } while (0)
    TAKE(s->tokens, BT);
    TAKE(s->targets, BT);
    /* the residual stream: R rows (all B·T but under sequence
     * parallelism), as are the norms' statistics below. Its gradients and
     * the output the slot sends on to the next stage (dead once sent, as
     * Megatron-LM frees a stage's output after its send) are the pool's
     * (plait_model_slot_grad), held only while needed */
    for (int64_t l = 0; l <= L; l++) {
        const int out = plait_model_slot_has(m, s, l), in = plait_model_slot_has(m, s, l + 1);
        if ((out && !in) || (in && m->desc->recompute_offload)) {
            continue; /* the pool's, or in host memory (host_carve) */
        } else if (in && m->residual_bf16) {
            /* the slot's own, rounded to bf16 when written, or received
             * (bf16 values already: plait_model_boundary_store) */
            TAKE_BF16(s->bound16[l], R * C);
        } else if (out || in) {
            TAKE(s->bound[l], R * C);
        }
    }
    for (int64_t l = 1; l <= L; l++) {
        if (!plait_model_slot_has(m, s, l)) continue;
        block_acts *a = &s->blocks[l - 1];
        /* the parts [model] recompute drops point at the shared buffers;
         * those the products read and write are bf16 under bf16 activations */
#define KEEP(field, n)                                                     \
    do {                                                                   \
        if (plait_recompute_keeps(m, offsetof(block_acts, field))) TAKE(a->field, n); \
    } while (0)
#define KEEP_PRODUCT(field, n)                                             \
    do {                                                                   \
        if (plait_recompute_keeps(m, offsetof(block_acts, field))) {       \
            if (m->bf16) TAKE_BF16(a->bf.field, n);                        \
            else TAKE(a->field, n);                                        \
        }                                                                  \
    } while (0)
        /* a sparse block keeps no dense MLP product's parts (its experts'
         * are moe.c's), nor under bf16 activations its norm's bf16 output
         * (moe_bf16.c rebuilds it in float32) */
        const int dense = !desc_block_sparse(m->desc, (int32_t)l - 1);
        if (m->desc->is_llama) { /* float32 (llama_layers.c), the norms' outputs kept gathered; or bf16
                                  * (llama_bf16.c), on this rank's rows, gate|up side by side */
            const int64_t ln_rows = m->bf16 ? R : BT;
            KEEP_PRODUCT(ln1, ln_rows * C);
            KEEP(ln1_rstd, R);
            KEEP_PRODUCT(qkv, BT * m->Wq);
            if (m->desc->qk_norm) { /* q's and k's heads before their norms, and their deviations (qk_norm.c) */
                KEEP_PRODUCT(qkn, plait_qk_norm_heads(m));
                KEEP(qk_rstd, plait_qk_norm_rows(m));
            }
            KEEP(lse, m->B * m->NHl * m->T);
            KEEP_PRODUCT(atty, BT * m->Cl);
            KEEP(res2, R * C);
            if (dense || !m->bf16) KEEP_PRODUCT(ln2, ln_rows * C);
            KEEP(ln2_rstd, R);
            if (dense && !m->bf16) {
                KEEP(fch, BT * m->Fl);
                KEEP(fcg, BT * m->Fl);
            } else if (dense && plait_recompute_keeps(m, offsetof(block_acts, bf.gu))) {
                TAKE_BF16(a->bf.gu, BT * 2 * m->Fl);
            }
            if (dense) KEEP_PRODUCT(swi, BT * m->Fl);
            if (base) plait_recompute_share(m, a);
            if (m->split) off += stash_carve(m, a, &s->wg[l - 1], base ? base + off : NULL, dense);
            continue;
        }
        if (m->desc->is_gpt) {
            KEEP_PRODUCT(ln1, R * C); /* this rank's rows: gathered where read */
            KEEP(ln1_mean, R);
            KEEP(ln1_rstd, R);
            KEEP_PRODUCT(qkv, BT * 3 * m->Cl);
            if (m->fused_attn) KEEP(lse, m->B * m->NHl * m->T);
            else KEEP(att, m->B * m->NHl * m->T * m->T);
            KEEP_PRODUCT(atty, BT * m->Cl);
            KEEP(res2, R * C);
        }
        if (dense || !m->bf16) KEEP_PRODUCT(ln2, R * C);
        KEEP(ln2_mean, R);
        KEEP(ln2_rstd, R);
        if (dense) {
            KEEP_PRODUCT(fch, BT * m->Fl);
            KEEP_PRODUCT(fcg, BT * m->Fl);
        }
#undef KEEP_PRODUCT
#undef KEEP
        if (base) plait_recompute_share(m, a);
        if (m->split) off += stash_carve(m, a, &s->wg[l - 1], base ? base + off : NULL, dense);
    }
    if (plait_model_slot_has(m, s, L + 1)) {
        if (m->bf16_head) { /* the head's gradients its forward leaves (gpt_bf16.c) */
            TAKE_BF16(s->dlnf_bf, BT * C);
            TAKE(s->head_dw, m->Vl * C);
        } else {
            TAKE(s->lnf, BT * C);
            TAKE(s->logits, BT * m->Vl);
        }
        TAKE(s->lnf_mean, R);
        TAKE(s->lnf_rstd, R);
        TAKE(s->lse, BT);
        TAKE(s->sumexp, BT);
        TAKE(s->losses, BT);
        if (m->split && !m->bf16_head) TAKE(s->head_dln, R * C); /* the bf16 head keeps what its forward left */
    }
#undef TAKE_BF16
#undef TAKE
    return off;
}

/* ---- the boundary pool ----------------------------------------------------- */

/* Pool buffers are all one size, a boundary's R·C floats aligned, so any
 * idle one serves any slot and parity; the pool grows to the most held at
 * once, which the schedule fixes (the executor gives buffers back at fixed
 * points: train/step_pipeline.c), and cost/stages.c counts the same. */
static float *pool_take(plait_model *m) {
    if (m->pool_idle > 0) return m->pool_free[--m->pool_idle];
    if (m->pool_n == m->pool_cap) {
        int32_t cap = m->pool_cap ? 2 * m->pool_cap : 8;
        float **all = realloc(m->pool, (size_t)cap * sizeof *all);
        if (all) m->pool = all;
        float **idle = all ? realloc(m->pool_free, (size_t)cap * sizeof *idle) : NULL;
        if (idle) m->pool_free = idle;
        if (!all || !idle) {
            plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
            return NULL;
        }
        m->pool_cap = cap;
    }
    const size_t bytes = align_up((size_t)(m->R * m->C)) * sizeof(float);
    float *b = plait_device_alloc(bytes, "activations");
    if (!b) {
        plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: a boundary buffer (%d held)", (int)m->pool_n);
        return NULL;
    }
    m->pool[m->pool_n++] = b;
    m->act_bytes += bytes;
    return b;
}

void plait_model_boundary_give(plait_model *m, float *buf) {
    if (!buf) return;
    if (m->dres_of == buf) m->dres_of = NULL; /* its next holder writes it */
    m->pool_free[m->pool_idle++] = buf;
}

float *plait_model_slot_grad(plait_model *m, model_slot *s, int parity) {
    if (!s->gbuf[parity]) s->gbuf[parity] = pool_take(m);
    return s->gbuf[parity];
}

void plait_model_pool_free(plait_model *m) {
    for (int32_t i = 0; i < m->pool_n; i++) plait_device_free(m->pool[i]);
    m->act_bytes -= (uint64_t)m->pool_n * align_up((size_t)(m->R * m->C)) * sizeof(float);
    free(m->pool);
    free(m->pool_free);
    m->pool = m->pool_free = NULL;
    m->pool_n = m->pool_idle = m->pool_cap = 0;
}

/* The slot's pool buffer of `layer`'s parity, no longer the slot's. */
static float *slot_detach(model_slot *s, int32_t layer) {
    float *b = s->gbuf[layer & 1];
    s->gbuf[layer & 1] = NULL;
    if (s->bound[layer] == b) s->bound[layer] = NULL; /* the output it sent */
    return b;
}

float *plait_model_boundary_detach(plait_model *m, int32_t slot, int32_t layer) {
    if (slot < 0 || slot >= m->max_slots || layer < 0 || layer > m->desc->n_layer) return NULL;
    model_slot *s = &m->slots[slot];
    if (!s->allocated) return NULL;
    float *b = slot_detach(s, layer);
    if (m->dres_of == b) m->dres_of = NULL;
    return b;
}

void plait_model_boundary_release(plait_model *m, int32_t slot, int32_t keep) {
    if (slot < 0 || slot >= m->max_slots || !m->slots[slot].allocated) return;
    model_slot *s = &m->slots[slot];
    for (int p = 0; p < 2; p++) {
        if (keep >= 0 && (keep & 1) == p) continue;
        float *b = s->gbuf[p];
        s->gbuf[p] = NULL;
        if (b && s->ranged && s->last <= m->desc->n_layer && s->bound[s->last] == b) s->bound[s->last] = NULL;
        plait_model_boundary_give(m, b);
    }
}

/* [model] recompute_offload = host: the boundaries slot_carve leaves out
 * (those the slot reads, written or received), in one pinned host
 * allocation: bf16 under a bf16 residual stream, else float32. Carves
 * (or, with base == NULL, just measures); returns the bytes. */
static size_t host_carve(plait_model *m, model_slot *s, char *base) {
    const size_t each = align_up((size_t)(m->R * m->C)) * (m->residual_bf16 ? sizeof(plait_bf16) : sizeof(float));
    size_t off = 0;
    for (int64_t l = 0; m->desc->recompute_offload && l <= m->desc->n_layer; l++) {
        if (!plait_model_slot_has(m, s, l + 1)) continue;
        if (base) s->host_bound[l] = base + off;
        off += each;
    }
    return off;
}

static plait_status host_get(plait_model *m, model_slot *s) {
    const size_t bytes = host_carve(m, s, NULL);
    if (bytes == 0) return PLAIT_OK;
    if (!(s->host_bound = calloc((size_t)m->desc->n_layer + 1, sizeof *s->host_bound)) ||
        !(s->host_mem = plait_device_alloc_pinned(bytes, 64, "offloaded activations")))
        return plait_wrap_error(PLAIT_ERR_NO_MEMORY,
                                "model: %.1f MiB of host memory for the boundaries [model] recompute_offload keeps",
                                (double)bytes / 1048576.0);
    s->host_bytes = bytes;
    m->host_act_bytes += bytes;
    host_carve(m, s, s->host_mem);
    return PLAIT_OK;
}

/* The running layer's widened (or fetched) input and float32 output under
 * a bf16 residual stream or [model] recompute_offload (model.c,
 * residual_open), allocated with the first slot. */
static plait_status residual_get(plait_model *m) {
    if (m->res_x || (!m->residual_bf16 && !m->desc->recompute_offload)) return PLAIT_OK;
    const size_t n = align_up((size_t)(m->R * m->C));
    if (!(m->res_x = plait_device_alloc(2 * n * sizeof(float), "activations")))
        return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: the residual stream's float32 buffers");
    m->res_y = m->res_x + n;
    m->res_bytes = 2 * n * sizeof(float);
    m->act_bytes += m->res_bytes;
    return PLAIT_OK;
}

/* The shared recompute buffers (recompute.c), allocated with the first slot. */
static plait_status recompute_get(plait_model *m) {
    size_t n = plait_recompute_floats(m);
    if (m->rc_mem || n == 0) return PLAIT_OK;
    m->rc_mem = plait_device_alloc(n * sizeof(float), "activations");
    if (!m->rc_mem) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: recompute buffers");
    m->rc_bytes = n * sizeof(float);
    m->act_bytes += m->rc_bytes;
    plait_recompute_carve(m, m->rc_mem);
    return PLAIT_OK;
}

plait_status plait_model_slot_get(plait_model *m, int32_t slot, model_slot **out) {
    if (slot < 0 || slot >= m->max_slots)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "model: activation slot %d out of range (the model allows %d)",
                               (int)slot, (int)m->max_slots);
    model_slot *s = &m->slots[slot];
    if (!s->allocated) {
        plait_status st = recompute_get(m);
        if (st == PLAIT_OK && m->fused_attn) st = plait_model_att_scratch(m);
        if (st == PLAIT_OK && m->sp) st = plait_model_sp_scratch(m);
        if (st == PLAIT_OK && m->desc->qk_norm) st = plait_model_qk_norm_scratch(m);
        if (st == PLAIT_OK) st = residual_get(m);
        if (st != PLAIT_OK) return st;
        s->bound = calloc((size_t)m->desc->n_layer + 1, sizeof *s->bound);
        s->bound16 = calloc((size_t)m->desc->n_layer + 1, sizeof *s->bound16);
        s->blocks = calloc((size_t)m->desc->n_layer + 1, sizeof *s->blocks);
        if (m->split) {
            s->wg = calloc((size_t)m->desc->n_layer + 1, sizeof *s->wg);
            s->weight_due = calloc((size_t)m->n_layers, 1);
        }
        if (!s->bound || !s->bound16 || !s->blocks || (m->split && (!s->wg || !s->weight_due))) {
            plait_model_slot_release(m, s);
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory");
        }
        size_t n = slot_carve(m, s, NULL);
        s->mem_bytes = n * sizeof(float);
        s->mem = plait_device_alloc(s->mem_bytes, "activations");
        if (!s->mem) {
            s->mem_bytes = 0;
            plait_model_slot_release(m, s);
            return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: activation slot %d", (int)slot);
        }
        m->act_bytes += s->mem_bytes;
        slot_carve(m, s, s->mem);
        if ((st = host_get(m, s)) != PLAIT_OK) {
            plait_model_slot_release(m, s);
            return st;
        }
        s->allocated = 1;
    }
    *out = s;
    return PLAIT_OK;
}

plait_status plait_model_sp_scratch(plait_model *m) {
    if (m->sp_mem) return PLAIT_OK;
    const size_t full = align_up((size_t)(m->B * m->T * m->C)), local = align_up((size_t)(m->R * m->C));
    /* the gathered norm output: float32, or bf16 (half the floats); the
     * llama arch's float32 slots keep theirs gathered */
    const size_t ln = m->bf16 ? align_up((size_t)(m->B * m->T * m->C + 1) / 2) : m->desc->is_llama ? 0 : full;
    const size_t n = full + local + align_up((size_t)(2 * m->C)) + ln;
    m->sp_mem = plait_device_alloc(n * sizeof(float), "activations");
    if (!m->sp_mem) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: sequence-parallel buffers");
    m->sp_bytes = n * sizeof(float);
    m->act_bytes += m->sp_bytes;
    m->sp_full = m->sp_mem;
    m->sp_local = m->sp_mem + full;
    m->sp_wg = m->sp_local + local;
    m->sp_ln = m->sp_wg + align_up((size_t)(2 * m->C));
    m->sp_ln_bf = (plait_bf16 *)(void *)m->sp_ln;
    return PLAIT_OK;
}

plait_status plait_model_qk_norm_scratch(plait_model *m) {
    if (m->qkn_scratch) return PLAIT_OK;
    /* two float32 [BT·NHl,HS], under bf16 a bf16 one, the weights' gradients [2,HS] (qk_norm.c) */
    const size_t K = (size_t)plait_qk_norm_k_at(m->B * m->T * m->NHl * m->HS);
    const size_t n = 2 * K + (m->bf16 ? K / 2 : 0) + align_up((size_t)(2 * m->HS));
    m->qkn_scratch = plait_device_alloc(n * sizeof(float), "activations");
    if (!m->qkn_scratch) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: the q and k norms' buffers");
    m->qkn_scratch_bytes = n * sizeof(float);
    m->act_bytes += m->qkn_scratch_bytes;
    return PLAIT_OK;
}

plait_status plait_model_att_scratch(plait_model *m) {
    if (m->att_scratch) return PLAIT_OK;
    /* also the weight half's Cl floats of saved key-bias gradient (gpt_layers.c) */
    size_t n = m->k->attention_fused_scratch(m->B, m->T, m->NHl, m->HS);
    if (n < (size_t)m->Cl) n = (size_t)m->Cl;
    m->att_scratch = plait_device_alloc(align_up(n) * sizeof(float), "activations");
    if (!m->att_scratch) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: attention scratch");
    m->att_scratch_bytes = align_up(n) * sizeof(float);
    m->act_bytes += m->att_scratch_bytes;
    return PLAIT_OK;
}

/* How many rows of logits a chunk of the bf16 head takes (gpt_bf16.c says
 * why the head runs in chunks): pure arithmetic on the scratch's room, so
 * the slots' sizes, the head and the cost model agree. */
int64_t plait_model_head_rows(int64_t BT, int64_t Vl, size_t room, size_t *extra) {
    const int64_t least = BT < PLAIT_HEAD_MIN_ROWS ? BT : PLAIT_HEAD_MIN_ROWS;
    int64_t fit = (int64_t)(room * 2 / (size_t)Vl) / 8 * 8;
    if (fit > BT) fit = BT;
    if (fit < least) fit = least;
    const size_t need = ((size_t)(fit * Vl) + 1) / 2;
    if (extra) *extra = need > room ? need - room : 0;
    if (fit == BT) return BT;
    /* as even as multiples of 8 allow: never more than fit, which is one */
    const int64_t chunks = (BT + fit - 1) / fit;
    return ((BT + chunks - 1) / chunks + 7) / 8 * 8;
}

size_t plait_model_head_room(const plait_model *m) {
    const int64_t BT = m->B * m->T, llama = m->desc->is_llama;
    /* sb.dfc, datty, dqkv and dres (plait_model_scratch_get), one after the other */
    const int64_t dfc = llama ? 2 * m->Fl : m->Fl, dqkv = llama ? m->Wq : 3 * m->Cl;
    return align_up((size_t)(BT * dfc + 1) / 2) + align_up((size_t)(BT * m->Cl + 1) / 2) +
           align_up((size_t)(BT * dqkv + 1) / 2) + align_up((size_t)(BT * m->C + 1) / 2);
}

/* Backward scratch shared by all layers and slots: float32, or under bf16
 * activations the products' gradients in bf16 (sb), with the residual
 * stream's gradient converted once a product reads it; the bf16 head's
 * forward borrows it (head_lnf over sb.dln, a chunk of logits over the
 * rest, grown where the least chunk needs more: plait_model_head_rows),
 * and under tensor parallelism the head's products (tp_head_bf16.c: a
 * chunk of the logits' gradient likewise, head_lnf after it). */
plait_status plait_model_scratch_get(plait_model *m) {
    if (m->scratch) return PLAIT_OK;
    const int64_t BT = m->B * m->T;
    const int f32 = !m->bf16, tp_bf16 = m->bf16 && !m->bf16_head, llama = m->desc->is_llama;
    /* the llama arch's bf16 blocks: gate|up's output gradient, q|k|v's
     * (llama_bf16.c), SwiGLU's and a packed projection's */
    const int64_t dfc = llama ? 2 * m->Fl : m->Fl, dqkv = llama ? m->Wq : 3 * m->Cl;
    const int64_t pack = m->Fl > m->Cl ? m->Fl : m->Cl;
    /* under tensor parallelism s_dln holds float32 gradients for the
     * group's collectives and the float32 head (gpt_bf16.c) */
    size_t sizes[14] = {f32 || tp_bf16 ? align_up((size_t)(BT * m->C)) : 0, f32 ? align_up((size_t)(BT * m->Fl)) : 0,
                        f32 ? align_up((size_t)(BT * m->Cl)) : 0, f32 ? align_up((size_t)(BT * 3 * m->Cl)) : 0,
                        m->desc->is_gpt && !m->fused_attn ? align_up((size_t)(m->B * m->NHl * m->T * m->T)) : 0,
                        align_up((size_t)(3 * BT)),
                        /* bf16: dln, dfc, datty, dqkv, dres */
                        f32 ? 0 : align_up((size_t)(BT * m->C + 1) / 2), f32 ? 0 : align_up((size_t)(BT * dfc + 1) / 2),
                        f32 ? 0 : align_up((size_t)(BT * m->Cl + 1) / 2),
                        f32 ? 0 : align_up((size_t)(BT * dqkv + 1) / 2),
                        f32 ? 0 : align_up((size_t)(BT * m->C + 1) / 2), 0,
                        /* llama: gate_proj's output gradient beside up_proj's in dfc;
                         * under bf16 sb.dswi and sb.pack */
                        !llama ? 0
                        : f32  ? align_up((size_t)(BT * m->Fl))
                               : align_up((size_t)(BT * m->Fl + 1) / 2) + align_up((size_t)(BT * pack + 1) / 2),
                        /* the bf16 identities that widen a gradient, then C floats of
                         * zeros for a split backward's norms (gpt_bf16.c) */
                        tp_bf16 ? align_up(PLAIT_UNIT_BF16 / 2 + (size_t)m->C) : 0};
    size_t extra = 0; /* the least chunk of logits past the room (head_rows: plait_model_create) */
    if (m->bf16) plait_model_head_rows(BT, m->Vl, plait_model_head_room(m), &extra);
    /* then, under tp, ln_f's output in bf16 (tp_head_bf16.c) */
    if (m->bf16) sizes[11] = align_up(extra) + (tp_bf16 ? align_up((size_t)(BT * m->C + 1) / 2) : 0);
    size_t total = 0;
    for (int i = 0; i < 14; i++) total += sizes[i];
    m->scratch = plait_device_alloc(total * sizeof(float), "activations");
    if (!m->scratch) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: backward scratch");
    m->scratch_bytes = total * sizeof(float);
    m->act_bytes += m->scratch_bytes;
    float *at[14];
    float *p = m->scratch;
    for (int i = 0; i < 14; i++) {
        at[i] = sizes[i] ? p : NULL;
        p += sizes[i];
    }
    m->s_dln = at[0];
    m->s_dfc = at[1];
    m->s_datty = at[2];
    m->s_dqkv = at[3];
    m->s_datt = m->fused_attn ? m->att_scratch : at[4];
    m->s_rows = at[5];
    m->s_dgate = f32 ? at[12] : NULL;
    m->sb.dswi = f32 || !llama ? NULL : (plait_bf16 *)(void *)at[12];
    m->sb.pack = m->sb.dswi ? (plait_bf16 *)(void *)(at[12] + align_up((size_t)(BT * m->Fl + 1) / 2)) : NULL;
    m->sb.dln = (plait_bf16 *)(void *)at[6];
    m->sb.dfc = (plait_bf16 *)(void *)at[7];
    m->sb.datty = (plait_bf16 *)(void *)at[8];
    m->sb.dqkv = (plait_bf16 *)(void *)at[9];
    m->sb.dres = (plait_bf16 *)(void *)at[10];
    m->head_lnf = tp_bf16 ? (plait_bf16 *)(void *)(at[11] + align_up(extra)) : m->sb.dln;
    m->head_logits = m->sb.dfc;
    m->unit = (plait_bf16 *)(void *)at[13];
    if (m->unit) { /* the k x k identity at PLAIT_UNIT_AT(k), k = 8, 4, 2, 1 */
        plait_bf16 unit[PLAIT_UNIT_BF16] = {0};
        for (int k = 8; k >= 1; k /= 2)
            for (int i = 0; i < k; i++) unit[PLAIT_UNIT_AT(k) + i * (k + 1)] = 0x3F80; /* 1.0 */
        plait_status st = plait_device_copy(m->unit, unit, sizeof unit, PLAIT_COPY_TO_DEVICE);
        if (st != PLAIT_OK) return plait_wrap_error(st, "model: the bf16 identity that widens gradients");
    }
    return PLAIT_OK;
}
