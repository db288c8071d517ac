/*
 * The TCP plugin's shared state: requests, channels (per peer, communicator
 * and tag), and failing a peer or its operations. See tcp.h.
 */
#include <errno.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "tcp.h"

/* ---- small helpers ------------------------------------------------------ */


/* "rank 3" or "rank 1 of communicator 7 (world rank 3)". */
void tcp_peer_name(const tcp_comm *c, int world_peer, char *buf, size_t cap) {
    plait_comm_peer_name(!c || c->is_world, c ? c->world_of : NULL, c ? c->size : 0, c ? c->id : 0, world_peer, buf,
                         cap);
}

void tcp_req_fail(tcp_engine *e, tcp_req *r, plait_status st, const char *fmt, ...) PLAIT_PRINTF(4, 5);

void tcp_wake(int fd) {
    uint64_t one = 1;
    ssize_t w = write(fd, &one, sizeof one);
    (void)w;
}

/* A request finished: wake whoever may be waiting for it — callers on cv,
 * and the polling caller if it sleeps in epoll_wait (the progress thread or
 * another caller may have drained the socket it was watching). */
void tcp_req_done(tcp_engine *e, tcp_req *r) {
    if (r->done) return;
    r->done = 1;
    if (e->waiting) pthread_cond_broadcast(&e->cv);
    if (e->caller_polling && !e->caller_handling && !e->cwake_pending) {
        e->cwake_pending = 1;
        tcp_wake(e->cwake_fd);
    }
}

void tcp_req_fail(tcp_engine *e, tcp_req *r, plait_status st, const char *fmt, ...) {
    if (r->done) return;
    va_list ap;
    va_start(ap, fmt);
    plait_req_vfail(&r->status, r->err, sizeof r->err, st, fmt, ap);
    va_end(ap);
    tcp_req_done(e, r);
}

tcp_req *tcp_req_new(tcp_engine *e) {
    tcp_req *r = e->free_reqs;
    if (r) e->free_reqs = r->next;
    else r = malloc(sizeof *r);
    if (!r) return NULL;
    memset(r, 0, offsetof(tcp_req, one));
    return r;
}

void tcp_req_release(tcp_engine *e, tcp_req *r) {
    if (r->chunks && r->chunks != &r->one) free(r->chunks);
    r->chunks = NULL;
    r->next = e->free_reqs;
    e->free_reqs = r;
}

/* Large transfers outstanding that should move while nobody waits. */
/* Only queued sends need the progress thread: the peer's data keeps flowing
 * into our kernel receive buffer (autotuned, megabytes) whether or not we
 * read it, and the caller copies it out in wait() at the same cost the
 * thread would; a send, in contrast, stops as soon as the socket is full. */
int tcp_async_work(const tcp_engine *e) { return e->tx_pending > 0; }

/* Hand asynchronous progress to the progress thread if it is needed and no
 * caller is polling. Called with mu held when a caller leaves. */
void tcp_maybe_kick(tcp_engine *e) {
    if (e->has_thread && e->pt_sleeping && !e->caller_polling && e->waiting == 0 && tcp_async_work(e))
        pthread_cond_signal(&e->pcv);
}

/* ---- channels ----------------------------------------------------------- */

static size_t chan_hash(int peer, uint32_t comm, uint32_t tag) {
    uint64_t h = ((uint64_t)(uint32_t)peer * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)comm << 32 | tag);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h ^ (h >> 32));
}

tcp_chan *tcp_chan_find(tcp_engine *e, int peer, uint32_t comm, uint32_t tag, int create) {
    size_t b = chan_hash(peer, comm, tag) & (e->n_chan_buckets - 1);
    for (tcp_chan *c = e->chans[b]; c; c = c->hnext)
        if (c->peer == peer && c->comm_id == comm && c->tag == tag) return c;
    if (!create) return NULL;
    if (e->n_chans >= e->n_chan_buckets) {
        size_t nb = e->n_chan_buckets * 2;
        tcp_chan **t = calloc(nb, sizeof *t);
        if (t) {
            for (size_t i = 0; i < e->n_chan_buckets; i++)
                for (tcp_chan *c = e->chans[i], *nx; c; c = nx) {
                    nx = c->hnext;
                    size_t k = chan_hash(c->peer, c->comm_id, c->tag) & (nb - 1);
                    c->hnext = t[k];
                    t[k] = c;
                }
            free(e->chans);
            e->chans = t;
            e->n_chan_buckets = nb;
            b = chan_hash(peer, comm, tag) & (nb - 1);
        }
    }
    tcp_chan *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->peer = peer;
    c->comm_id = comm;
    c->tag = tag;
    c->hnext = e->chans[b];
    e->chans[b] = c;
    e->n_chans++;
    return c;
}

