/*
 *
 * Expert parallelism in a sparse block (ep > 1, the expert tensors split over the ep group
 * by the plan): every rank routes its own tokens as above, then the
 * dispatch sends each local expert's rows to the rank holding it (the
 * per-expert row counts first, one all-to-all, then the rows, point to
 * point, whatever their number; the shared experts' forward runs while
 * they travel), the holder runs each source rank's rows of each of its
 * experts as one GEMM of their own (the very product that rank would run
 * at ep 1) and the combine sends the outputs back into the permuted rows,
 * which are summed into each token as above. The backward trades the
 * rows' gradients the same way; the holder computes each source's weight
 * gradients apart and adds them in the summation tree's
 * order over the sources (coll/sum_tree.c: left-complete, pairwise, the
 * earlier source on the left), the order in which an ordered reduction
 * over the dp x cp group would add them at ep 1. So at one micro-batch a
 * rank, ep 2 and 4 compute the bits of ep 1 (docs/parallelism.md).
 *
 * The trades move the rows from and into the device's memory (the counts,
 * host memory, by the all-to-all), so ep > 1 runs on any device with the
 * MoE entries. Where the experts run bf16 (moe_dims.bf) the rows travel
 * and are held in bf16, half the bytes, and the holder runs each source's
 * rows as one grouped bf16 product over its local experts (each expert's
 * product the one that source runs at ep 1: the same bits).
 */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "model/moe_internal.h"
#include "runtime/error.h"

/* The rows this rank's El = E/ep experts computed for its ep group, kept
 * from the forward for the backward (the slot's moe_held: this struct and
 * the counts in host memory, the rows in the device's): from each source
 * rank q, ascending, its rows of local expert 0, then 1, ...
 * (cnt[q·El + le] of them), in the order q permuted them. The device
 * block keeps its size from forward to forward and grows only when a
 * forward holds more rows, so a step does not allocate (and, on a GPU,
 * synchronise) once per block. The outputs are not kept: the combine
 * sends them back, and the backward reads none of them (the gates'
 * gradients read the source's copy), so they live in one buffer every
 * block shares. */
typedef struct moe_held {
    size_t bytes;      /* host and device, counted in the slot's moe_held_bytes */
    int64_t rows, cap; /* rows held now; rows the device block has room for */
    int32_t *cnt;      /* [ep·El] host memory */
    /* bf16 where moe_dims.bf, as moe_acts': */
    float *x, *y;     /* [rows,C] inputs (the slot's moe_held_dev block), outputs (m->moe_held_y) */
    float *h, *u, *a; /* [rows,F] as moe_acts' (the block) */
} moe_held;
/* the planner counts a block's head as 72 bytes (cost/activations.c,
 * plait_cost_held_bytes) */
_Static_assert(sizeof(moe_held) == 72, "moe_held is not the 72 bytes plait_cost_held_bytes counts");

/* Row ranges of one trade: this rank's rows for (from) each ep rank. */
typedef struct ep_ranges {
    int64_t send_at[PLAIT_MODEL_MAX_EP], send_n[PLAIT_MODEL_MAX_EP];
    int64_t recv_at[PLAIT_MODEL_MAX_EP], recv_n[PLAIT_MODEL_MAX_EP];
} ep_ranges;

/* The dispatch's ranges: to rank p the permuted rows of its experts; from
 * rank q the rows it counted for this rank's. The combine swaps them. */
static void ep_ranges_of(const plait_model *m, const moe_dims *d, const moe_acts *a, const int32_t *cnt, ep_ranges *r) {
    const int64_t El = d->E / m->ep;
    int64_t at = 0;
    for (int p = 0; p < m->ep; p++) {
        r->send_at[p] = a->hoff[p * El];
        r->send_n[p] = a->hoff[(p + 1) * El] - a->hoff[p * El];
        r->recv_at[p] = at;
        r->recv_n[p] = 0;
        for (int64_t le = 0; le < El; le++) r->recv_n[p] += cnt[p * El + le];
        at += r->recv_n[p];
    }
}

