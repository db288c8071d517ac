/*
 * The verbs engine's failures (a peer lost, garbage, a READ that cannot
 * finish), abort of a communicator, and test/wait. See verbs.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "verbs.h"

/* ---- failures --------------------------------------------------------------------- */

void vb_protocol_error(vb_engine *e, int peer, const char *fmt, ...) {
    char what[256], where[128] = "", why[448];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    if (e->fops->describe_peer) e->fops->describe_peer(e->fab, peer, where, sizeof where);
    snprintf(why, sizeof why, "garbage from rank %d (%s): %s; closed the connection", peer, where, what);
    vb_fail_peer(e, peer, PLAIT_ERR_PROTOCOL, why);
}

typedef struct fail_ctx {
    vb_engine *e;
    int peer;
    plait_status st;
    const char *why;
} fail_ctx;

static void fail_chan(vp_chan *ch, void *ctx) {
    fail_ctx *f = ctx;
    if (ch->peer != f->peer) return;
    for (vp_link *x; (x = vp_queue_pop(&ch->posted));) {
        vb_req *r = (vb_req *)x;
        char name[96];
        vb_peer_name(r->comm, f->peer, name, sizeof name);
        vb_req_fail(f->e, r, f->st, "verbs: receive (tag %u, up to %zu bytes) from %s failed: %s", r->tag, r->cap,
                    name, f->why);
    }
    for (vp_link *x; (x = vp_queue_pop(&ch->unexpected));) vb_msg_free((vb_msg *)x);
}

/* A rendezvous receive whose peer or communicator went away: report it now
 * if no READ is in flight, else once they drained (the HCA may still write
 * into the buffer until then). */
void vb_fail_reading(vb_engine *e, vb_req *r, plait_status st, const char *why) {
    char name[96];
    vb_peer_name(r->comm, r->peer, name, sizeof name);
    if (!r->fail_after) {
        r->fail_after = st;
        snprintf(r->err, sizeof r->err, "verbs: receive of %llu bytes (tag %u) from %s failed after %llu bytes: %s",
                 (unsigned long long)r->msg_len, r->tag, name, (unsigned long long)r->read_done, why);
    }
    if (r->reads_inflight == 0) {
        vp_queue_remove(&e->peers[r->peer].readq, &r->link);
        r->reading = 0;
        if (r->own_mr) e->fops->dereg(e->fab, &r->mr);
        r->own_mr = 0;
        r->status = r->fail_after;
        vb_req_done(e, r);
        /* the sender keeps its buffer registered until told */
        vb_queue_ctrl(e, r->peer, r->comm->id, r->rtoken, VB_FIN_ABORTED);
    }
}

void vb_fail_peer(vb_engine *e, int p, plait_status st, const char *why) { vb_lose_peer(e, p, st, why, 1); }

void vb_lose_peer(vb_engine *e, int p, plait_status st, const char *why, int kill) {
    vb_peer *peer = &e->peers[p];
    if (peer->lost || p == e->rank) return;
    peer->lost = 1;
    peer->lost_status = st;
    snprintf(peer->lost_why, sizeof peer->lost_why, "%s", why);
    if (kill) e->fops->kill_peer(e->fab, p);
    int had = 0;
    for (vp_link *x; (x = vp_queue_pop(&peer->sendq));) {
        vb_req *r = (vb_req *)x;
        char name[96];
        vb_peer_name(r->comm, p, name, sizeof name);
        if (r->own_mr) e->fops->dereg(e->fab, &r->mr);
        r->own_mr = 0;
        vb_req_fail(e, r, st, "verbs: send of %zu bytes (tag %u) to %s failed: %s", r->cap, r->tag, name, why);
        had = 1;
    }
    for (vb_ctrl *k = peer->ctrl, *nx; k; k = nx) {
        nx = k->next;
        free(k);
    }
    peer->ctrl = peer->ctrl_tail = NULL;
    for (vb_exposed *x = peer->exposed, *nx; x; x = nx) {
        nx = x->next;
        if (x->own_mr) e->fops->dereg(e->fab, &x->mr); /* a peer still reading gets an access error */
        if (x->req) {
            vb_req *r = x->req;
            char name[96];
            vb_peer_name(r->comm, p, name, sizeof name);
            r->exp = NULL;
            vb_req_fail(e, r, st, "verbs: send of %zu bytes (tag %u) to %s failed: %s", r->cap, r->tag, name, why);
            had = 1;
        }
        free(x);
    }
    peer->exposed = NULL;
    for (vp_link *x = peer->readq.head, *nx; x; x = nx) {
        nx = x->next;
        vb_fail_reading(e, (vb_req *)x, st, why);
        had = 1;
    }
    fail_ctx f = {e, p, st, why};
    vp_table_each(&e->chans, fail_chan, &f);
    /* an abort says why itself; a real loss with work pending is news */
    e->host->log(had && kill ? PLAIT_LOG_ERROR : PLAIT_LOG_DEBUG, VB_COMPONENT, "lost rank %d: %s", p, why);
    if (e->waiting) pthread_cond_broadcast(&e->cv);
}

/* ---- abort -------------------------------------------------------------------------- */

typedef struct abort_ctx {
    vb_engine *e;
    vb_comm *c;
    const char *why;
} abort_ctx;