void tcp_msg_unlink(tcp_chan *ch, tcp_inmsg *m) {
    for (tcp_inmsg **pp = &ch->msgs; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            return;
        }
}

/* Buffers of unexpected messages are kept for reuse (a few, large ones):
 * a fresh malloc of megabytes is an mmap whose every page faults again. */
#define UBUF_MIN (64u * 1024u)
#define UBUF_CACHE_BYTES (128u << 20)

void *tcp_ubuf_get(tcp_engine *e, size_t len, size_t *cap) {
    int best = -1;
    for (int i = 0; i < TCP_UBUF_SLOTS; i++)
        if (e->ubuf[i].ptr && e->ubuf[i].cap >= len && (best < 0 || e->ubuf[i].cap < e->ubuf[best].cap)) best = i;
    if (best >= 0) {
        void *p = e->ubuf[best].ptr;
        *cap = e->ubuf[best].cap;
        e->ubuf_bytes -= e->ubuf[best].cap;
        e->ubuf[best].ptr = NULL;
        return p;
    }
    *cap = len;
    return malloc(len ? len : 1);
}

void tcp_ubuf_put(tcp_engine *e, void *p, size_t cap) {
    if (!p) return;
    if (cap >= UBUF_MIN && cap <= UBUF_CACHE_BYTES) {
        int slot = -1;
        for (int i = 0; i < TCP_UBUF_SLOTS && slot < 0; i++)
            if (!e->ubuf[i].ptr) slot = i;
        if (slot < 0) { /* replace the smallest if this one is larger */
            slot = 0;
            for (int i = 1; i < TCP_UBUF_SLOTS; i++)
                if (e->ubuf[i].cap < e->ubuf[slot].cap) slot = i;
            if (e->ubuf[slot].cap >= cap) slot = -1;
        }
        while (slot >= 0 && e->ubuf_bytes + cap - (e->ubuf[slot].ptr ? e->ubuf[slot].cap : 0) > UBUF_CACHE_BYTES) {
            /* over budget: give back the biggest other buffer, or keep none */
            int big = -1;
            for (int i = 0; i < TCP_UBUF_SLOTS; i++)
                if (i != slot && e->ubuf[i].ptr && (big < 0 || e->ubuf[i].cap > e->ubuf[big].cap)) big = i;
            if (big < 0) {
                slot = -1;
                break;
            }
            free(e->ubuf[big].ptr);
            e->ubuf_bytes -= e->ubuf[big].cap;
            e->ubuf[big].ptr = NULL;
        }
        if (slot >= 0) {
            if (e->ubuf[slot].ptr) {
                free(e->ubuf[slot].ptr);
                e->ubuf_bytes -= e->ubuf[slot].cap;
            }
            e->ubuf[slot].ptr = p;
            e->ubuf[slot].cap = cap;
            e->ubuf_bytes += cap;
            return;
        }
    }
    free(p);
}

void tcp_msg_free(tcp_engine *e, tcp_inmsg *m) {
    if (m->owned) tcp_ubuf_put(e, m->buf, m->cap);
    free(m);
}