/* Rows of `width` floats between the ep ranks, posted: send_n[p] rows
 * from src + send_at[p] rows to rank p, recv_n[q] rows from rank q into
 * dst + recv_at[q] rows (swap: the combine's direction, recv as send); this
 * rank's own rows copied by the device. ep_wait completes them. src and
 * dst are the device's memory: a transport that moves it (nccl) takes the
 * pointers, one that moves host memory (tcp) has them staged
 * (comm/comm_p2p.c); each request touches its rows only after the kernels
 * queued before its post. Every receive and send of a trade is posted
 * before any wait, so a transport that groups what was posted between two
 * waits (the nccl plugin, plugins/comm/nccl/README.md) runs the trade as
 * one group, each send beside the receive its peer posted with it. */
static plait_status ep_post(plait_model *m, const ep_ranges *r, int swap, const float *src, float *dst, int64_t width,
                            int bf, plait_request **req) {
    const int64_t *sat = swap ? r->recv_at : r->send_at, *sn = swap ? r->recv_n : r->send_n;
    const int64_t *rat = swap ? r->send_at : r->recv_at, *rn = swap ? r->send_n : r->recv_n;
    plait_status st = PLAIT_OK;
    const uint32_t tag = 0x4d6f45u; /* "MoE": the only point-to-point on ep_comm */
    const plait_mem_kind kind = plait_device_mem_kind();
    /* bf: bf16 rows, half the bytes on the wire; the own rows copied as
     * floats (width, a multiple of 8, is even) */
    const moe_dims d = {.bf = bf};
    const plait_dtype dt = bf ? PLAIT_BF16 : PLAIT_F32;
    for (int q = 0; q < m->ep && st == PLAIT_OK; q++)
        if (q != m->ep_rank && rn[q] > 0)
            st = plait_comm_p2p_after(m->ep_comm, 0, plait_moe_at(&d, dst, rat[q] * width), (size_t)(rn[q] * width), dt,
                                      q, tag, kind, NULL, &req[q]);
    for (int p = 0; p < m->ep && st == PLAIT_OK; p++)
        if (p != m->ep_rank && sn[p] > 0)
            st = plait_comm_p2p_after(m->ep_comm, 1, plait_moe_at(&d, (float *)src, sat[p] * width),
                                      (size_t)(sn[p] * width), dt, p, tag, kind, NULL, &req[m->ep + p]);
    const int64_t own = sn[m->ep_rank] * width;
    if (st == PLAIT_OK && own > 0)
        m->k->copy(plait_moe_at(&d, dst, rat[m->ep_rank] * width),
                   plait_moe_at(&d, (float *)src, sat[m->ep_rank] * width), (size_t)(bf ? own / 2 : own));
    return st;
}

/* Every request ep_post posted completed (st: the post's status). */
static plait_status ep_wait(plait_model *m, int32_t layer, plait_request **req, plait_status st, const char *what) {
    for (int i = 0; i < 2 * m->ep; i++) {
        plait_status w = req[i] ? plait_request_wait(req[i]) : PLAIT_OK;
        req[i] = NULL;
        if (st == PLAIT_OK) st = w;
    }
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "model: %s of %s's experts (ep rank %d of %d)", what,
                                plait_model_layer_name(m, layer), (int)m->ep_rank, (int)m->ep);
    return PLAIT_OK;
}

static plait_status ep_trade(plait_model *m, int32_t layer, const ep_ranges *r, int swap, const float *src, float *dst,
                             int64_t width, int bf, const char *what) {
    plait_request *req[2 * PLAIT_MODEL_MAX_EP] = {0};
    return ep_wait(m, layer, req, ep_post(m, r, swap, src, dst, width, bf, req), what);
}

/* A device buffer every sparse block shares, grown to `need` floats (at
 * least 1) when it holds fewer: what it held is not kept, as no block
 * reads another's contents. Counted in the model's act_bytes. */
