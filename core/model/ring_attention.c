/*
 * Ring attention on the open device (ring_attention.h): the order of the
 * blocks and their transfers here, each block's arithmetic in the device's
 * kernels (plait/kernels.h, ABI 1.18: flash attention's, float32; under
 * bf16 activations ABI 1.25's, which read q|k|v, K|V, the output and its
 * gradient in bf16 and keep every sum float32). For
 * each query row the blocks of keys come in ring order (this rank's own
 * first, then the block of rank r-1, r-2, ...), each folded into the row's
 * running maximum, sum and weighted values (the log-sum-exp merge). So a
 * layout repeats its bits run after run, but cp ranks do not compute one
 * process's sums (the fused kernel of cp = 1 orders them otherwise): cp 2
 * and 4 equal cp 1 to rounding.
 *
 * The backward recomputes each block's probabilities from the forward's
 * log-sum-exp. A block's dK and dV travel with it: the rank holding block
 * src adds its queries' share to what the previous holders summed and
 * passes the sum on, and the last holder sends it home; each rank's share
 * is computed while the sum so far is on its way, and the next block's K
 * and V arrive while this block is computed.
 *
 * Device memory travels by the comm plugin's point-to-point requests
 * posted after a compute-stream event (plait_comm_p2p_after): the kernels
 * queued before a post finish before the transfer touches its buffer,
 * and on a device with streams the staging copies run on the
 * communication stream while the compute stream runs the block before.
 * A received buffer is complete on the device when its wait returns.
 *
 * Under bf16 activations (the _bf16 calls) the K|V blocks are bf16 in
 * memory and on the wire, copied from q|k|v as they are: the same values
 * the float32 ring sends rounded under a bf16 run, so the same bits on
 * every rank. What the blocks accumulate stays float32 in the ring's own
 * buffer (acc: the output's running rows in the forward, dq|dk|dv in the
 * backward), rounded to bf16 once after the last block, as the fused
 * bf16 attention of cp = 1 rounds its output and gradient once. dK and
 * dV's running sums travel float32, as on the float32 ring.
 */
#include "model/ring_attention.h"

#include <string.h>

#include "comm/comm.h"
#include "device/device.h"
#include "runtime/error.h"
#include "runtime/trace.h"

enum { TAG_KV_FWD = 1, TAG_KV_BWD = 2, TAG_DKV = 3 };

int64_t plait_cp_position(const plait_model *m, int64_t t) {
    const int64_t c = m->T / 2, j = t / c;
    const int64_t chunk = j == 0 ? m->cp_rank : 2 * m->cp - 1 - m->cp_rank;
    return chunk * c + t % c;
}

void plait_cp_take_local(int32_t *seq, int64_t B, int64_t T_local, int cp, int cp_rank) {
    const int64_t c = T_local / 2, T = T_local * cp;
    for (int64_t b = 0; b < B; b++) { /* each destination lies at or before its source */
        memmove(seq + b * T_local, seq + b * T + (int64_t)cp_rank * c, (size_t)c * sizeof *seq);
        memmove(seq + b * T_local + c, seq + b * T + (int64_t)(2 * cp - 1 - cp_rank) * c, (size_t)c * sizeof *seq);
    }
}

void plait_cp_add_positions(const plait_model *m, float *out, const float *wpe) {
    /* this rank's rows of the residual stream: all B·T, or under sequence
     * parallelism the R from row0 (model.c's sequence_setup); a run of
     * consecutive positions per chunk they cross */
    const int64_t c = m->T / 2;
    for (int64_t row = m->row0; row < m->row0 + m->R;) {
        const int64_t t = row % m->T, left = m->row0 + m->R - row, n = c - t % c < left ? c - t % c : left;
        m->k->add_positions(out + (row - m->row0) * m->C, wpe + plait_cp_position(m, t) * m->C, 1, n, m->C);
        row += n;
    }
}

void plait_cp_positions_backward(const plait_model *m, float *dwpe, const float *dout) {
    const int64_t c = m->T / 2;
    for (int j = 0; j < 2; j++) /* each position's rows in batch order */
        for (int64_t b = 0; b < m->B; b++)
            m->k->axpy(dwpe + plait_cp_position(m, j * c) * m->C, dout + (b * m->T + j * c) * m->C, (size_t)(c * m->C),
                       1.0f);
}

/* ---- the ring's buffers -------------------------------------------------- */