tcp_comm *tcp_comm_by_id(tcp_engine *e, uint32_t id) {
    for (tcp_comm *c = e->comms; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* ---- failures ----------------------------------------------------------- */

void tcp_conn_close(tcp_engine *e, tcp_conn *c) {
    if (c->fd < 0) return;
    epoll_ctl(e->ep, EPOLL_CTL_DEL, c->fd, NULL);
    epoll_ctl(e->cep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->tx_queued) e->tx_pending--;
    c->tx_queued = 0;
    c->txq = c->txq_tail = NULL;
    c->rx_msg = NULL;
}

/* Fail everything that involves world rank `p` and close its connections.
 * `why` says what happened ("connection reset by peer"). */
void tcp_fail_peer(tcp_engine *e, int p, plait_status st, const char *why) {
    tcp_peer *peer = &e->peers[p];
    if (peer->lost) return;
    peer->lost = 1;
    peer->lost_status = st;
    snprintf(peer->lost_why, sizeof peer->lost_why, "%s", why);
    /* sends */
    for (int s = 0; peer->conns && s < e->cfg.streams; s++) {
        tcp_conn *c = &peer->conns[s];
        for (tcp_chunk *k = c->txq, *next; k; k = next) {
            next = k->next;
            if (k->req->kind == TCP_CTRL) {
                tcp_req_release(e, k->req); /* an internal frame nobody waits for */
            } else if (!k->req->done) {
                char name[96];
                tcp_peer_name(k->req->comm, p, name, sizeof name);
                tcp_req_fail(e, k->req, st, "tcp: send of %zu bytes (tag %u) to %s failed: %s", k->req->cap,
                         k->req->tag, name, why);
            }
        }
        tcp_conn_close(e, c);
    }
    /* sends announced for a direct read the peer will never do */
    for (tcp_req *r = peer->awaiting, *next; r; r = next) {
        next = r->anext;
        r->anext = NULL;
        if (!r->done) {
            char name[96];
            tcp_peer_name(r->comm, p, name, sizeof name);
            tcp_req_fail(e, r, st, "tcp: send of %zu bytes (tag %u) to %s failed: %s", r->cap, r->tag, name, why);
        }
    }
    peer->awaiting = NULL;
    /* receives and buffered messages */
    for (size_t b = 0; b < e->n_chan_buckets; b++)
        for (tcp_chan *ch = e->chans[b]; ch; ch = ch->hnext) {
            if (ch->peer != p) continue;
            for (tcp_req *r = ch->posted; r; r = r->next) {
                char name[96];
                tcp_peer_name(r->comm, p, name, sizeof name);
                tcp_req_fail(e, r, st, "tcp: receive (tag %u, up to %zu bytes) from %s failed: %s", r->tag, r->cap,
                         name, why);
            }
            ch->posted = ch->posted_tail = NULL;
            for (tcp_inmsg *m = ch->msgs, *nx; m; m = nx) {
                nx = m->next;
                if (m->req && m->got < m->len) {
                    char name[96];
                    tcp_peer_name(m->req->comm, p, name, sizeof name);
                    tcp_req_fail(e, m->req, st, "tcp: receive of %llu bytes (tag %u) from %s failed after %llu bytes: %s",
                             (unsigned long long)m->len, m->req->tag, name, (unsigned long long)m->got, why);
                    m->req->msg = NULL;
                        tcp_msg_unlink(ch, m);
                    tcp_msg_free(e, m);
                } else if (m->got < m->len) { /* partial unexpected message: useless now */
                    tcp_msg_unlink(ch, m);
                    tcp_msg_free(e, m);
                }
            }
        }
    /* A pending operation fails with this reason in its error, which its
     * caller reports: said again here only for debugging. */
    e->host->log(PLAIT_LOG_DEBUG, TCP_COMPONENT, "lost rank %d (%s): %s", p, peer->addr, why);
}

void tcp_protocol_error(tcp_engine *e, tcp_conn *c, const char *fmt, ...) PLAIT_PRINTF(3, 4);
void tcp_protocol_error(tcp_engine *e, tcp_conn *c, const char *fmt, ...) {
    char what[256], why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "garbage from rank %d (stream %d, %s): %s; closed the connection", c->peer,
             c->stream, e->peers[c->peer].addr, what);
    tcp_fail_peer(e, c->peer, PLAIT_ERR_PROTOCOL, why);
}

/* Read budgets spent on a failing peer's stream looking for its ABORT frame,
 * and how deep such readings may nest (a frame read in one, an RTS, can find
 * its sender gone and read on: the ABORT may follow it). */
#define LAST_WORDS_ROUNDS 8
#define LAST_WORDS_NESTED 2

int tcp_read_last_words(tcp_engine *e, int p, int nested) {
    /* A peer going down first says why (an ABORT frame: "lost rank 2 in
     * allreduce #5"), after the rest of a chunk in flight on one of its
     * streams. A failed send, the end of another stream, or its process
     * found gone can reach us before we read it; reading what its streams
     * still hold first makes the loss carry the cause instead of "broken
     * pipe". The frame may follow more than one read budget of data, so a
     * stream is read until it is drained (at most LAST_WORDS_ROUNDS budgets:
     * a peer that keeps sending is not going down). Errors met while
     * reading are left to the caller's report. */
    if (e->reading_last_words > (nested ? LAST_WORDS_NESTED : 0)) return -1;
    tcp_peer *peer = &e->peers[p];
    e->reading_last_words++;
    for (int s = 0; peer->conns && s < e->cfg.streams && !peer->lost; s++) {
        tcp_conn *c = &peer->conns[s];
        if (c->ended) continue; /* it sends nothing more there */
        for (int round = 0; round < LAST_WORDS_ROUNDS && c->fd >= 0 && !peer->lost; round++)
            if (!tcp_conn_read(e, c)) break;
    }
    e->reading_last_words--;
    return 0;
}

/* The orderly end of stream `c`: 1 when it is marked ended and another
 * stream of its peer is still open. A rank that finished sends its last
 * messages and closes its streams one after the other; the end of one can
 * arrive while a message of megabytes is still in the sender's kernel or
 * on the wire on another, so the peer is not lost until its last stream
 * ends. An end in the middle of a frame cuts a message short: no. */
static int end_stream(tcp_engine *e, tcp_conn *c) {
    if (c->rx_payload || c->rx_pos < c->rx_len) return 0;
    c->ended = 1;
    tcp_set_events(e, c, c->events); /* an ended stream reads as ready for ever: stop polling its input */
    const tcp_peer *peer = &e->peers[c->peer];
    for (int s = 0; s < e->cfg.streams; s++)
        if (peer->conns[s].fd >= 0 && !peer->conns[s].ended) return 1;
    return 0;
}

const char *tcp_ended_note(const tcp_engine *e, int p, char *buf, size_t cap) {
    const tcp_peer *peer = &e->peers[p];
    int ended = 0, first = -1;
    for (int s = 0; peer->conns && !peer->lost && s < e->cfg.streams; s++)
        if (peer->conns[s].ended && ended++ == 0) first = s;
    if (!ended) return NULL;
    snprintf(buf, cap, "rank %d closed stream %d (%d of its %d streams ended) and keeps the others open", p, first,
             ended, e->cfg.streams);
    return buf;
}

void tcp_io_error(tcp_engine *e, tcp_conn *c, int err) {
    if (err == 0 && end_stream(e, c)) return;
    if (tcp_read_last_words(e, c->peer, 0) != 0) return; /* the outer reading reports */
    char why[256];
    if (err == 0)
        snprintf(why, sizeof why, "rank %d closed the connection (stream %d, %s); the process probably exited or "
                                  "died", c->peer, c->stream, e->peers[c->peer].addr);
    else
        snprintf(why, sizeof why, "connection to rank %d (stream %d, %s) failed: %s; the process probably died",
                 c->peer, c->stream, e->peers[c->peer].addr, strerror(err));
    tcp_fail_peer(e, c->peer, PLAIT_ERR_PEER_LOST, why);
}

void tcp_set_events(tcp_engine *e, tcp_conn *c, uint32_t ev) {
    if (c->ended) ev &= ~(uint32_t)EPOLLIN;
    if (c->events == ev || c->fd < 0) return;
    struct epoll_event ee = {.events = ev, .data.ptr = c};
    epoll_ctl(e->cep, EPOLL_CTL_MOD, c->fd, &ee);
    if (e->has_thread) epoll_ctl(e->ep, EPOLL_CTL_MOD, c->fd, &ee);
    c->events = ev;
}

plait_status tcp_check_peer(tcp_comm *cm, int peer, const char *op) {
    tcp_engine *e = cm->eng;
    if (peer < 0 || peer >= cm->size)
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: %s peer %d is outside communicator %u of %d ranks", op,
                                  peer, cm->id, cm->size);
    if (cm->aborted)
        return e->host->set_error(PLAIT_ERR_PEER_LOST, "tcp: %s on communicator %u after abort: %s", op, cm->id,
                                  cm->abort_why);
    int w = cm->world_of[peer];
    if (e->peers[w].lost) {
        char name[96];
        tcp_peer_name(cm, w, name, sizeof name);
        return e->host->set_error(e->peers[w].lost_status, "tcp: %s %s: %s", op, name, e->peers[w].lost_why);
    }
    return PLAIT_OK;
}