static plait_status shared_grow(plait_model *m, float **buf, size_t *floats, size_t need, const char *what) {
    if (need <= *floats && *buf) return PLAIT_OK;
    float *p = plait_device_alloc((need ? need : 1) * sizeof *p, "activations");
    if (!p) return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: %s", what);
    plait_device_free(*buf);
    m->act_bytes -= *floats * sizeof *p;
    *buf = p;
    *floats = need ? need : 1;
    m->act_bytes += *floats * sizeof *p;
    return PLAIT_OK;
}

/* recompute = selective (moe_dims.sel): the held rows' activation
 * function outputs (gpt u, llama a) in one device buffer every block
 * shares, grown to the largest block's rows (its contents are rebuilt
 * before each block's backward, so growing need not keep them). */
static plait_status held_act(plait_model *m, const moe_dims *d, moe_held *h) {
    const size_t n = (size_t)(h->rows * d->F);
    plait_status st = shared_grow(m, &m->moe_held_act, &m->moe_held_act_floats, d->bf ? n / 2 : n,
                                  "the held experts' activations");
    if (st != PLAIT_OK) return st;
    if (d->nt == MOE_LLAMA_TENSORS) {
        h->a = m->moe_held_act;
        return PLAIT_OK;
    }
    h->a = h->u; /* gpt: the GELU's output shared, where u was the unused a */
    h->u = m->moe_held_act;
    return PLAIT_OK;
}

plait_status plait_moe_ep_send_rows(plait_model *m, const moe_dims *d, moe_acts *a) {
    const size_t n = (size_t)(d->N * d->k * d->C);
    plait_status st = shared_grow(m, &m->moe_send_x, &m->moe_send_x_floats, d->bf ? n / 2 : n,
                                  "the rows the experts' dispatch sends");
    if (st == PLAIT_OK) a->x = m->moe_send_x;
    return st;
}

/* Block `layer`'s held rows freed, host and device (none: nothing to do). */
void plait_moe_held_drop(plait_model *m, model_slot *s, int32_t layer) {
    moe_held *old = s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!old) return;
    s->moe_held_bytes -= old->bytes;
    m->act_bytes -= old->bytes;
    free(old);
    s->moe_held[layer - 1] = NULL;
    plait_device_free(s->moe_held_dev[layer - 1]);
    s->moe_held_dev[layer - 1] = NULL;
}

/* Floats a held row takes in the slot's device block: x and h, u, a
 * (d->sel: held_act), then under a split backward the output gradients
 * its products' weight halves read (held_kept). */
static int64_t held_acts(const moe_dims *d) { return d->C + (d->sel ? 2 : 3) * d->F; }
static int64_t held_width(const moe_dims *d) {
    const int64_t acts = held_acts(d);
    return acts + (d->split ? d->C + (d->nt == MOE_LLAMA_TENSORS ? 2 : 1) * d->F : 0);
}

/* Under a split backward, where the held rows' output gradients live from
 * the input half to the weight half: after the rows' activations in their
 * device block (held_alloc's layout), dy [rows,C] at the last product and
 * d2 (llama: and d3) [rows,F] at the first; where d->bf, bf16 as the
 * products read them, dy [rows,C] and d2 the first product's one tensor
 * (gpt [rows,F], llama gate|up [rows,2F]), d3 NULL. */
typedef struct held_kept {
    float *dy, *d2, *d3;
} held_kept;

static held_kept held_kept_of(const moe_dims *d, const moe_held *h) {
    float *at = plait_moe_at(d, h->x, h->rows * held_acts(d)); /* x: the block's start */
    held_kept k = {.dy = at, .d2 = plait_moe_at(d, at, h->rows * d->C)};
    k.d3 = d->nt == MOE_LLAMA_TENSORS && !d->bf ? k.d2 + h->rows * d->F : NULL;
    return k;
}

/* The held rows' block for block `layer`, room for `rows` (the last
 * forward's device block kept when it has the room). */