typedef struct ring {
    plait_model *m;
    int32_t layer;
    int bf16;                    /* q|k|v, K|V, out and dout are plait_bf16 (the _bf16 calls) */
    int64_t NH, NKV, HS, W, KVW; /* heads, head size, a qkv row's width, a K|V row's width */
    size_t kv_numel;             /* B·T·KVW: one block of K and V (or of their gradients) */
    void *kv[2];                 /* float32 or bf16 */
    float *dkv_in, *dkv_out[2], *l;
    float *acc; /* bf16: the float32 running output (B·T·NH·HS) or dq|dk|dv (B·T·W) */
    plait_request *req[4];
} ring;

static plait_status ring_open(plait_model *m, int32_t layer, int bf16, int64_t NH, int64_t NKV, ring *r) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->layer = layer;
    r->bf16 = bf16;
    r->NH = NH, r->NKV = NKV, r->HS = m->HS;
    r->W = (NH + 2 * NKV) * m->HS;
    r->KVW = 2 * NKV * m->HS;
    r->kv_numel = (size_t)(m->B * m->T * r->KVW);
    /* the K|V blocks take a float32 block's room either way */
    const size_t rows = (size_t)(m->B * NH * m->T), acc = bf16 ? (size_t)(m->B * m->T * r->W) : 0;
    const size_t bytes = (5 * r->kv_numel + rows + acc) * sizeof(float);
    if (m->ring_bytes < bytes) {
        plait_device_free(m->ring_mem);
        m->ring_bytes = 0;
        if (!(m->ring_mem = plait_device_alloc(bytes, "ring attention")))
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "model: ring attention's K/V buffers (%zu bytes)", bytes);
        m->ring_bytes = bytes;
    }
    float *p = m->ring_mem;
    r->kv[0] = p, r->kv[1] = p + r->kv_numel, r->dkv_in = p + 2 * r->kv_numel;
    r->dkv_out[0] = p + 3 * r->kv_numel, r->dkv_out[1] = p + 4 * r->kv_numel;
    r->l = p + 5 * r->kv_numel;
    r->acc = bf16 ? r->l + rows : NULL;
    return PLAIT_OK;
}

uint64_t plait_model_take_cp_wait_ns(plait_model *m) {
    const uint64_t ns = m->cp_wait_ns;
    m->cp_wait_ns = 0;
    return ns;
}

void plait_ring_attention_free(plait_model *m) {
    plait_device_free(m->ring_mem);
    m->ring_mem = NULL;
    m->ring_bytes = 0;
}

static plait_status ring_error(const ring *r, plait_status st, const char *what) {
    return plait_wrap_error(st, "model: ring attention of layer %d (cp rank %d of %d): %s", (int)r->layer,
                            (int)r->m->cp_rank, (int)r->m->cp, what);
}

/* Post request slot i: a send to the next rank or a receive from the
 * previous, touching buf after the kernels queued so far. On a bf16 run
 * K and V travel as bf16, half the bytes: under bf16 activations as they
 * lie in memory, else rounded once by their sender and widened exactly
 * on arrival (every rank folds them in float32). Their gradients' running
 * sums stay float32, as the dp gradients do. */
static plait_status ring_post(ring *r, int i, int is_send, void *buf, uint32_t tag) {
    const int cp = r->m->cp, me = r->m->cp_rank;
    const int peer = is_send ? (me + 1) % cp : (me + cp - 1) % cp;
    const plait_mem_kind kind = plait_device_mem_kind();
    const int kv = tag != TAG_DKV;
    plait_status st;
    if (kv && r->bf16)
        st = plait_comm_p2p_after(r->m->cp_comm, is_send, buf, r->kv_numel, PLAIT_BF16, peer, tag, kind, NULL,
                                  &r->req[i]);
    else if (kv && r->m->cp_wire_bf16)
        st = plait_comm_p2p_bf16_after(r->m->cp_comm, is_send, buf, r->kv_numel, peer, tag, kind, NULL, &r->req[i]);
    else
        st = plait_comm_p2p_after(r->m->cp_comm, is_send, buf, r->kv_numel, PLAIT_F32, peer, tag, kind, NULL,
                                  &r->req[i]);
    return st == PLAIT_OK ? PLAIT_OK : ring_error(r, st, is_send ? "posting a send" : "posting a receive");
}

/* Wait for request slot i. The time blocked is the ring's exposed
 * communication: one pair of clock readings is both the model's count
 * (plait_model_take_cp_wait_ns, which the step's split adds to its
 * communication) and the trace's `wait` span on the cp communicator. */
