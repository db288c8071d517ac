/* bf16 through device-memory transports; see tp_wire16.h. */
#include "tp_wire16.h"

#include <plait/device_util.h>

int tp16_available(const plait_host *host) {
    return plait_has_device(host) && PLAIT_KERNELS_HAS_FROM_BF16(host->kernels);
}

/* A free slot whose buffer holds `n` bf16 values (grown when smaller: the
 * old one freed, which the device orders after the kernels that read it). */
static plait_status take(tp16 *w, size_t n, tp16_slot **out) {
    const plait_host *host = w->host;
    for (int i = 0; i < TP16_SLOTS; i++) {
        tp16_slot *sl = &w->slot[i];
        if (sl->req) continue;
        if (sl->cap < n) {
            if (sl->buf) host->free(sl->buf);
            sl->cap = 0;
            sl->buf = host->alloc(n * sizeof(plait_bf16), plait_tensor_kind(host), 64, "tp bf16 messages");
            if (!sl->buf) return PLAIT_ERR_NO_MEMORY; /* the allocator said why */
            sl->cap = n;
        }
        *out = sl;
        return PLAIT_OK;
    }
    return host->set_error(PLAIT_ERR_INTERNAL,
                           "tp: more than %d bf16 collectives in flight at once (each needs its wait)", TP16_SLOTS);
}

/* The end of a slot's collective: widen its output into the float32
 * buffer, and the slot is free again. */
static void finish(tp16 *w, tp16_slot *sl) {
    w->host->kernels->from_bf16(sl->dst, sl->buf + sl->out_off, sl->dst_n);
    sl->req = NULL;
}

/* Posted: blocking (req NULL) ends here; a request is kept for tp16_wait. */
static plait_status posted(tp16 *w, tp16_slot *sl, plait_status st, plait_request **req) {
    if (st != PLAIT_OK) return st;
    if (req && *req) {
        sl->req = *req;
        return PLAIT_OK;
    }
    finish(w, sl);
    return PLAIT_OK;
}

/* A collective's start: a slot of `total` bf16 values holding src[0,
 * src_n) rounded at src_off, its output (at dst_off) to be widened into
 * dst[0, dst_n). */
static plait_status begin(tp16 *w, const float *src, size_t src_n, size_t src_off, float *dst, size_t dst_n,
                          size_t dst_off, size_t total, tp16_slot **out) {
    tp16_slot *sl = NULL;
    plait_status st = take(w, total, &sl);
    if (st != PLAIT_OK) return st;
    w->host->kernels->to_bf16(sl->buf + src_off, src, src_n);
    *sl = (tp16_slot){.buf = sl->buf, .cap = sl->cap, .dst = dst, .dst_n = dst_n, .out_off = dst_off};
    *out = sl;
    return PLAIT_OK;
}

plait_status tp16_allreduce(tp16 *w, plait_comm *comm, float *x, size_t count, const plait_coll_opts *opts,
                            plait_request **req) {
    tp16_slot *sl = NULL;
    if (req) *req = NULL;
    plait_status st = begin(w, x, count, 0, x, count, 0, count, &sl);
    if (st != PLAIT_OK) return st;
    st = w->host->coll->allreduce(comm, sl->buf, sl->buf, count, PLAIT_BF16, PLAIT_SUM, opts, req);
    return posted(w, sl, st, req);
}

plait_status tp16_sequence(tp16 *w, plait_comm *comm, int gather, const float *src, float *dst, size_t count,
                           int members, const plait_coll_opts *opts, plait_request **req) {
    const size_t n = count * (size_t)members;
    tp16_slot *sl = NULL;
    if (req) *req = NULL;
    /* [0, n): a gather's rows, a reduce-scatter's every rank's rows
     * rounded; [n, n + count): a gather's this rank's rows rounded, a
     * reduce-scatter's this rank's sums */
    plait_status st = gather ? begin(w, src, count, n, dst, n, 0, n + count, &sl)
                             : begin(w, src, n, 0, dst, count, n, n + count, &sl);
    if (st != PLAIT_OK) return st;
    const plait_coll_api *c = w->host->coll;
    st = gather ? c->allgather(comm, sl->buf + n, sl->buf, count, PLAIT_BF16, opts, req)
                : c->reduce_scatter(comm, sl->buf, sl->buf + n, count, PLAIT_BF16, PLAIT_SUM, opts, req);
    return posted(w, sl, st, req);
}

int tp16_wait(tp16 *w, plait_request *req, plait_status *st) {
    for (int i = 0; i < TP16_SLOTS; i++) {
        tp16_slot *sl = &w->slot[i];
        if (!req || sl->req != req) continue;
        const plait_coll_api *coll = w->host->coll; /* set once a slot was taken */
        /* the widening runs on the compute stream: it may follow the
         * collective's end there, on the device */
        *st = PLAIT_COLL_HAS(coll, wait_device) ? coll->wait_device(req) : coll->wait(req);
        if (*st == PLAIT_OK) finish(w, sl);
        else sl->req = NULL;
        return 1;
    }
    return 0;
}

void tp16_free(tp16 *w) {
    for (int i = 0; i < TP16_SLOTS; i++) {
        if (w->slot[i].buf) w->host->free(w->slot[i].buf);
        w->slot[i] = (tp16_slot){0};
    }
}