static void abort_chan(vp_chan *ch, void *ctx) {
    abort_ctx *a = ctx;
    if (ch->comm_id != a->c->id) return;
    for (vp_link *x; (x = vp_queue_pop(&ch->posted));) {
        vb_req *r = (vb_req *)x;
        vb_req_fail(a->e, r, PLAIT_ERR_PEER_LOST, "verbs: receive from rank %d: %s", r->comm_peer, a->why);
    }
    for (vp_link *x; (x = vp_queue_pop(&ch->unexpected));) {
        vb_msg *m = (vb_msg *)x;
        if (m->type == VB_RTS) vb_queue_ctrl(a->e, ch->peer, ch->comm_id, m->rtoken, VB_FIN_ABORTED);
        vb_msg_free(m);
    }
}

/* Best effort, never blocking: tell `p` why we go down. */
static void send_abort_notice(vb_engine *e, int p, const char *reason) {
    vb_peer *peer = &e->peers[p];
    if (peer->lost) return;
    vb_slot *s = vb_reserve(e, p, VB_ABORT);
    if (!s) return;
    size_t n = strlen(reason);
    if (n > VB_ABORT_MAX) n = VB_ABORT_MAX;
    vb_hdr h = vp_header(VB_ABORT, vp_credit_grant(&peer->cr), 0, 0, 0, n);
    memcpy(s->buf, &h, sizeof h);
    memcpy(s->buf + sizeof h, reason, n);
    vb_post_slot(e, p, s, sizeof h + n);
}

void vb_abort(vb_comm *c, const char *reason) {
    vb_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    if (!c->aborted) {
        c->aborted = 1;
        snprintf(c->abort_why, sizeof c->abort_why, "%s", reason ? reason : "aborted");
        char why[448];
        snprintf(why, sizeof why, "communicator %u aborted: %s", c->id, c->abort_why);
        if (c->is_world) {
            for (int p = 0; p < e->size; p++)
                if (p != e->rank) send_abort_notice(e, p, c->abort_why);
            /* the connections stay up until the engine is freed, so the
             * notices go out and READs in flight drain */
            for (int p = 0; p < e->size; p++)
                if (p != e->rank) vb_lose_peer(e, p, PLAIT_ERR_PEER_LOST, why, 0);
        } else {
            for (int p = 0; p < e->size; p++) {
                vb_peer *peer = &e->peers[p];
                if (p == e->rank || peer->lost) continue;
                /* sends not yet on the wire: never will be */
                for (vp_link **pp = &peer->sendq.head; *pp;) {
                    vb_req *r = (vb_req *)*pp;
                    if (r->comm != c) {
                        pp = &(*pp)->next;
                        continue;
                    }
                    vp_queue_remove(&peer->sendq, &r->link);
                    if (r->own_mr) e->fops->dereg(e->fab, &r->mr);
                    r->own_mr = 0;
                    vb_req_fail(e, r, PLAIT_ERR_PEER_LOST, "verbs: send to rank %d: %s", r->comm_peer, why);
                }
                /* announced sends: fail them, but keep the buffer registered
                 * until the peer's FIN (it may be reading) */
                for (vb_exposed *x = peer->exposed; x; x = x->next)
                    if (x->req && x->req->comm == c) {
                        vb_req *r = x->req;
                        x->req = NULL;
                        r->exp = NULL;
                        vb_req_fail(e, r, PLAIT_ERR_PEER_LOST, "verbs: send to rank %d: %s", r->comm_peer, why);
                    }
                for (vp_link *x = peer->readq.head, *nx; x; x = nx) {
                    nx = x->next;
                    vb_req *r = (vb_req *)x;
                    if (r->comm == c) vb_fail_reading(e, r, PLAIT_ERR_PEER_LOST, why);
                }
            }
            abort_ctx a = {e, c, why};
            vp_table_each(&e->chans, abort_chan, &a);
            vb_flush_all(e);
        }
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

/* ---- test / wait ---------------------------------------------------------------------- */

static plait_status finish(vb_engine *e, vb_req *r, size_t *bytes) {
    plait_status st = r->status;
    if (bytes) *bytes = r->len;
    if (st != PLAIT_OK) e->host->set_error(st, "%s", r->err);
    vb_req_release(e, r);
    return st;
}

plait_status vb_test(vb_comm *c, vb_req *r, int *done, size_t *bytes) {
    vb_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    if (!r->done) vb_progress(e);
    *done = r->done;
    plait_status st = r->done ? finish(e, r, bytes) : PLAIT_OK;
    pthread_mutex_unlock(&e->mu);
    return st;
}

plait_status vb_wait(vb_comm *c, vb_req *r, double timeout_s, size_t *bytes) {
    vb_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    double deadline = plait_deadline(e->host, timeout_s);
    while (!r->done) {
        vb_progress(e);
        if (r->done || e->host->now() >= deadline) break;
        struct timespec ts;
        plait_deadline_timespec(deadline, &ts);
        e->waiting++;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        e->waiting--;
    }
    plait_status st;
    if (!r->done) {
        char name[96];
        vb_peer_name(c, r->peer, name, sizeof name);
        const char *state = r->kind == VB_REQ_SEND
                                ? (r->exp ? "announced, waiting for the receiver to read it"
                                          : "waiting for flow-control credit or send-queue room")
                                : (r->reading ? "reading the data" : "no message yet");
        st = plait_req_timeout(e->host, "verbs", r->kind == VB_REQ_SEND, name, r->tag, r->cap, timeout_s, state);
    } else {
        st = finish(e, r, bytes);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}