/* Whether `peer` is lost but the next receive from it on (cm, tag) finds
 * its message whole in the buffer. A rank that finished sends its last messages and
 * closes its streams: what was read before the end is still delivered,
 * however late its receive is posted (tcp_fail_peer keeps such messages and
 * drops the partial ones). */
static int whole_after_loss(tcp_comm *cm, int peer, uint32_t tag) {
    if (peer < 0 || peer >= cm->size || cm->aborted || !cm->eng->peers[cm->world_of[peer]].lost) return 0;
    const tcp_chan *ch = tcp_chan_find(cm->eng, cm->world_of[peer], cm->id, tag, 0);
    for (const tcp_inmsg *m = ch ? ch->msgs : NULL; m; m = m->next)
        if (m->seq == ch->recv_seq) return !m->rts && !m->req && m->got == m->len;
    return 0;
}

tcp_req *tcp_req_post(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, int kind, plait_status *st) {
    tcp_engine *e = cm->eng;
    if (kind == TCP_RECV && whole_after_loss(cm, peer, tag)) *st = PLAIT_OK;
    else *st = tcp_check_peer(cm, peer, kind == TCP_SEND ? "send to" : "receive from");
    if (*st != PLAIT_OK) return NULL;
    int w = cm->world_of[peer];
    tcp_chan *ch = tcp_chan_find(e, w, cm->id, tag, 1);
    tcp_req *r = tcp_req_new(e);
    if (!ch || !r) {
        if (r) tcp_req_release(e, r);
        *st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory posting a %s",
                                 kind == TCP_SEND ? "send" : "receive");
        return NULL;
    }
    r->kind = kind;
    r->comm = cm;
    r->chan = ch;
    r->peer = w;
    r->comm_peer = peer;
    r->tag = tag;
    r->buf = buf->ptr;
    r->cap = buf->bytes;
    return r;
}