static plait_status held_alloc(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, int64_t rows,
                               moe_held **out) {
    if (!s->moe_held) {
        s->moe_held = calloc((size_t)m->desc->n_layer, sizeof *s->moe_held);
        s->moe_held_dev = calloc((size_t)m->desc->n_layer, sizeof *s->moe_held_dev);
        if (!s->moe_held || !s->moe_held_dev) {
            free(s->moe_held);
            free(s->moe_held_dev);
            s->moe_held = NULL;
            s->moe_held_dev = NULL;
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the held experts' rows");
        }
    }
    moe_held *h = s->moe_held[layer - 1];
    if (!h) {
        const size_t n = (size_t)m->ep * (size_t)(d->E / m->ep);
        if (!(h = calloc(1, sizeof *h + n * sizeof(int32_t))))
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: out of memory for the held experts' rows");
        h->cnt = (int32_t *)(void *)(h + 1);
        h->bytes = sizeof *h + n * sizeof(int32_t);
        s->moe_held[layer - 1] = h;
        s->moe_held_bytes += h->bytes;
        m->act_bytes += h->bytes;
    }
    /* x and h, u, a (d->sel: held_act), under a split backward the kept
     * output gradients too (held_kept_of); bf16 where d->bf,
     * the llama arch's h and u one [rows,2F] gate|up */
    const int64_t width = held_width(d) / (d->bf ? 2 : 1);
    float **dev = &s->moe_held_dev[layer - 1];
    if (!*dev || h->cap < rows) {
        const size_t bytes = (size_t)((rows > 0 ? rows : 1) * width) * sizeof(float);
        float *grown = plait_device_alloc(bytes, "activations");
        if (!grown)
            return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "model: the rows %s's experts hold for the ep group",
                                    plait_model_layer_name(m, layer));
        const size_t had = *dev ? (size_t)(h->cap * width) * sizeof(float) : 0;
        plait_device_free(*dev);
        *dev = grown;
        h->cap = rows > 0 ? rows : 1;
        h->bytes += bytes - had;
        s->moe_held_bytes += bytes - had;
        m->act_bytes += bytes - had;
    }
    const size_t ny = (size_t)(rows * d->C);
    plait_status st = shared_grow(m, &m->moe_held_y, &m->moe_held_y_floats, d->bf ? ny / 2 : ny,
                                  "the rows the experts send back");
    if (st != PLAIT_OK) return st;
    h->rows = rows;
    h->x = *dev;
    h->y = m->moe_held_y;
    h->h = plait_moe_at(d, h->x, rows * d->C);
    h->u = plait_moe_at(d, h->h, rows * d->F);
    h->a = plait_moe_at(d, h->u, rows * d->F);
    *out = h;
    return d->sel ? held_act(m, d, h) : PLAIT_OK;
}

/* A source's row offsets of its El local experts' rows (host memory). */
static void source_offsets(const int32_t *cnt, int64_t El, int32_t *off) {
    off[0] = 0;
    for (int64_t le = 0; le < El; le++) off[le + 1] = off[le] + cnt[le];
}

/* The held rows from row `at` on (bf16 where d->bf, the llama arch's h
 * then [.,2F]). */
typedef struct held_rows {
    float *x, *y, *h, *u, *a;
} held_rows;
static held_rows held_rows_at(const moe_dims *d, const moe_held *h, int64_t at) {
    const int gu = d->bf && d->nt == MOE_LLAMA_TENSORS;
    return (held_rows){.x = plait_moe_at(d, h->x, at * d->C),
                       .y = plait_moe_at(d, h->y, at * d->C),
                       .h = plait_moe_at(d, h->h, at * d->F * (gu ? 2 : 1)),
                       .u = plait_moe_at(d, h->u, at * d->F),
                       .a = plait_moe_at(d, h->a, at * d->F)};
}

/* The forward's experts at ep > 1: dispatch, each (source, local expert)
 * product, combine into a->y; the shared experts' forward of `ln` while
 * the dispatch travels. */