static plait_status ring_wait(ring *r, int i) {
    if (!r->req[i]) return PLAIT_OK;
    const uint64_t t0 = plait_clock_now_ns();
    plait_status st = plait_request_wait(r->req[i]);
    const uint64_t t1 = plait_clock_now_ns();
    r->m->cp_wait_ns += t1 - t0;
    if (plait_trace_on()) {
        plait_trace_args ta = PLAIT_TRACE_ARGS;
        ta.comm = "cp";
        ta.layer = r->layer;
        plait_trace_span(PLAIT_TRACE_WAIT, i < 2 ? "wait cp K/V" : "wait cp dK/dV", t0, t1, &ta);
    }
    r->req[i] = NULL;
    return st == PLAIT_OK
               ? PLAIT_OK
               : ring_error(r, st, i < 2 ? "waiting for a K/V transfer" : "waiting for a dK/dV sum's transfer");
}

static plait_status ring_close(ring *r, plait_status st) {
    for (int i = 0; i < 4; i++) {
        plait_status w = ring_wait(r, i);
        if (st == PLAIT_OK) st = w;
    }
    return st;
}

/* Which chunks block `src` and this rank's query rows are (ring_attention.h). */
static plait_ring_block block_of(const ring *r, int src, int first) {
    const int64_t cp = r->m->cp, me = r->m->cp_rank;
    return (plait_ring_block){.q_chunk = {me, 2 * cp - 1 - me}, .k_chunk = {src, 2 * cp - 1 - src}, .first = first};
}

/* This rank's K|V rows of qkv packed [B,T,K|V] into kv[0] for the ring
 * (bf16 pairs moved as floats: every width and offset is even, HS is,
 * as the grant asks). */
static void pack_own(ring *r, const void *qkv) {
    const plait_model *m = r->m;
    const int64_t rows = m->B * m->T, h = r->bf16 ? 2 : 1;
    const float *src = r->bf16 ? (const float *)(const void *)((const plait_bf16 *)qkv + r->NH * r->HS)
                               : (const float *)qkv + r->NH * r->HS;
    m->k->copy_rows(r->kv[0], r->KVW / h, src, r->W / h, rows, r->KVW / h);
}

/* The forward's pass around the ring: each block folded into the
 * running rows out (float32), mx (lse) and r->l; not finished. */
static plait_status forward_pass(ring *r, float *out, float *mx, const void *qkv) {
    plait_model *m = r->m;
    const plait_kernels *k = m->k;
    plait_status st = PLAIT_OK;
    pack_own(r, qkv);
    for (int s = 0; st == PLAIT_OK && s < m->cp; s++) {
        const int cur = s & 1, more = s + 1 < m->cp;
        if (more) st = ring_post(r, 0, 0, r->kv[cur ^ 1], TAG_KV_FWD);
        if (more && st == PLAIT_OK) st = ring_post(r, 1, 1, r->kv[cur], TAG_KV_FWD);
        if (st != PLAIT_OK) break;
        const plait_ring_block blk = block_of(r, (m->cp_rank - s + m->cp) % m->cp, s == 0);
        if (r->bf16)
            k->ring_attention_forward_bf16(out, mx, r->l, qkv, r->kv[cur], r->KVW, m->B, m->T, r->NH, r->NKV, m->HS,
                                           &blk);
        else k->ring_attention_forward(out, mx, r->l, qkv, r->kv[cur], r->KVW, m->B, m->T, r->NH, r->NKV, m->HS, &blk);
        if (more && (st = ring_wait(r, 0)) == PLAIT_OK) st = ring_wait(r, 1);
    }
    return ring_close(r, st);
}

plait_status plait_ring_attention_forward(plait_model *m, int32_t layer, float *out, float *lse, const float *qkv,
                                          int64_t NH, int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, 0, NH, NKV, &r);
    if (st == PLAIT_OK) st = forward_pass(&r, out, lse, qkv);
    if (st == PLAIT_OK) m->k->ring_attention_finish(out, lse, r.l, m->B, m->T, NH, m->HS);
    return st;
}

plait_status plait_ring_attention_forward_bf16(plait_model *m, int32_t layer, plait_bf16 *out, float *lse,
                                               const plait_bf16 *qkv, int64_t NH, int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, 1, NH, NKV, &r);
    if (st == PLAIT_OK) st = forward_pass(&r, r.acc, lse, qkv);
    if (st != PLAIT_OK) return st;
    m->k->ring_attention_finish(r.acc, lse, r.l, m->B, m->T, NH, m->HS);
    m->k->to_bf16(out, r.acc, (size_t)(m->B * m->T * NH * m->HS));
    return PLAIT_OK;
}

