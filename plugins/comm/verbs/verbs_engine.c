/*
 * The verbs engine: life cycle, bounce buffers, requests, communicators,
 * the send path (eager and RTS), flow control and completions. Failures,
 * abort and waiting are verbs_fail.c, the receive path verbs_recv.c. See
 * verbs.h.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs.h"

void vb_settings_default(vb_settings *s) {
    memset(s, 0, sizeof *s);
    s->port = 0;
    s->gid_index = -1;
    s->eager_max = 8192;
    s->credits = 64;
    s->rx_depth = 512;
    s->tx_depth = 256;
    s->sq_depth = 128;
    s->max_read = 1u << 30;
    s->ib_timeout = 18;
    s->ib_retry = 7;
    s->max_message = 1ull << 40;
}

/* ---- naming, requests -------------------------------------------------------- */

void vb_peer_name(const vb_comm *c, int world_peer, char *buf, size_t cap) {
    plait_comm_peer_name(!c || c->is_world, c ? c->world_of : NULL, c ? c->size : 0, c ? c->id : 0, world_peer, buf,
                         cap);
}

void vb_req_done(vb_engine *e, vb_req *r) {
    if (r->done) return;
    r->done = 1;
    if (e->waiting) pthread_cond_broadcast(&e->cv);
}

void vb_req_fail(vb_engine *e, vb_req *r, plait_status st, const char *fmt, ...) {
    if (r->done) return;
    va_list ap;
    va_start(ap, fmt);
    plait_req_vfail(&r->status, r->err, sizeof r->err, st, fmt, ap);
    va_end(ap);
    vb_req_done(e, r);
}

vb_req *vb_req_new(vb_engine *e) {
    vb_req *r = e->free_reqs;
    if (r) e->free_reqs = (vb_req *)r->link.next;
    else r = malloc(sizeof *r);
    if (r) memset(r, 0, sizeof *r);
    return r;
}

void vb_req_release(vb_engine *e, vb_req *r) {
    r->link.next = (vp_link *)e->free_reqs;
    e->free_reqs = r;
}

