/*
 * The verbs engine's receive path: posting receives, handling arrived
 * messages (eager data, RTS, FIN, CREDIT, ABORT), and the rendezvous READs.
 * Everything here runs with the engine's mutex held. See verbs.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"

void vb_msg_free(vb_msg *m) {
    if (!m) return;
    free(m->data);
    free(m);
}

static void too_long(vb_engine *e, vb_req *r, uint64_t len) {
    char name[96];
    vb_peer_name(r->comm, r->peer, name, sizeof name);
    vb_req_fail(e, r, PLAIT_ERR_PROTOCOL,
                "verbs: message of %llu bytes (tag %u) from %s is longer than the receive buffer of %zu bytes",
                (unsigned long long)len, r->tag, name, r->cap);
}

/* A message matched receive `r`: eager data is copied, an RTS starts the
 * READs. */
static void deliver(vb_engine *e, vb_req *r, const vb_msg *m, const char *data) {
    if (m->type == VB_EAGER) {
        if (m->len > r->cap) {
            too_long(e, r, m->len);
            return;
        }
        if (m->len) memcpy(r->buf, data, (size_t)m->len);
        r->len = (size_t)m->len;
        vb_req_done(e, r);
        return;
    }
    r->msg_len = m->len;
    r->raddr = m->raddr;
    r->rkey = m->rkey;
    r->rtoken = m->rtoken;
    vb_start_read(e, r);
}

void vb_start_read(vb_engine *e, vb_req *r) {
    if (r->msg_len > r->cap) {
        too_long(e, r, r->msg_len);
        vb_queue_ctrl(e, r->peer, r->comm->id, r->rtoken, VB_FIN_REFUSED);
        return;
    }
    if (!r->mr.handle) {
        int rc = e->fops->reg(e->fab, r->buf, (size_t)r->msg_len, &r->mr);
        if (rc != 0) {
            char name[96];
            vb_peer_name(r->comm, r->peer, name, sizeof name);
            vb_req_fail(e, r, PLAIT_ERR_SYSTEM,
                        "verbs: cannot register the %llu-byte receive buffer for a message from %s: %s (is the "
                        "locked-memory limit, ulimit -l, too low?)",
                        (unsigned long long)r->msg_len, name, strerror(rc));
            vb_queue_ctrl(e, r->peer, r->comm->id, r->rtoken, VB_FIN_READ_FAILED);
            return;
        }
        r->own_mr = 1;
    }
    r->reading = 1;
    vp_queue_push(&e->peers[r->peer].readq, &r->link);
    vb_pump_reads(e, r->peer);
}

void vb_pump_reads(vb_engine *e, int peer) {
    vb_peer *p = &e->peers[peer];
    if (p->lost) return;
    for (vp_link *x = p->readq.head; x; x = x->next) {
        vb_req *r = (vb_req *)x;
        while (r->read_posted < r->msg_len && !r->fail_after) {
            if (!vb_send_room(e, peer)) return;
            uint64_t n = r->msg_len - r->read_posted;
            if (n > e->cfg.max_read) n = e->cfg.max_read;
            int rc = e->fops->post_read(e->fab, peer, VB_WR(r, VB_WR_READ), r->buf + r->read_posted, r->mr.lkey,
                                        r->raddr + r->read_posted, r->rkey, (uint32_t)n);
            if (rc != 0) {
                char why[192];
                snprintf(why, sizeof why, "posting an RDMA READ from rank %d failed: %s", peer, strerror(rc));
                vb_fail_peer(e, peer, PLAIT_ERR_SYSTEM, why);
                return;
            }
            p->sq_used++;
            e->send_outstanding++;
            r->reads_inflight++;
            r->read_posted += n;
        }
    }
}