/* One block's share of the gradients: dq into dqkv (float32), dK|dV
 * into share. */
static void backward_block(ring *r, float *dqkv, float *share, const void *qkv, const void *kv, const void *dout,
                           const void *out, const float *lse, const plait_ring_block *blk) {
    const plait_model *m = r->m;
    if (r->bf16)
        m->k->ring_attention_backward_bf16(dqkv, share, qkv, kv, r->KVW, dout, out, lse, m->B, m->T, r->NH, r->NKV,
                                           m->HS, blk);
    else
        m->k->ring_attention_backward(dqkv, share, qkv, kv, r->KVW, dout, out, lse, m->B, m->T, r->NH, r->NKV, m->HS,
                                      blk);
}

/* long: one ring pass with its three kinds of transfer posted and waited in order */
static plait_status backward_pass(ring *r, float *dqkv, const void *dout, const void *qkv, const void *out,
                                  const float *lse) {
    plait_model *m = r->m;
    const plait_kernels *k = m->k;
    const int64_t rows = m->B * m->T;
    plait_status st = PLAIT_OK;
    k->zero(dqkv, (size_t)(rows * r->W));
    pack_own(r, qkv);
    /* requests: 0 receive K|V, 1 send K|V, 2 receive the sum the previous
     * rank sends at this step (added at the next step; after the last, this
     * rank's own block's sum from the last rank that held it), 3 send this
     * step's sum on. A step's receive and send of the sums are posted
     * together, as its K|V ones are: a transport that runs sends and
     * receives in posting order on one queue, each send held until its
     * receive runs (NCCL, whose plugin hands what was posted between two
     * waits to one ncclGroupStart/End), would otherwise hold this step's
     * send of the sum behind a receive its peer posts only at its next
     * step, and every rank would wait for its neighbour. */
    for (int s = 0; st == PLAIT_OK && s < m->cp; s++) {
        const int cur = s & 1, more = s + 1 < m->cp;
        if (more) st = ring_post(r, 0, 0, r->kv[cur ^ 1], TAG_KV_BWD);
        if (more && st == PLAIT_OK) st = ring_post(r, 1, 1, r->kv[cur], TAG_KV_BWD);
        if (st != PLAIT_OK) break;
        float *share = r->dkv_out[cur]; /* its send two steps ago was waited for at the last step */
        const plait_ring_block blk = block_of(r, (m->cp_rank - s + m->cp) % m->cp, s == 0);
        k->zero(share, r->kv_numel);
        backward_block(r, dqkv, share, qkv, r->kv[cur], dout, out, lse, &blk);
        if (s > 0 && (st = ring_wait(r, 2)) == PLAIT_OK) k->axpy(share, r->dkv_in, r->kv_numel, 1.0f);
        if (st == PLAIT_OK) st = ring_wait(r, 3);
        /* dkv_in is written after the addition just queued (posted after it) */
        if (st == PLAIT_OK) st = ring_post(r, 2, 0, r->dkv_in, TAG_DKV);
        if (st == PLAIT_OK) st = ring_post(r, 3, 1, share, TAG_DKV);
        if (more && st == PLAIT_OK && (st = ring_wait(r, 0)) == PLAIT_OK) st = ring_wait(r, 1);
    }
    if (st == PLAIT_OK) st = ring_wait(r, 2);
    st = ring_close(r, st);
    if (st == PLAIT_OK) k->copy_rows(dqkv + r->NH * m->HS, r->W, r->dkv_in, r->KVW, rows, r->KVW);
    return st;
}

plait_status plait_ring_attention_backward(plait_model *m, int32_t layer, float *dqkv, const float *dout,
                                           const float *qkv, const float *out, const float *lse, int64_t NH,
                                           int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, 0, NH, NKV, &r);
    return st != PLAIT_OK ? st : backward_pass(&r, dqkv, dout, qkv, out, lse);
}

plait_status plait_ring_attention_backward_bf16(plait_model *m, int32_t layer, plait_bf16 *dqkv, const plait_bf16 *dout,
                                                const plait_bf16 *qkv, const plait_bf16 *out, const float *lse,
                                                int64_t NH, int64_t NKV) {
    ring r;
    plait_status st = ring_open(m, layer, 1, NH, NKV, &r);
    if (st == PLAIT_OK) st = backward_pass(&r, r.acc, dout, qkv, out, lse);
    if (st == PLAIT_OK) m->k->to_bf16(dqkv, r.acc, (size_t)(m->B * m->T * r.W));
    return st;
}