vb_comm *vb_comm_by_id(vb_engine *e, uint32_t id) {
    for (vb_comm *c = e->comms; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* ---- bounce buffers ---------------------------------------------------------- */

static vb_slot *tx_get(vb_engine *e) {
    vb_slot *s = e->tx_free;
    if (s) e->tx_free = s->next;
    return s;
}

static void tx_put(vb_engine *e, vb_slot *s) {
    s->next = e->tx_free;
    e->tx_free = s;
}

static int rx_post(vb_engine *e, vb_slot *s) {
    int rc = e->fops->post_recv(e->fab, VB_WR(s, VB_WR_RX), s->buf, (uint32_t)e->slot_bytes, e->pool_mr.lkey);
    if (rc == 0) e->rx_posted++;
    return rc;
}

/* ---- life cycle -------------------------------------------------------------- */

plait_status vb_engine_new(const plait_host *h, const vb_settings *cfg, int rank, int size, void *fab,
                           const vb_fabric_ops *fops, const uint32_t *peer_credits, vb_engine **out) {
    *out = NULL;
    vb_engine *e = calloc(1, sizeof *e);
    if (!e) return h->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    e->host = h;
    e->cfg = *cfg;
    e->rank = rank;
    e->size = size;
    e->fab = fab;
    e->fops = fops;
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_condattr_destroy(&ca);
    e->peers = calloc((size_t)size, sizeof *e->peers);
    if (!e->peers || vp_table_init(&e->chans) != 0) {
        vb_engine_free(e);
        return h->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    }
    for (int p = 0; p < size; p++)
        vp_credit_init(&e->peers[p].cr, cfg->credits, peer_credits ? (int32_t)peer_credits[p] : cfg->credits);

    size_t payload = cfg->eager_max;
    if (payload < sizeof(vb_rts)) payload = sizeof(vb_rts);
    if (payload < VB_ABORT_MAX) payload = VB_ABORT_MAX;
    e->slot_bytes = (sizeof(vb_hdr) + payload + 63) & ~(size_t)63;
    int n = cfg->rx_depth + cfg->tx_depth;
    e->pool_bytes = e->slot_bytes * (size_t)n;
    if (posix_memalign((void **)&e->pool, 4096, e->pool_bytes) != 0) e->pool = NULL;
    e->slots = calloc((size_t)n, sizeof *e->slots);
    if (!e->pool || !e->slots) {
        vb_engine_free(e);
        return h->set_error(PLAIT_ERR_NO_MEMORY, "verbs: cannot allocate %zu bytes of bounce buffers",
                            e->pool_bytes);
    }
    memset(e->pool, 0, e->pool_bytes);
    int rc = fops->reg(fab, e->pool, e->pool_bytes, &e->pool_mr);
    if (rc != 0) {
        vb_engine_free(e);
        return h->set_error(PLAIT_ERR_SYSTEM,
                            "verbs: cannot register %zu bytes of bounce buffers: %s (is the locked-memory limit, "
                            "ulimit -l, too low?)", e->pool_bytes, strerror(rc));
    }
    for (int i = 0; i < n; i++) {
        vb_slot *s = &e->slots[i];
        s->buf = e->pool + (size_t)i * e->slot_bytes;
        s->is_rx = i < cfg->rx_depth;
        if (!s->is_rx) {
            tx_put(e, s);
        } else if ((rc = rx_post(e, s)) != 0) {
            vb_engine_free(e);
            return h->set_error(PLAIT_ERR_SYSTEM, "verbs: cannot post receive buffer %d of %d: %s", i,
                                cfg->rx_depth, strerror(rc));
        }
    }
    *out = e;
    return PLAIT_OK;
}

static void drop_item(vp_link *x, int posted, void *ctx) {
    (void)ctx;
    if (!posted) vb_msg_free((vb_msg *)x);
    /* posted receives belong to their callers */
}

void vb_engine_free(vb_engine *e) {
    if (!e) return;
    e->stopping = 1;
    if (e->chans.buckets) vp_table_drop(&e->chans, 0, 1, drop_item, NULL);
    vp_table_free(&e->chans);
    for (int p = 0; e->peers && p < e->size; p++) {
        vb_peer *pp = &e->peers[p];
        for (vb_exposed *x = pp->exposed, *nx; x; x = nx) {
            nx = x->next;
            if (x->own_mr) e->fops->dereg(e->fab, &x->mr);
            free(x);
        }
        for (vb_ctrl *k = pp->ctrl, *nx; k; k = nx) {
            nx = k->next;
            free(k);
        }
    }
    free(e->peers);
    if (e->pool_mr.handle) e->fops->dereg(e->fab, &e->pool_mr);
    free(e->pool);
    free(e->slots);
    for (vb_req *r = e->free_reqs, *nx; r; r = nx) {
        nx = (vb_req *)r->link.next;
        free(r);
    }
    if (e->stat_eager + e->stat_rndv)
        e->host->log(PLAIT_LOG_DEBUG, VB_COMPONENT,
                     "rank %d sent %llu eager and %llu rendezvous messages; %llu arrived before their receive; %llu "
                     "credit messages", e->rank, (unsigned long long)e->stat_eager,
                     (unsigned long long)e->stat_rndv, (unsigned long long)e->stat_unexpected,
                     (unsigned long long)e->stat_credit_msgs);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

/* ---- communicators ----------------------------------------------------------- */

static plait_status comm_register(vb_engine *e, vb_comm *c) {
    pthread_mutex_lock(&e->mu);
    plait_status st = PLAIT_OK;
    if (vb_comm_by_id(e, c->id))
        st = e->host->set_error(PLAIT_ERR_INVALID_ARG, "verbs: communicator id %u is already in use on rank %d",
                                c->id, e->rank);
    else {
        c->next = e->comms;
        e->comms = c;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

plait_status vb_comm_world(vb_engine *e, uint32_t id, vb_comm **out) {
    vb_comm *c = calloc(1, sizeof *c);
    if (c) c->world_of = malloc(sizeof(int) * (size_t)e->size);
    if (!c || !c->world_of) {
        if (c) free(c);
        return e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    }
    for (int i = 0; i < e->size; i++) c->world_of[i] = i;
    c->eng = e;
    c->id = id;
    c->rank = e->rank;
    c->size = e->size;
    c->is_world = 1;
    plait_status st = comm_register(e, c);
    if (st != PLAIT_OK) {
        free(c->world_of);
        free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

plait_status vb_comm_derive(vb_comm *parent, uint32_t id, int rank, int size, const int *members, vb_comm **out) {
    vb_engine *e = parent->eng;
    *out = NULL;
    if (size < 1 || rank < 0 || rank >= size || !members || id == 0)
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "verbs: derive: bad arguments (size %d, rank %d, id %u)",
                                  size, rank, id);
    vb_comm *c = calloc(1, sizeof *c);
    if (c) c->world_of = malloc(sizeof(int) * (size_t)size);
    if (!c || !c->world_of) {
        if (c) free(c);
        return e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    }
    for (int i = 0; i < size; i++) {
        if (members[i] < 0 || members[i] >= parent->size) {
            free(c->world_of);
            free(c);
            return e->host->set_error(PLAIT_ERR_INVALID_ARG, "verbs: derive: member %d is parent rank %d of %d", i,
                                      members[i], parent->size);
        }
        c->world_of[i] = parent->world_of[members[i]];
    }
    if (c->world_of[rank] != e->rank) {
        int w = c->world_of[rank];
        free(c->world_of);
        free(c);
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "verbs: derive: child rank %d is world rank %d, not %d",
                                  rank, w, e->rank);
    }
    c->eng = e;
    c->id = id;
    c->rank = rank;
    c->size = size;
    plait_status st = comm_register(e, c);
    if (st != PLAIT_OK) {
        free(c->world_of);
        free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

/* A dropped unexpected RTS still holds its sender: tell it. */
static void drop_comm_item(vp_link *x, int posted, void *ctx) {
    vb_engine *e = ctx;
    if (posted) return;
    vb_msg *m = (vb_msg *)x;
    (void)e;
    vb_msg_free(m);
}

typedef struct drop_ctx {
    vb_engine *e;
    uint32_t comm_id;
} drop_ctx;

static void fin_unexpected_rts(vp_chan *ch, void *ctx) {
    drop_ctx *d = ctx;
    if (ch->comm_id != d->comm_id) return;
    for (vp_link *x = ch->unexpected.head; x; x = x->next) {
        vb_msg *m = (vb_msg *)x;
        if (m->type == VB_RTS) vb_queue_ctrl(d->e, ch->peer, ch->comm_id, m->rtoken, VB_FIN_ABORTED);
    }
}

void vb_comm_free(vb_comm *c) {
    if (!c) return;
    vb_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    for (vb_comm **pp = &e->comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    drop_ctx d = {e, c->id};
    vp_table_each(&e->chans, fin_unexpected_rts, &d);
    vp_table_drop(&e->chans, c->id, 0, drop_comm_item, e);
    vb_flush_all(e);
    pthread_mutex_unlock(&e->mu);
    free(c->world_of);
    free(c);
}

/* ---- sending ----------------------------------------------------------------- */

void vb_queue_ctrl(vb_engine *e, int peer, uint32_t comm_id, uint64_t token, uint32_t status) {
    vb_peer *p = &e->peers[peer];
    if (p->lost) return;
    vb_ctrl *k = calloc(1, sizeof *k);
    if (!k) {
        vb_fail_peer(e, peer, PLAIT_ERR_NO_MEMORY, "out of memory queueing a FIN");
        return;
    }
    k->token = token;
    k->status = status;
    k->comm_id = comm_id;
    if (p->ctrl_tail) p->ctrl_tail->next = k;
    else p->ctrl = k;
    p->ctrl_tail = k;
}

void vb_flush_all(vb_engine *e) {
    for (int p = 0; p < e->size; p++) {
        vb_peer *pp = &e->peers[p];
        if (pp->lost || p == e->rank) continue;
        if (pp->sendq.head || pp->ctrl || pp->readq.head || vp_credit_due(&pp->cr)) vb_flush_peer(e, p);
    }
}

/* Post one message from a bounce buffer; 0, or -1 after failing the peer. */
int vb_post_slot(vb_engine *e, int peer, vb_slot *s, size_t len) {
    int rc = e->fops->post_send(e->fab, peer, VB_WR(s, VB_WR_TX), s->buf, (uint32_t)len, e->pool_mr.lkey);
    if (rc != 0) {
        tx_put(e, s);
        char why[192];
        snprintf(why, sizeof why, "posting a send to rank %d failed: %s", peer, strerror(rc));
        vb_fail_peer(e, peer, PLAIT_ERR_SYSTEM, why);
        return -1;
    }
    e->peers[peer].sq_used++;
    e->send_outstanding++;
    return 0;
}

int vb_send_room(const vb_engine *e, int peer) {
    return e->peers[peer].sq_used < e->cfg.sq_depth &&
           (e->cfg.send_budget <= 0 || e->send_outstanding < e->cfg.send_budget);
}

/* Can one more message of `type` go to `peer` now? Takes the slot and, for
 * counted types, the credit. */
vb_slot *vb_reserve(vb_engine *e, int peer, int type) {
    vb_peer *p = &e->peers[peer];
    if (!vb_send_room(e, peer) || !e->tx_free) return NULL;
    if (!vp_credit_take(&p->cr, type)) return NULL;
    return tx_get(e);
}

void vb_flush_peer(vb_engine *e, int peer) {
    vb_peer *p = &e->peers[peer];
    if (p->lost || peer == e->rank) return;
    /* FINs first: they release the peers' buffers */
    while (p->ctrl) {
        vb_slot *s = vb_reserve(e, peer, VB_FIN);
        if (!s) break;
        vb_ctrl *k = p->ctrl;
        p->ctrl = k->next;
        if (!p->ctrl) p->ctrl_tail = NULL;
        vb_hdr h = vp_header(VB_FIN, vp_credit_grant(&p->cr), k->comm_id, 0, 0, 0);
        vb_fin f = {k->token, k->status, 0};
        memcpy(s->buf, &h, sizeof h);
        memcpy(s->buf + sizeof h, &f, sizeof f);
        free(k);
        if (vb_post_slot(e, peer, s, sizeof h + sizeof f) != 0) return;
    }
    while (p->sendq.head) {
        vb_req *r = (vb_req *)p->sendq.head;
        int type = r->rndv ? VB_RTS : VB_EAGER;
        vb_exposed *x = NULL;
        if (type == VB_RTS && !(x = calloc(1, sizeof *x))) break; /* retried at the next flush */
        vb_slot *s = vb_reserve(e, peer, type);
        if (!s) {
            free(x);
            break;
        }
        vp_queue_pop(&p->sendq);
        vb_hdr h = vp_header((uint8_t)type, vp_credit_grant(&p->cr), r->comm->id, r->tag, r->seq, r->cap);
        memcpy(s->buf, &h, sizeof h);
        size_t len = sizeof h;
        if (type == VB_EAGER) {
            if (r->cap) memcpy(s->buf + sizeof h, r->buf, r->cap);
            len += r->cap;
        } else {
            vb_rts t = {(uint64_t)(uintptr_t)r->buf, r->token, r->mr.rkey, 0};
            memcpy(s->buf + sizeof h, &t, sizeof t);
            len += sizeof t;
        }
        if (vb_post_slot(e, peer, s, len) != 0) {
            free(x);
            if (r->own_mr) e->fops->dereg(e->fab, &r->mr);
            r->own_mr = 0;
            vb_req_fail(e, r, p->lost_status, "verbs: send of %zu bytes (tag %u) to rank %d failed: %s", r->cap,
                        r->tag, peer, p->lost_why);
            return;
        }
        if (type == VB_EAGER) {
            e->stat_eager++;
            r->len = r->cap;
            vb_req_done(e, r);
        } else {
            e->stat_rndv++;
            x->token = r->token;
            x->mr = r->mr;
            x->own_mr = r->own_mr;
            x->req = r;
            r->own_mr = 0; /* the exposure owns it now */
            r->exp = x;
            x->next = p->exposed;
            p->exposed = x;
        }
    }
    if (vp_credit_due(&p->cr)) {
        vb_slot *s = vb_reserve(e, peer, VB_CREDIT);
        if (s) {
            vb_hdr h = vp_header(VB_CREDIT, vp_credit_grant(&p->cr), 0, 0, 0, 0);
            memcpy(s->buf, &h, sizeof h);
            e->stat_credit_msgs++;
            vb_post_slot(e, peer, s, sizeof h);
        }
    }
    vb_pump_reads(e, peer);
}

static plait_status check_peer(vb_comm *c, int peer, const char *op) {
    vb_engine *e = c->eng;
    if (peer < 0 || peer >= c->size || peer == c->rank)
        return e->host->set_error(PLAIT_ERR_INVALID_ARG,
                                  "verbs: %s peer %d: must be another rank of communicator %u (%d ranks)", op, peer,
                                  c->id, c->size);
    if (c->aborted)
        return e->host->set_error(PLAIT_ERR_PEER_LOST, "verbs: %s on communicator %u after abort: %s", op, c->id,
                                  c->abort_why);
    int w = c->world_of[peer];
    if (e->peers[w].lost) {
        char name[96];
        vb_peer_name(c, w, name, sizeof name);
        return e->host->set_error(e->peers[w].lost_status, "verbs: %s %s: %s", op, name, e->peers[w].lost_why);
    }
    return PLAIT_OK;
}

plait_status vb_check_buffer(vb_engine *e, const plait_buffer *b) {
    if (b->kind != PLAIT_MEM_HOST && b->kind != PLAIT_MEM_HOST_PINNED)
        return e->host->set_error(PLAIT_ERR_UNSUPPORTED,
                                  "verbs: sends and receives take host memory (buffer kind %d); device memory is "
                                  "staged through the host by the core", (int)b->kind);
    if (!b->ptr && b->bytes)
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "verbs: NULL buffer of %zu bytes", b->bytes);
    return PLAIT_OK;
}


plait_status vb_isend(vb_comm *c, const plait_buffer *buf, int peer, uint32_t tag, const vb_mr *umr, vb_req **out) {
    vb_engine *e = c->eng;
    *out = NULL;
    plait_status st = vb_check_buffer(e, buf);
    if (st != PLAIT_OK) return st;
    pthread_mutex_lock(&e->mu);
    st = check_peer(c, peer, "send to");
    vb_req *r = st == PLAIT_OK ? vb_req_new(e) : NULL;
    if (st == PLAIT_OK && !r) st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    int w = st == PLAIT_OK ? c->world_of[peer] : -1;
    vp_chan *ch = st == PLAIT_OK ? vp_chan_find(&e->chans, w, c->id, tag, 1) : NULL;
    if (st == PLAIT_OK && !ch) st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    if (st == PLAIT_OK) {
        r->kind = VB_REQ_SEND;
        r->comm = c;
        r->peer = w;
        r->comm_peer = peer;
        r->tag = tag;
        r->buf = buf->ptr;
        r->cap = buf->bytes;
        r->rndv = vp_protocol_for(buf->bytes, e->cfg.eager_max) == VB_RTS;
        if (r->rndv) {
            const vb_mr *m = vb_usable_mr(umr, buf->ptr, buf->bytes);
            int rc = 0;
            if (m) r->mr = *m;
            else if ((rc = e->fops->reg(e->fab, buf->ptr, buf->bytes, &r->mr)) == 0) r->own_mr = 1;
            if (rc != 0)
                st = e->host->set_error(PLAIT_ERR_SYSTEM,
                                        "verbs: cannot register the %zu-byte send buffer for rank %d: %s (is the "
                                        "locked-memory limit, ulimit -l, too low?)", buf->bytes, w, strerror(rc));
            r->token = ++e->next_token;
        }
    }
    if (st == PLAIT_OK) {
        r->seq = ch->send_seq++; /* only now: a failed send must not leave a hole in the sequence */
        vp_queue_push(&e->peers[w].sendq, &r->link);
        vb_flush_peer(e, w);
        *out = r;
    } else if (r) {
        vb_req_release(e, r);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- user registrations -------------------------------------------------------- */

typedef struct vb_user_mr {
    vb_mr mr; /* first: the handle given to the core points here */
    char *addr;
    size_t len;
} vb_user_mr;

const vb_mr *vb_usable_mr(const vb_mr *mr, const void *p, size_t len) {
    const vb_user_mr *u = (const vb_user_mr *)mr;
    if (!u || !u->mr.handle) return NULL;
    if ((const char *)p < u->addr || len > u->len || (size_t)((const char *)p - u->addr) > u->len - len) return NULL;
    return &u->mr;
}

plait_status vb_reg(vb_engine *e, const plait_buffer *buf, vb_mr **out) {
    *out = NULL;
    vb_user_mr *u = calloc(1, sizeof *u);
    if (!u) return e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    pthread_mutex_lock(&e->mu);
    int rc = buf->bytes ? e->fops->reg(e->fab, buf->ptr, buf->bytes, &u->mr) : EINVAL;
    pthread_mutex_unlock(&e->mu);
    if (rc != 0) {
        free(u);
        if (buf->kind == PLAIT_MEM_CUDA)
            return e->host->set_error(PLAIT_ERR_UNSUPPORTED,
                                      "verbs: cannot register %zu bytes of CUDA device memory: %s (GPUDirect RDMA "
                                      "needs the nvidia-peermem module or dma-buf support)",
                                      buf->bytes, strerror(rc));
        return e->host->set_error(PLAIT_ERR_SYSTEM,
                                  "verbs: cannot register %zu bytes: %s (is the locked-memory limit, ulimit -l, too "
                                  "low?)", buf->bytes, strerror(rc));
    }
    u->addr = buf->ptr;
    u->len = buf->bytes;
    *out = &u->mr;
    return PLAIT_OK;
}

void vb_dereg(vb_engine *e, vb_mr *mr) {
    if (!mr) return;
    pthread_mutex_lock(&e->mu);
    e->fops->dereg(e->fab, mr);
    pthread_mutex_unlock(&e->mu);
    free((vb_user_mr *)mr);
}

/* ---- completions --------------------------------------------------------------- */

static void on_cqe(vb_engine *e, const vb_cqe *c) {
    int kind = VB_WR_KIND(c->wr_id);
    void *ptr = VB_WR_PTR(c->wr_id);
    if (kind == VB_WR_TX) {
        vb_slot *s = ptr;
        tx_put(e, s);
        if (e->send_outstanding > 0) e->send_outstanding--;
        if (c->peer >= 0 && c->peer < e->size) {
            vb_peer *p = &e->peers[c->peer];
            if (p->sq_used > 0) p->sq_used--;
            if (!c->ok && !p->lost && !e->stopping) {
                char why[256];
                snprintf(why, sizeof why, "a send to rank %d failed: %s (vendor error 0x%x); the process probably "
                                          "died or the link went down", c->peer, c->status, c->vendor_err);
                vb_fail_peer(e, c->peer, PLAIT_ERR_PEER_LOST, why);
            }
        }
    } else if (kind == VB_WR_RX) {
        vb_slot *s = ptr;
        e->rx_posted--;
        if (c->ok && c->peer >= 0 && c->peer < e->size && !e->stopping)
            vb_on_message(e, c->peer, s->buf, c->byte_len);
        else if (!c->ok && !e->stopping)
            e->host->log(PLAIT_LOG_WARN, VB_COMPONENT, "a receive buffer completed with an error: %s (vendor error 0x%x)",
                         c->status, c->vendor_err);
        if (!e->stopping) {
            int rc = rx_post(e, s);
            if (rc != 0)
                e->host->log(PLAIT_LOG_ERROR, VB_COMPONENT, "cannot repost a receive buffer: %s (%d left)",
                             strerror(rc), e->rx_posted);
        }
    } else if (kind == VB_WR_READ) {
        vb_req *r = ptr;
        vb_peer *p = &e->peers[r->peer];
        if (p->sq_used > 0) p->sq_used--;
        if (e->send_outstanding > 0) e->send_outstanding--;
        vb_on_read_done(e, r, c);
    }
}

int vb_progress(vb_engine *e) {
    vb_cqe cq[32];
    int total = 0, n;
    do {
        n = e->fops->poll(e->fab, cq, 32);
        for (int i = 0; i < n; i++) on_cqe(e, &cq[i]);
        total += n > 0 ? n : 0;
    } while (n == 32);
    if (total) {
        /* slots, send-queue room or credits came back, FINs were queued:
         * whatever waited for them goes now */
        vb_flush_all(e);
        if (e->waiting) pthread_cond_broadcast(&e->cv);
    }
    return total;
}