plait_status plait_moe_ep_forward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, moe_acts *a,
                                  float *const *t, const float *ln) {
    const int64_t El = d->E / m->ep, C = d->C, F = d->F;
    int32_t sent[4096], got[4096]; /* [model] moe_experts <= 4096 */
    if (!m->ep_comm || m->ep > PLAIT_MODEL_MAX_EP)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: %s's experts split %d ways without an ep group",
                               plait_model_layer_name(m, layer), (int)m->ep);
    for (int64_t e = 0; e < d->E; e++) sent[e] = a->hoff[e + 1] - a->hoff[e];
    plait_coll_opts opts = {.struct_size = sizeof opts, .label = "experts' row counts"};
    plait_status st = plait_comm_alltoall(m->ep_comm, sent, got, (size_t)El, PLAIT_I32, &opts, NULL);
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "model: the row counts of %s's experts", plait_model_layer_name(m, layer));
    int64_t rows = 0;
    for (int64_t i = 0; i < m->ep * El; i++) rows += got[i];
    moe_held *h = NULL;
    if ((st = held_alloc(m, s, layer, d, rows, &h)) != PLAIT_OK) return st;
    memcpy(h->cnt, got, (size_t)(m->ep * El) * sizeof *got);
    ep_ranges r;
    ep_ranges_of(m, d, a, h->cnt, &r);
    plait_request *req[2 * PLAIT_MODEL_MAX_EP] = {0};
    st = ep_post(m, &r, 0, a->x, h->x, C, d->bf, req);
    if (st == PLAIT_OK && d->SF > 0) plait_moe_shared_forward(m, d, layer, t, a, ln);
    if ((st = ep_wait(m, layer, req, st, "the dispatch")) != PLAIT_OK) return st;
    int64_t at = 0;
    for (int q = 0; q < m->ep && d->bf; q++) { /* one grouped product a source over its rows of each local expert */
        int32_t off[4097];
        source_offsets(h->cnt + q * El, El, off);
        const mlp_wbf w = plait_moe_bf16_w(m, d, layer, 0);
        held_rows hr = held_rows_at(d, h, at);
        plait_moe_bf16_group_forward(m, d, &w, off, El, F, hr.x, hr.h, hr.u, hr.a, hr.y);
        at += off[El];
    }
    for (int q = 0; q < m->ep && !d->bf; q++)
        for (int64_t le = 0; le < El; le++) {
            const mlp_w w = plait_moe_expert_w(d, t, le);
            const int64_t n = h->cnt[q * El + le];
            plait_moe_mlp_forward(m, d, &w, h->x + at * C, h->h + at * F, h->u + at * F, h->a + at * F, h->y + at * C,
                                  n, F);
            at += n;
        }
    return ep_trade(m, layer, &r, 1, h->y, a->y, C, d->bf, "the combine");
}

/* Floats of one expert's tensors (the stacked tensors' slices). */
static int64_t expert_floats(const moe_dims *d, int tensor) {
    const int64_t C = d->C, F = d->F;
    if (d->nt == MOE_LLAMA_TENSORS) return F * C;
    static const int wide[MOE_GPT_TENSORS] = {2, 1, 2, 0}; /* c_fc w, c_fc b, c_proj w, c_proj b */
    return wide[tensor] == 2 ? F * C : wide[tensor] == 1 ? F : C;
}

/* Floats of the gradients of one rank's E/ep experts. */
int64_t plait_moe_ep_grad_floats(const plait_model *m, const moe_dims *d) {
    int64_t G = 0;
    for (int i = 0; i < d->nt; i++) G += d->E / m->ep * expert_floats(d, i);
    return G;
}

/* The sources' gradients gs [ep][G] (each source's apart), pairwise with
 * doubling strides: the left-complete tree of coll/sum_tree.c over the ep
 * sources, added into g's expert tensors. */