void vb_on_read_done(vb_engine *e, vb_req *r, const vb_cqe *c) {
    r->reads_inflight--;
    if (!c->ok) {
        char why[256];
        snprintf(why, sizeof why, "an RDMA READ from rank %d failed: %s (vendor error 0x%x)", r->peer, c->status,
                 c->vendor_err);
        vb_fail_reading(e, r, PLAIT_ERR_PEER_LOST, why); /* reported once every READ is back */
        if (!e->peers[r->peer].lost && !e->stopping) vb_fail_peer(e, r->peer, PLAIT_ERR_PEER_LOST, why);
        return;
    }
    if (!r->fail_after) {
        uint64_t n = r->msg_len - r->read_done;
        r->read_done += n < e->cfg.max_read ? n : e->cfg.max_read; /* READs on one QP complete in order */
    }
    if (r->fail_after) {
        vb_fail_reading(e, r, r->fail_after, "");
        return;
    }
    if (r->reads_inflight == 0 && r->read_posted == r->msg_len) {
        vp_queue_remove(&e->peers[r->peer].readq, &r->link);
        r->reading = 0;
        if (r->own_mr) e->fops->dereg(e->fab, &r->mr);
        r->own_mr = 0;
        r->len = (size_t)r->msg_len;
        vb_req_done(e, r);
        vb_queue_ctrl(e, r->peer, r->comm->id, r->rtoken, VB_FIN_OK);
    }
}