static void sources_sum(plait_model *m, const moe_dims *d, float *gs, int64_t G, const int64_t *part, float *const *g) {
    const int64_t El = d->E / m->ep;
    for (int stride = 1; stride < m->ep; stride *= 2)
        for (int q = 0; q + stride < m->ep; q += 2 * stride)
            m->k->axpy(gs + q * G, gs + (q + stride) * G, (size_t)G, 1.0f);
    for (int i = 0; i < d->nt; i++)
        m->k->axpy(g[MOE_EXPERTS + i], gs + part[i], (size_t)(El * expert_floats(d, i)), 1.0f);
}

/* bf16 values a held row's first product's kept output gradient takes
 * (held_kept_of, d->bf): gpt F, llama gate|up 2F. */
static int64_t first_width(const moe_dims *d) { return d->nt == MOE_LLAMA_TENSORS ? 2 * d->F : d->F; }

/* Each tensor's offset in one source's gradients (part[]), their floats G. */
static int64_t source_parts(const plait_model *m, const moe_dims *d, int64_t *part) {
    int64_t G = 0;
    for (int i = 0; i < d->nt; i++) part[i] = G, G += d->E / m->ep * expert_floats(d, i);
    return G;
}

plait_status plait_moe_ep_backward(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d, const moe_acts *a,
                                   float *const *t, float *const *g, const moe_scratch *sc, bwd_part part) {
    const int64_t El = d->E / m->ep, C = d->C, F = d->F;
    moe_held *h = s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!h)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: backward of %s's experts before their forward",
                               plait_model_layer_name(m, layer));
    const held_kept kept = part == BWD_ALL ? (held_kept){0} : held_kept_of(d, h);
    int64_t parts[MOE_GPT_TENSORS], G = source_parts(m, d, parts), at = 0;
    float *gs = sc->grads;
    if (part == BWD_WEIGHT) { /* each source's weight gradients from the kept output gradients */
        m->k->zero(gs, (size_t)(m->ep * G));
        for (int q = 0; q < m->ep && d->bf; q++) { /* one grouped product a source, as the input half's */
            float *gq[MOE_EXPERTS + MOE_GPT_TENSORS];
            for (int i = 0; i < d->nt; i++) gq[MOE_EXPERTS + i] = gs + q * G + parts[i];
            int32_t off[4097];
            source_offsets(h->cnt + q * El, El, off);
            const mlp_w gw = plait_moe_expert_w(d, gq, 0);
            const held_rows hr = held_rows_at(d, h, at);
            plait_moe_bf16_group_weight(m, d, &gw, off, El, F, hr.x, hr.u, hr.a, MOE_BF(kept.dy) + at * C,
                                        MOE_BF(kept.d2) + at * first_width(d));
            at += off[El];
        }
        for (int q = 0; q < m->ep && !d->bf; q++) {
            float *gq[MOE_EXPERTS + MOE_GPT_TENSORS];
            for (int i = 0; i < d->nt; i++) gq[MOE_EXPERTS + i] = gs + q * G + parts[i];
            for (int64_t le = 0; le < El; le++) {
                const mlp_w gw = plait_moe_expert_w(d, gq, le);
                const int64_t n = h->cnt[q * El + le];
                plait_moe_mlp_weight(m, d, &gw, h->x + at * C, h->u + at * F, h->a + at * F, kept.dy + at * C,
                                     kept.d2 + at * F, kept.d3 ? kept.d3 + at * F : NULL, n, F);
                at += n;
            }
        }
        sources_sum(m, d, gs, G, parts, g);
        return PLAIT_OK;
    }
    /* the held rows' output and input gradients [rows,C] each: live only
     * in this call, so one buffer every block shares */
    plait_status st = shared_grow(m, &m->moe_held_grads, &m->moe_held_grads_floats,
                                  (size_t)((d->bf ? 1 : 2) * h->rows * C), "the held experts' rows' gradients");
    if (st != PLAIT_OK) return st;
    float *dy = m->moe_held_grads, *dx = plait_moe_at(d, dy, h->rows * C);
    const int one = part == BWD_ALL;
    if (one) m->k->zero(gs, (size_t)(m->ep * G));
    ep_ranges r;
    ep_ranges_of(m, d, a, h->cnt, &r);
    st = ep_trade(m, layer, &r, 0, sc->dy, dy, C, d->bf, "the output gradients' dispatch");
    if (st == PLAIT_OK && !one) m->k->copy(kept.dy, dy, (size_t)(d->bf ? h->rows * C / 2 : h->rows * C));
    for (int q = 0; q < m->ep && st == PLAIT_OK; q++) {
        float *gq[MOE_EXPERTS + MOE_GPT_TENSORS];
        for (int i = 0; i < d->nt; i++) gq[MOE_EXPERTS + i] = gs + q * G + parts[i];
        if (d->bf) { /* one grouped product a source, as the forward's */
            int32_t off[4097];
            source_offsets(h->cnt + q * El, El, off);
            const mlp_wbf w = plait_moe_bf16_w(m, d, layer, 0);
            const mlp_w gw = one ? plait_moe_expert_w(d, gq, 0) : (mlp_w){0};
            held_rows hr = held_rows_at(d, h, at);
            plait_moe_bf16_group_backward(m, d, &w, &gw, off, El, F, hr.x, hr.h, hr.u, hr.a, MOE_BF(dy) + at * C,
                                          MOE_BF(dx) + at * C, sc);
            if (!one && off[El] > 0) /* the input half: the first product's output gradient kept */
                m->k->copy((float *)(void *)(MOE_BF(kept.d2) + at * first_width(d)), plait_moe_bf16_first_grad(d, sc),
                           (size_t)plait_moe_bf16_first_floats(d, off[El], F));
            at += off[El];
            continue;
        }
        for (int64_t le = 0; le < El; le++) {
            /* the input half: no gradient written, the first product's
             * output gradients kept for the weight half */
            const mlp_w w = plait_moe_expert_w(d, t, le), gw = one ? plait_moe_expert_w(d, gq, le) : (mlp_w){0};
            const int64_t n = h->cnt[q * El + le];
            plait_moe_mlp_backward(m, d, &w, &gw, h->x + at * C, h->h + at * F, h->u + at * F, h->a + at * F,
                                   dy + at * C, dx + at * C, n, F, sc);
            if (!one && n > 0) m->k->copy(kept.d2 + at * F, sc->d2, (size_t)(n * F));
            if (!one && n > 0 && kept.d3) m->k->copy(kept.d3 + at * F, sc->d3, (size_t)(n * F));
            at += n;
        }
    }
    if (st == PLAIT_OK && one) sources_sum(m, d, gs, G, parts, g);
    float *into = d->bf ? (float *)(void *)sc->dxb : sc->dx;
    if (st == PLAIT_OK) st = ep_trade(m, layer, &r, 1, dx, into, C, d->bf, "the input gradients' combine");
    return st;
}

plait_status plait_moe_ep_act_rerun(plait_model *m, model_slot *s, int32_t layer, const moe_dims *d) {
    moe_held *h = s->moe_held ? s->moe_held[layer - 1] : NULL;
    if (!h)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "model: recompute of %s's experts before their forward",
                               plait_model_layer_name(m, layer));
    /* the shared device buffer another block may have moved */
    h->u = d->nt == MOE_LLAMA_TENSORS ? h->u : plait_moe_at(d, h->h, h->rows * d->F); /* held_act's layout, again */
    plait_status st = held_act(m, d, h);
    const int64_t El = d->E / m->ep, F = d->F;
    int64_t at = 0;
    for (int64_t i = 0; st == PLAIT_OK && i < m->ep * El; i++) {
        const held_rows hr = held_rows_at(d, h, at);
        if (d->bf) plait_moe_bf16_act(m, d, hr.h, hr.u, hr.a, h->cnt[i], F);
        else plait_moe_act_forward(m, d, hr.h, hr.u, hr.a, h->cnt[i] * F);
        at += h->cnt[i];
    }
    return st;
}