plait_status vb_irecv(vb_comm *c, const plait_buffer *buf, int peer, uint32_t tag, const vb_mr *umr, vb_req **out) {
    vb_engine *e = c->eng;
    *out = NULL;
    plait_status st = vb_check_buffer(e, buf);
    if (st != PLAIT_OK) return st;
    pthread_mutex_lock(&e->mu);
    if (peer < 0 || peer >= c->size || peer == c->rank) {
        st = e->host->set_error(PLAIT_ERR_INVALID_ARG,
                                "verbs: receive from peer %d: must be another rank of communicator %u (%d ranks)", peer,
                                c->id, c->size);
    } else if (c->aborted) {
        st = e->host->set_error(PLAIT_ERR_PEER_LOST, "verbs: receive on communicator %u after abort: %s", c->id,
                                c->abort_why);
    } else if (e->peers[c->world_of[peer]].lost) {
        char name[96];
        int w = c->world_of[peer];
        vb_peer_name(c, w, name, sizeof name);
        st = e->host->set_error(e->peers[w].lost_status, "verbs: receive from %s: %s", name, e->peers[w].lost_why);
    }
    int w = st == PLAIT_OK ? c->world_of[peer] : -1;
    vp_chan *ch = st == PLAIT_OK ? vp_chan_find(&e->chans, w, c->id, tag, 1) : NULL;
    vb_req *r = NULL;
    if (st == PLAIT_OK && (!ch || !(r = vb_req_new(e))))
        st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    if (st == PLAIT_OK) {
        r->kind = VB_REQ_RECV;
        r->comm = c;
        r->peer = w;
        r->comm_peer = peer;
        r->tag = tag;
        r->buf = buf->ptr;
        r->cap = buf->bytes;
        const vb_mr *m = vb_usable_mr(umr, buf->ptr, buf->bytes);
        if (m) r->mr = *m; /* not ours to deregister */
        vp_link *got = vp_post_recv(ch, &r->link);
        if (got) {
            vb_msg *msg = (vb_msg *)got;
            deliver(e, r, msg, msg->data);
            vb_msg_free(msg);
        }
        *out = r;
        vb_flush_peer(e, w);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- arrived messages --------------------------------------------------------- */

static void on_fin(vb_engine *e, int p, const vb_fin *f) {
    vb_peer *peer = &e->peers[p];
    for (vb_exposed **xp = &peer->exposed; *xp; xp = &(*xp)->next) {
        vb_exposed *x = *xp;
        if (x->token != f->token) continue;
        *xp = x->next;
        if (x->own_mr) e->fops->dereg(e->fab, &x->mr);
        vb_req *r = x->req;
        free(x);
        if (!r) return; /* failed by an abort already */
        r->exp = NULL;
        char name[96];
        vb_peer_name(r->comm, p, name, sizeof name);
        switch (f->status) {
        case VB_FIN_OK:
        case VB_FIN_REFUSED: /* the receive failed; the send's part is done */
            r->len = r->cap;
            vb_req_done(e, r);
            break;
        case VB_FIN_ABORTED:
            vb_req_fail(e, r, PLAIT_ERR_PEER_LOST,
                        "verbs: send of %zu bytes (tag %u) to %s failed: it aborted its communicator before receiving it",
                        r->cap, r->tag, name);
            break;
        default:
            vb_req_fail(e, r, PLAIT_ERR_SYSTEM,
                        "verbs: send of %zu bytes (tag %u) to %s failed: the receiver could not read it (FIN status %u)",
                        r->cap, r->tag, name, f->status);
            break;
        }
        return;
    }
    vb_protocol_error(e, p, "FIN for unknown message %llu", (unsigned long long)f->token);
}

static void on_data(vb_engine *e, int p, const vb_hdr *h, int type, const char *payload) {
    vb_comm *c = vb_comm_by_id(e, h->comm_id);
    if (!c) {
        vb_protocol_error(e, p, "message for unknown communicator %u", h->comm_id);
        return;
    }
    vb_rts rts;
    memset(&rts, 0, sizeof rts);
    if (type == VB_RTS) memcpy(&rts, payload, sizeof rts);
    if (c->aborted) { /* nobody will receive it; an RTS's sender waits for word */
        if (type == VB_RTS) vb_queue_ctrl(e, p, h->comm_id, rts.token, VB_FIN_ABORTED);
        return;
    }
    vp_chan *ch = vp_chan_find(&e->chans, p, h->comm_id, h->tag, 1);
    if (!ch) {
        vb_fail_peer(e, p, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
        return;
    }
    vb_msg local, *m = &local;
    int matches = ch->posted.head && h->seq == ch->recv_seq;
    if (!matches && !(m = calloc(1, sizeof *m))) {
        vb_fail_peer(e, p, PLAIT_ERR_NO_MEMORY, "out of memory holding an unexpected message");
        return;
    }
    memset(m, 0, sizeof *m);
    m->type = type;
    m->seq = h->seq;
    m->len = h->len;
    m->raddr = rts.addr;
    m->rtoken = rts.token;
    m->rkey = rts.rkey;
    if (!matches && type == VB_EAGER && h->len) {
        m->data = malloc((size_t)h->len);
        if (!m->data) {
            free(m);
            vb_fail_peer(e, p, PLAIT_ERR_NO_MEMORY, "out of memory holding an unexpected message");
            return;
        }
        memcpy(m->data, payload, (size_t)h->len);
    }
    vp_link *recv = NULL;
    if (vp_arrive(ch, h->seq, &m->link, &recv) != 0) {
        uint32_t want = ch->recv_seq;
        if (m != &local) vb_msg_free(m);
        vb_protocol_error(e, p, "message %u of tag %u on communicator %u arrived out of order (expected %u)", h->seq,
                          h->tag, h->comm_id, want);
        return;
    }
    if (recv) {
        deliver(e, (vb_req *)recv, m, payload);
        if (m != &local) vb_msg_free(m);
    } else {
        e->stat_unexpected++;
    }
}

void vb_on_message(vb_engine *e, int p, const char *wire, size_t len) {
    char why[192];
    int type = vp_check(wire, len, e->cfg.eager_max, e->cfg.max_message, why, sizeof why);
    if (type < 0) {
        vb_protocol_error(e, p, "%s", why);
        return;
    }
    vb_hdr h;
    memcpy(&h, wire, sizeof h);
    vb_peer *peer = &e->peers[p];
    vp_credit_received(&peer->cr, type, h.grant);
    if (peer->lost) return;
    const char *payload = wire + sizeof h;
    switch (type) {
    case VB_CREDIT: return;
    case VB_ABORT: {
        char text[VB_ABORT_MAX + 1], msg[VB_ABORT_MAX + 64];
        memcpy(text, payload, (size_t)h.len);
        text[h.len] = '\0';
        snprintf(msg, sizeof msg, "rank %d is going down: %s", p, text);
        vb_fail_peer(e, p, PLAIT_ERR_PEER_LOST, msg);
        return;
    }
    case VB_FIN: {
        vb_fin f;
        memcpy(&f, payload, sizeof f);
        on_fin(e, p, &f);
        return;
    }
    default: on_data(e, p, &h, type, payload); return;
    }
}
