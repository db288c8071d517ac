/*
 * The TCP plugin's data path: matching, chunked striped sends, receives
 * straight into posted buffers, the poller token and the progress thread.
 * See tcp.h for the concurrency design and tcp_wire.h for the frames.
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

#define MAX_IOV 64
#define MAX_EVENTS 64
/* Direct reads into the destination are used for payload runs this long. */
#define DIRECT_MIN 4096
/* Bytes read from one connection per readiness event, for fairness. */
#define READ_BUDGET (8u << 20)

/* ---- small helpers ------------------------------------------------------ */

static double now_s(const tcp_engine *e) { return e->host->now(); }

/* "rank 3" or "rank 1 of communicator 7 (world rank 3)". */
static void peer_name(const tcp_comm *c, int world_peer, char *buf, size_t cap) {
    if (!c || c->is_world) {
        snprintf(buf, cap, "rank %d", world_peer);
        return;
    }
    for (int i = 0; i < c->size; i++)
        if (c->world_of[i] == world_peer) {
            snprintf(buf, cap, "rank %d of communicator %u (world rank %d)", i, c->id, world_peer);
            return;
        }
    snprintf(buf, cap, "world rank %d", world_peer);
}

static void req_fail(tcp_engine *e, tcp_req *r, plait_status st, const char *fmt, ...) PLAIT_PRINTF(4, 5);

static void req_done(tcp_engine *e, tcp_req *r) {
    if (r->done) return;
    r->done = 1;
    if (r->big) {
        r->big = 0;
        e->big_pending--;
    }
    if (e->waiting) pthread_cond_broadcast(&e->cv);
}

static void req_fail(tcp_engine *e, tcp_req *r, plait_status st, const char *fmt, ...) {
    if (r->done) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    r->status = st;
    req_done(e, r);
}

static tcp_req *req_new(tcp_engine *e) {
    tcp_req *r = e->free_reqs;
    if (r) e->free_reqs = r->next;
    else r = malloc(sizeof *r);
    if (!r) return NULL;
    memset(r, 0, offsetof(tcp_req, one));
    return r;
}

static void req_release(tcp_engine *e, tcp_req *r) {
    if (r->chunks && r->chunks != &r->one) free(r->chunks);
    r->chunks = NULL;
    r->next = e->free_reqs;
    e->free_reqs = r;
}

static void wake_poller(tcp_engine *e) {
    if (e->wake_pending) return;
    e->wake_pending = 1;
    uint64_t one = 1;
    ssize_t w = write(e->wake_fd, &one, sizeof one);
    (void)w;
}

/* Large transfers outstanding that should move while nobody waits. */
static int async_work(const tcp_engine *e) { return e->tx_pending > 0 || e->big_pending > 0; }

/* Hand asynchronous progress to the progress thread if it is needed and
 * nobody else is polling. Called with mu held when a caller leaves. */
static void maybe_kick(tcp_engine *e) {
    if (e->has_thread && e->pt_sleeping && e->poller == POLLER_NONE && e->waiting == 0 && async_work(e))
        pthread_cond_signal(&e->pcv);
}

/* ---- channels ----------------------------------------------------------- */

static size_t chan_hash(int peer, uint32_t comm, uint32_t tag) {
    uint64_t h = ((uint64_t)(uint32_t)peer * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)comm << 32 | tag);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h ^ (h >> 32));
}

static tcp_chan *chan_find(tcp_engine *e, int peer, uint32_t comm, uint32_t tag, int create) {
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

static void msg_unlink(tcp_chan *ch, tcp_inmsg *m) {
    for (tcp_inmsg **pp = &ch->msgs; *pp; pp = &(*pp)->next)
        if (*pp == m) {
            *pp = m->next;
            return;
        }
}

static void msg_free(tcp_inmsg *m) {
    if (m->owned) free(m->buf);
    free(m);
}

static tcp_comm *comm_by_id(tcp_engine *e, uint32_t id) {
    for (tcp_comm *c = e->comms; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* ---- failures ----------------------------------------------------------- */

static void conn_close(tcp_engine *e, tcp_conn *c) {
    if (c->fd < 0) return;
    epoll_ctl(e->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
    if (c->tx_queued) e->tx_pending--;
    c->tx_queued = 0;
    c->txq = c->txq_tail = NULL;
    c->rx_msg = NULL;
}

/* Fail everything that involves world rank `p` and close its connections.
 * `why` says what happened ("connection reset by peer"). */
static void fail_peer_as(tcp_engine *e, int p, plait_status st, const char *why, int quiet);
static void fail_peer(tcp_engine *e, int p, plait_status st, const char *why) { fail_peer_as(e, p, st, why, 0); }

static void fail_peer_as(tcp_engine *e, int p, plait_status st, const char *why, int quiet) {
    tcp_peer *peer = &e->peers[p];
    if (peer->lost) return;
    peer->lost = 1;
    peer->lost_status = st;
    snprintf(peer->lost_why, sizeof peer->lost_why, "%s", why);
    int had_pending = 0;
    /* sends */
    for (int s = 0; peer->conns && s < e->cfg.streams; s++) {
        tcp_conn *c = &peer->conns[s];
        for (tcp_chunk *k = c->txq; k; k = k->next)
            if (!k->req->done) {
                char name[96];
                peer_name(k->req->comm, p, name, sizeof name);
                req_fail(e, k->req, st, "tcp: send of %zu bytes (tag %u) to %s failed: %s", k->req->cap,
                         k->req->tag, name, why);
                had_pending = 1;
            }
        conn_close(e, c);
    }
    /* receives and buffered messages */
    for (size_t b = 0; b < e->n_chan_buckets; b++)
        for (tcp_chan *ch = e->chans[b]; ch; ch = ch->hnext) {
            if (ch->peer != p) continue;
            for (tcp_req *r = ch->posted; r; r = r->next) {
                char name[96];
                peer_name(r->comm, p, name, sizeof name);
                req_fail(e, r, st, "tcp: receive (tag %u, up to %zu bytes) from %s failed: %s", r->tag, r->cap,
                         name, why);
                had_pending = 1;
            }
            ch->posted = ch->posted_tail = NULL;
            for (tcp_inmsg *m = ch->msgs, *nx; m; m = nx) {
                nx = m->next;
                if (m->req && m->got < m->len) {
                    char name[96];
                    peer_name(m->req->comm, p, name, sizeof name);
                    req_fail(e, m->req, st, "tcp: receive of %llu bytes (tag %u) from %s failed after %llu bytes: %s",
                             (unsigned long long)m->len, m->req->tag, name, (unsigned long long)m->got, why);
                    m->req->msg = NULL;
                    had_pending = 1;
                    msg_unlink(ch, m);
                    msg_free(m);
                } else if (m->got < m->len) { /* partial unexpected message: useless now */
                    msg_unlink(ch, m);
                    msg_free(m);
                }
            }
        }
    e->host->log(had_pending && !quiet ? PLAIT_LOG_ERROR : PLAIT_LOG_DEBUG, TCP_COMPONENT, "lost rank %d (%s): %s",
                 p, peer->addr, why);
}

static void protocol_error(tcp_engine *e, tcp_conn *c, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static void protocol_error(tcp_engine *e, tcp_conn *c, const char *fmt, ...) {
    char what[256], why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(why, sizeof why, "garbage from rank %d (stream %d, %s): %s; closed the connection", c->peer,
             c->stream, e->peers[c->peer].addr, what);
    fail_peer(e, c->peer, PLAIT_ERR_PROTOCOL, why);
}

static void io_error(tcp_engine *e, tcp_conn *c, int err) {
    char why[256];
    if (err == 0)
        snprintf(why, sizeof why, "rank %d closed the connection (stream %d, %s); the process probably exited or "
                                  "died", c->peer, c->stream, e->peers[c->peer].addr);
    else
        snprintf(why, sizeof why, "connection to rank %d (stream %d, %s) failed: %s; the process probably died",
                 c->peer, c->stream, e->peers[c->peer].addr, strerror(err));
    fail_peer(e, c->peer, PLAIT_ERR_PEER_LOST, why);
}

/* ---- sending ------------------------------------------------------------ */

static void set_events(tcp_engine *e, tcp_conn *c, uint32_t ev) {
    if (c->events == ev || c->fd < 0) return;
    struct epoll_event ee = {.events = ev, .data.ptr = c};
    epoll_ctl(e->ep, EPOLL_CTL_MOD, c->fd, &ee);
    c->events = ev;
}

/* Write as much of the queue as the socket takes. */
static void conn_flush(tcp_engine *e, tcp_conn *c) {
    while (c->txq && c->fd >= 0) {
        struct iovec iov[MAX_IOV];
        int n = 0;
        size_t offered = 0;
        for (tcp_chunk *k = c->txq; k && n + 2 <= MAX_IOV; k = k->next) {
            size_t hdr = sizeof k->hdr;
            if (k->sent < hdr) {
                iov[n].iov_base = (char *)&k->hdr + k->sent;
                iov[n++].iov_len = hdr - k->sent;
                if (k->len) {
                    iov[n].iov_base = (void *)k->data;
                    iov[n++].iov_len = k->len;
                }
            } else {
                iov[n].iov_base = (void *)(k->data + (k->sent - hdr));
                iov[n++].iov_len = k->len - (k->sent - hdr);
            }
            offered += hdr + k->len - k->sent;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            io_error(e, c, errno);
            return;
        }
        size_t left = (size_t)w;
        c->tx_queued -= left;
        if (c->tx_queued == 0) e->tx_pending--;
        while (left > 0) {
            tcp_chunk *k = c->txq;
            size_t total = sizeof k->hdr + k->len, take = total - k->sent;
            if (take > left) take = left;
            k->sent += take;
            left -= take;
            if (k->sent < total) break;
            c->txq = k->next;
            if (!c->txq) c->txq_tail = NULL;
            tcp_req *r = k->req;
            if (--r->chunks_left == 0 && !r->done) {
                r->len = r->cap;
                req_done(e, r);
            }
        }
        if ((size_t)w < offered) break; /* the socket is full */
    }
    if (c->fd < 0) return;
    if (c->txq) {
        set_events(e, c, EPOLLIN | EPOLLOUT);
    } else if (c->events & EPOLLOUT) {
        set_events(e, c, EPOLLIN);
    }
}

/* Deliver a message to ourselves (peer == own rank): no socket involved. */
static plait_status self_send(tcp_engine *e, tcp_comm *cm, tcp_chan *ch, tcp_req *r, const char *data, size_t len) {
    uint32_t seq = ch->send_seq++;
    for (tcp_req *p = ch->posted, *prev = NULL; p; prev = p, p = p->next) {
        if (p->seq != seq) continue;
        if (prev) prev->next = p->next;
        else ch->posted = p->next;
        if (ch->posted_tail == p) ch->posted_tail = prev;
        if (len > p->cap) {
            req_fail(e, p, PLAIT_ERR_PROTOCOL, "tcp: message of %zu bytes (tag %u) from rank %d (self) is longer "
                                               "than the receive buffer of %zu bytes", len, p->tag, cm->rank, p->cap);
        } else {
            if (len) memcpy(p->buf, data, len);
            p->len = len;
            req_done(e, p);
        }
        r->len = len;
        req_done(e, r);
        return PLAIT_OK;
    }
    tcp_inmsg *m = calloc(1, sizeof *m);
    char *copy = len ? malloc(len) : NULL;
    if (!m || (len && !copy)) {
        free(m);
        free(copy);
        ch->send_seq--;
        return e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory buffering %zu bytes sent to self", len);
    }
    if (len) memcpy(copy, data, len);
    m->seq = seq;
    m->chan = ch;
    m->len = m->reserved = m->got = len;
    m->buf = copy;
    m->owned = 1;
    m->next = ch->msgs;
    ch->msgs = m;
    r->len = len;
    req_done(e, r);
    return PLAIT_OK;
}

static plait_status check_peer(tcp_comm *cm, int peer, const char *op) {
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
        peer_name(cm, w, name, sizeof name);
        return e->host->set_error(e->peers[w].lost_status, "tcp: %s %s: %s", op, name, e->peers[w].lost_why);
    }
    return PLAIT_OK;
}

plait_status tcp_isend(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    plait_status st = check_peer(cm, peer, "send to");
    if (st != PLAIT_OK) goto out;
    int w = cm->world_of[peer];
    tcp_chan *ch = chan_find(e, w, cm->id, tag, 1);
    tcp_req *r = req_new(e);
    if (!ch || !r) {
        if (r) req_release(e, r);
        st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory posting a send");
        goto out;
    }
    r->kind = TCP_SEND;
    r->comm = cm;
    r->chan = ch;
    r->peer = w;
    r->comm_peer = peer;
    r->tag = tag;
    r->buf = buf->ptr;
    r->cap = buf->bytes;
    if (w == e->rank) {
        st = self_send(e, cm, ch, r, buf->ptr, buf->bytes);
        if (st != PLAIT_OK) req_release(e, r);
        else *out = r;
        goto out;
    }
    size_t len = buf->bytes, csize = (size_t)e->cfg.chunk_size;
    size_t nchunks = len == 0 ? 1 : (len + csize - 1) / csize;
    if (nchunks == 1) {
        r->chunks = &r->one;
    } else {
        r->chunks = malloc(nchunks * sizeof *r->chunks);
        if (!r->chunks) {
            req_release(e, r);
            st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory posting a send of %zu bytes", len);
            goto out;
        }
    }
    r->seq = ch->send_seq++;
    r->chunks_left = (int)nchunks;
    tcp_peer *pp = &e->peers[w];
    /* start on the least loaded stream; stripe the rest round-robin */
    int S = e->cfg.streams, first = 0;
    for (int s = 1; s < S; s++)
        if (pp->conns[s].tx_queued < pp->conns[first].tx_queued) first = s;
    for (size_t i = 0; i < nchunks; i++) {
        tcp_chunk *k = &r->chunks[i];
        size_t off = i * csize, n = len - off < csize ? len - off : csize;
        k->next = NULL;
        k->req = r;
        k->data = (const char *)buf->ptr + off;
        k->len = n;
        k->sent = 0;
        k->hdr = (tcp_frame){TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, cm->id, tag, r->seq,
                             (uint32_t)n, (uint64_t)len, (uint64_t)off};
        tcp_conn *c = &pp->conns[(first + (int)(i % (size_t)S)) % S];
        if (c->txq_tail) c->txq_tail->next = k;
        else c->txq = k;
        c->txq_tail = k;
        if (c->tx_queued == 0) e->tx_pending++;
        c->tx_queued += sizeof k->hdr + n;
    }
    /* write now on every stream we touched (inline, no hand-off) */
    for (int s = 0; s < S && s < (int)nchunks; s++) {
        tcp_conn *c = &pp->conns[(first + s) % S];
        if (c->txq) conn_flush(e, c);
    }
    *out = r;
    maybe_kick(e);
out:
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- receiving ---------------------------------------------------------- */

static void msg_deliver_done(tcp_engine *e, tcp_chan *ch, tcp_inmsg *m) {
    /* all bytes are in */
    if (m->req) {
        m->req->len = m->len;
        m->req->msg = NULL;
        req_done(e, m->req);
        msg_unlink(ch, m);
        msg_free(m);
    } else if (!m->buf && m->len > 0) { /* discarded (receive too small) */
        msg_unlink(ch, m);
        msg_free(m);
    } else if (!m->owned && m->len == 0) {
        /* zero-byte unexpected message: keep it until its receive is posted */
    }
}

/* A matched receive whose buffer is too small: fail it, discard the data. */
static void too_long(tcp_engine *e, tcp_req *r, uint64_t len) {
    char name[96];
    peer_name(r->comm, r->peer, name, sizeof name);
    req_fail(e, r, PLAIT_ERR_PROTOCOL, "tcp: message of %llu bytes (tag %u) from %s is longer than the receive "
                                       "buffer of %zu bytes", (unsigned long long)len, r->tag, name, r->cap);
}

/* A chunk header arrived on `c`: validate it and find where its payload goes. */
static int begin_chunk(tcp_engine *e, tcp_conn *c, const tcp_frame *h) {
    if (h->magic != TCP_FRAME_MAGIC) {
        protocol_error(e, c, "bad frame magic 0x%08x", h->magic);
        return -1;
    }
    if (h->version != TCP_WIRE_VERSION || h->type != TCP_FRAME_DATA || h->flags != 0) {
        protocol_error(e, c, "frame version %u type %u flags %u not understood", h->version, h->type, h->flags);
        return -1;
    }
    if (!comm_by_id(e, h->comm_id)) {
        protocol_error(e, c, "frame for unknown communicator %u", h->comm_id);
        return -1;
    }
    if (h->msg_len > e->cfg.max_message) {
        protocol_error(e, c, "message of %llu bytes exceeds [comm.tcp] max_message = %llu",
                       (unsigned long long)h->msg_len, (unsigned long long)e->cfg.max_message);
        return -1;
    }
    if (h->offset > h->msg_len || h->chunk_len > h->msg_len - h->offset || (h->chunk_len == 0 && h->msg_len != 0)) {
        protocol_error(e, c, "chunk [%llu, +%u) outside its message of %llu bytes", (unsigned long long)h->offset,
                       h->chunk_len, (unsigned long long)h->msg_len);
        return -1;
    }
    tcp_chan *ch = chan_find(e, c->peer, h->comm_id, h->tag, 1);
    if (!ch) {
        fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
        return -1;
    }
    tcp_inmsg *m = ch->msgs;
    while (m && m->seq != h->seq) m = m->next;
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m) {
            fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
            return -1;
        }
        m->seq = h->seq;
        m->len = h->msg_len;
        m->chan = ch;
        /* its receive may be posted already */
        tcp_req *r = NULL;
        for (tcp_req *p = ch->posted, *prev = NULL; p; prev = p, p = p->next)
            if (p->seq == h->seq) {
                if (prev) prev->next = p->next;
                else ch->posted = p->next;
                if (ch->posted_tail == p) ch->posted_tail = prev;
                r = p;
                break;
            }
        if (r) {
            if (m->len > r->cap) {
                too_long(e, r, m->len);
            } else {
                m->req = r;
                m->buf = r->buf;
                r->msg = m;
            }
        } else if (m->len > 0) {
            m->buf = malloc(m->len);
            if (!m->buf) {
                free(m);
                char why[160];
                snprintf(why, sizeof why, "out of memory buffering an unexpected message of %llu bytes",
                         (unsigned long long)h->msg_len);
                fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, why);
                return -1;
            }
            m->owned = 1;
        }
        m->next = ch->msgs;
        ch->msgs = m;
    } else if (m->len != h->msg_len) {
        protocol_error(e, c, "chunk says message %u (tag %u) has %llu bytes, an earlier one said %llu", h->seq,
                       h->tag, (unsigned long long)h->msg_len, (unsigned long long)m->len);
        return -1;
    }
    if (h->chunk_len > m->len - m->reserved) {
        protocol_error(e, c, "chunks of message %u (tag %u) add up to more than its %llu bytes", h->seq, h->tag,
                       (unsigned long long)m->len);
        return -1;
    }
    m->reserved += h->chunk_len;
    c->rx_msg = m;
    c->rx_off = h->offset;
    c->rx_left = h->chunk_len;
    c->rx_payload = h->chunk_len > 0;
    if (h->chunk_len == 0) { /* zero-byte message: complete now */
        c->rx_msg = NULL;
        msg_deliver_done(e, ch, m);
    }
    return 0;
}

/* `n` payload bytes of the current chunk have landed at rx_off. */
static void advance_payload(tcp_engine *e, tcp_conn *c, size_t n) {
    tcp_inmsg *m = c->rx_msg; /* NULL: its communicator is gone; bytes dropped */
    c->rx_off += n;
    c->rx_left -= n;
    if (c->rx_left == 0) {
        c->rx_payload = 0;
        c->rx_msg = NULL;
    }
    if (!m) return;
    m->got += n;
    if (m->got == m->len) msg_deliver_done(e, m->chan, m);
}

/* Where payload for the current chunk goes (NULL: discard). */
static char *payload_dest(tcp_conn *c) {
    return c->rx_msg && c->rx_msg->buf ? c->rx_msg->buf + c->rx_off : NULL;
}

/* Consume staged bytes: headers and payload. */
static void parse_staged(tcp_engine *e, tcp_conn *c) {
    while (c->fd >= 0 && c->rx_pos < c->rx_len) {
        size_t avail = c->rx_len - c->rx_pos;
        if (!c->rx_payload) {
            if (avail < sizeof(tcp_frame)) break;
            tcp_frame h;
            memcpy(&h, c->rx + c->rx_pos, sizeof h);
            c->rx_pos += sizeof h;
            if (begin_chunk(e, c, &h) != 0) return;
            continue;
        }
        size_t n = avail < c->rx_left ? avail : (size_t)c->rx_left;
        char *dst = payload_dest(c);
        if (dst) memcpy(dst, c->rx + c->rx_pos, n);
        c->rx_pos += n;
        advance_payload(e, c, n);
    }
    if (c->rx_pos == c->rx_len) c->rx_pos = c->rx_len = 0;
}

static void conn_read(tcp_engine *e, tcp_conn *c) {
    size_t budget = READ_BUDGET;
    while (c->fd >= 0 && budget > 0) {
        ssize_t r;
        size_t want;
        if (c->rx_payload && c->rx_pos == c->rx_len && c->rx_left >= DIRECT_MIN) {
            /* straight into the destination */
            char *dst = payload_dest(c);
            want = c->rx_left < budget ? (size_t)c->rx_left : budget;
            if (!dst) {
                if (!e->scratch) {
                    e->scratch = malloc(TCP_RX_BUF);
                    e->scratch_len = TCP_RX_BUF;
                    if (!e->scratch) {
                        fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory");
                        return;
                    }
                }
                dst = e->scratch;
                if (want > e->scratch_len) want = e->scratch_len;
            }
            r = recv(c->fd, dst, want, MSG_DONTWAIT);
            if (r > 0) {
                advance_payload(e, c, (size_t)r);
                budget -= (size_t)r;
                if ((size_t)r < want) return; /* drained */
                continue;
            }
        } else {
            if (c->rx_pos > 0) {
                memmove(c->rx, c->rx + c->rx_pos, c->rx_len - c->rx_pos);
                c->rx_len -= c->rx_pos;
                c->rx_pos = 0;
            }
            want = TCP_RX_BUF - c->rx_len;
            if (want > TCP_RX_READ && (c->rx_payload || c->rx_len == 0)) want = TCP_RX_READ;
            r = recv(c->fd, c->rx + c->rx_len, want, MSG_DONTWAIT);
            if (r > 0) {
                c->rx_len += (size_t)r;
                budget -= (size_t)r < budget ? (size_t)r : budget;
                parse_staged(e, c);
                if ((size_t)r < want) return;
                continue;
            }
        }
        if (r == 0) {
            io_error(e, c, 0);
            return;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        io_error(e, c, errno);
        return;
    }
}

plait_status tcp_irecv(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    plait_status st = check_peer(cm, peer, "receive from");
    if (st != PLAIT_OK) goto out;
    int w = cm->world_of[peer];
    tcp_chan *ch = chan_find(e, w, cm->id, tag, 1);
    tcp_req *r = req_new(e);
    if (!ch || !r) {
        if (r) req_release(e, r);
        st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory posting a receive");
        goto out;
    }
    r->kind = TCP_RECV;
    r->comm = cm;
    r->chan = ch;
    r->peer = w;
    r->comm_peer = peer;
    r->tag = tag;
    r->buf = buf->ptr;
    r->cap = buf->bytes;
    r->seq = ch->recv_seq++;
    tcp_inmsg *m = ch->msgs;
    while (m && m->seq != r->seq) m = m->next;
    if (m) { /* it arrived before us, entirely or in part */
        if (m->len > r->cap) {
            too_long(e, r, m->len);
            if (m->got == m->len) {
                msg_unlink(ch, m);
                msg_free(m);
            } else if (m->owned) {
                free(m->buf);
                m->buf = NULL;
                m->owned = 0;
            }
        } else if (m->got == m->len) {
            if (m->len) memcpy(r->buf, m->buf, m->len);
            r->len = m->len;
            msg_unlink(ch, m);
            msg_free(m);
            req_done(e, r);
        } else {
            /* switch the rest of it to the user's buffer */
            if (m->len) memcpy(r->buf, m->buf, m->len);
            if (m->owned) free(m->buf);
            m->buf = r->buf;
            m->owned = 0;
            m->req = r;
            r->msg = m;
        }
    } else {
        r->next = NULL;
        if (ch->posted_tail) ch->posted_tail->next = r;
        else ch->posted = r;
        ch->posted_tail = r;
    }
    if (!r->done && r->cap >= TCP_ASYNC_BYTES) {
        r->big = 1;
        e->big_pending++;
    }
    *out = r;
    maybe_kick(e);
out:
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- progress ----------------------------------------------------------- */

/* Handle epoll events; mu held. */
static void handle_events(tcp_engine *e, struct epoll_event *evs, int n) {
    for (int i = 0; i < n; i++) {
        void *p = evs[i].data.ptr;
        if (p == &e->wake_fd) {
            uint64_t v;
            ssize_t r = read(e->wake_fd, &v, sizeof v);
            (void)r;
            e->wake_pending = 0;
            continue;
        }
        tcp_conn *c = p;
        if (c->fd < 0) continue;
        if (evs[i].events & EPOLLOUT) conn_flush(e, c);
        if (c->fd >= 0 && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))) conn_read(e, c);
    }
}

/* Poll once as the token holder: releases mu around epoll_wait. */
static void poll_once(tcp_engine *e, int timeout_ms) {
    struct epoll_event evs[MAX_EVENTS];
    pthread_mutex_unlock(&e->mu);
    int n = epoll_wait(e->ep, evs, MAX_EVENTS, timeout_ms);
    pthread_mutex_lock(&e->mu);
    if (n > 0) handle_events(e, evs, n);
}

static void *progress_main(void *arg) {
    tcp_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    while (!e->stop) {
        if (e->poller != POLLER_NONE || e->waiting > 0 || !async_work(e)) {
            e->pt_sleeping = 1;
            pthread_cond_wait(&e->pcv, &e->mu);
            e->pt_sleeping = 0;
            continue;
        }
        e->poller = POLLER_THREAD;
        poll_once(e, -1);
        e->poller = POLLER_NONE;
        if (e->waiting) pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

static void release(tcp_engine *e, tcp_req *r, size_t *bytes, plait_status *st) {
    if (bytes) *bytes = r->len;
    *st = r->status;
    if (r->status != PLAIT_OK) e->host->set_error(r->status, "%s", r->err);
    req_release(e, r);
}

plait_status tcp_test(tcp_comm *cm, tcp_req *r, int *done, size_t *bytes) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    if (!r->done && e->poller == POLLER_NONE) {
        e->poller = POLLER_CALLER;
        poll_once(e, 0);
        e->poller = POLLER_NONE;
        if (e->waiting) pthread_cond_broadcast(&e->cv);
    }
    plait_status st = PLAIT_OK;
    *done = r->done;
    if (r->done) release(e, r, bytes, &st);
    else maybe_kick(e);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* The condition variables use CLOCK_MONOTONIC, the clock of host->now(). */
static void deadline_ts(double deadline_mono, struct timespec *ts) {
    ts->tv_sec = (time_t)deadline_mono;
    ts->tv_nsec = (long)((deadline_mono - (double)ts->tv_sec) * 1e9);
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

plait_status tcp_wait(tcp_comm *cm, tcp_req *r, double timeout_s, size_t *bytes) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    double deadline = now_s(e) + (timeout_s > 0 ? timeout_s : 0);
    while (!r->done) {
        double left = deadline - now_s(e);
        if (left <= 0) break;
        if (e->poller == POLLER_NONE) {
            e->poller = POLLER_CALLER;
            int ms = left > 2e6 ? 2000000000 : (int)(left * 1000.0) + 1;
            poll_once(e, ms);
            e->poller = POLLER_NONE;
            if (e->waiting) pthread_cond_broadcast(&e->cv);
            continue;
        }
        /* someone else polls: the progress thread yields to us; another
         * caller wakes us on every completion and when it is done */
        if (e->poller == POLLER_THREAD) wake_poller(e);
        struct timespec ts;
        deadline_ts(deadline, &ts);
        e->waiting++;
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        e->waiting--;
    }
    plait_status st;
    if (!r->done) {
        char name[96];
        peer_name(cm, r->peer, name, sizeof name);
        st = e->host->set_error(PLAIT_ERR_TIMEOUT, "tcp: %s %s (tag %u, %zu bytes) did not complete within %.3g s",
                                r->kind == TCP_SEND ? "send to" : "receive from", name, r->tag, r->cap, timeout_s);
    } else {
        release(e, r, bytes, &st);
    }
    maybe_kick(e);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* ---- abort, registration, start/stop ------------------------------------ */

void tcp_abort(tcp_comm *cm, const char *reason) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    if (!cm->aborted) {
        cm->aborted = 1;
        snprintf(cm->abort_why, sizeof cm->abort_why, "%s", reason ? reason : "aborted");
        char why[448];
        snprintf(why, sizeof why, "communicator %u aborted: %s", cm->id, cm->abort_why);
        if (cm->is_world) {
            /* the job is going down: drop every connection */
            for (int p = 0; p < e->size; p++)
                if (p != e->rank) fail_peer_as(e, p, PLAIT_ERR_PEER_LOST, why, 1);
        } else {
            /* this communicator's requests; a half-written frame poisons its
             * stream, so such a peer's connections go too */
            for (int p = 0; p < e->size; p++) {
                if (p == e->rank || e->peers[p].lost) continue;
                int poisoned = 0;
                for (int s = 0; s < e->cfg.streams; s++)
                    for (tcp_chunk *k = e->peers[p].conns[s].txq; k; k = k->next)
                        if (k->req->comm == cm && k->sent > 0) poisoned = 1;
                if (poisoned) fail_peer_as(e, p, PLAIT_ERR_PEER_LOST, why, 1);
            }
            for (int p = 0; p < e->size; p++) {
                if (p == e->rank || e->peers[p].lost) continue;
                for (int s = 0; s < e->cfg.streams; s++) {
                    tcp_conn *c = &e->peers[p].conns[s];
                    tcp_chunk **pp = &c->txq;
                    c->txq_tail = NULL;
                    while (*pp) {
                        tcp_chunk *k = *pp;
                        if (k->req->comm == cm) {
                            c->tx_queued -= sizeof k->hdr + k->len - k->sent;
                            req_fail(e, k->req, PLAIT_ERR_PEER_LOST, "tcp: send to rank %d: %s", k->req->comm_peer,
                                     why);
                            *pp = k->next;
                        } else {
                            c->txq_tail = k;
                            pp = &k->next;
                        }
                    }
                    if (!c->txq && c->tx_queued == 0) {
                    }
                }
            }
            for (size_t b = 0; b < e->n_chan_buckets; b++)
                for (tcp_chan *ch = e->chans[b]; ch; ch = ch->hnext) {
                    if (ch->comm_id != cm->id) continue;
                    for (tcp_req *r = ch->posted; r; r = r->next)
                        req_fail(e, r, PLAIT_ERR_PEER_LOST, "tcp: receive from rank %d: %s", r->comm_peer, why);
                    ch->posted = ch->posted_tail = NULL;
                    for (tcp_inmsg *m = ch->msgs; m; m = m->next)
                        if (m->req) {
                            req_fail(e, m->req, PLAIT_ERR_PEER_LOST, "tcp: receive from rank %d: %s",
                                     m->req->comm_peer, why);
                            m->req->msg = NULL;
                            m->req = NULL;
                            m->buf = NULL; /* keep consuming its bytes, into nothing */
                        }
                }
        }
        /* recount conns with queued data */
        e->tx_pending = 0;
        for (int p = 0; p < e->size; p++)
            for (int s = 0; p != e->rank && s < e->cfg.streams; s++)
                if (e->peers[p].conns[s].fd >= 0 && e->peers[p].conns[s].tx_queued) e->tx_pending++;
        if (e->poller == POLLER_THREAD) wake_poller(e);
        pthread_cond_broadcast(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

plait_status tcp_comm_register(tcp_engine *e, tcp_comm *c) {
    pthread_mutex_lock(&e->mu);
    plait_status st = PLAIT_OK;
    if (comm_by_id(e, c->id))
        st = e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: communicator id %u is already in use on rank %d", c->id,
                                e->rank);
    else {
        c->next = e->comms;
        e->comms = c;
        e->n_comms++;
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

void tcp_comm_unregister(tcp_comm *c) {
    tcp_engine *e = c->eng;
    pthread_mutex_lock(&e->mu);
    for (tcp_comm **pp = &e->comms; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            e->n_comms--;
            break;
        }
    for (size_t b = 0; b < e->n_chan_buckets; b++)
        for (tcp_chan **pp = &e->chans[b]; *pp;) {
            tcp_chan *ch = *pp;
            if (ch->comm_id != c->id) {
                pp = &ch->hnext;
                continue;
            }
            /* a connection still reading into one of these messages keeps
             * reading, into nothing */
            for (int p = 0; p < e->size; p++)
                for (int s = 0; p != e->rank && s < e->cfg.streams; s++) {
                    tcp_conn *cc = &e->peers[p].conns[s];
                    for (tcp_inmsg *m = ch->msgs; m; m = m->next)
                        if (cc->rx_msg == m) cc->rx_msg = NULL;
                }
            for (tcp_inmsg *m = ch->msgs, *nx; m; m = nx) {
                nx = m->next;
                msg_free(m);
            }
            *pp = ch->hnext;
            free(ch);
            e->n_chans--;
        }
    pthread_mutex_unlock(&e->mu);
}

plait_status tcp_engine_start(tcp_engine *e) {
    pthread_mutex_init(&e->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cv, &ca);
    pthread_cond_init(&e->pcv, &ca);
    pthread_condattr_destroy(&ca);
    e->n_chan_buckets = 256;
    e->chans = calloc(e->n_chan_buckets, sizeof *e->chans);
    e->ep = epoll_create1(EPOLL_CLOEXEC);
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!e->chans || e->ep < 0 || e->wake_fd < 0)
        return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: cannot create the progress engine: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e->wake_fd};
    epoll_ctl(e->ep, EPOLL_CTL_ADD, e->wake_fd, &ev);
    /* Every peer is connected: nothing may connect any more, so the port
     * closes (a stray client now gets "connection refused"). */
    close(e->listen_fd);
    e->listen_fd = -1;
    for (int p = 0; p < e->size; p++) {
        if (p == e->rank) continue;
        for (int s = 0; s < e->cfg.streams; s++) {
            tcp_conn *c = &e->peers[p].conns[s];
            c->rx = malloc(TCP_RX_BUF);
            if (!c->rx) return e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
            c->events = EPOLLIN;
            struct epoll_event ce = {.events = EPOLLIN, .data.ptr = c};
            if (epoll_ctl(e->ep, EPOLL_CTL_ADD, c->fd, &ce) != 0)
                return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: epoll_ctl: %s", strerror(errno));
        }
    }
    if (e->cfg.progress_thread) {
        if (pthread_create(&e->thread, NULL, progress_main, e) != 0)
            return e->host->set_error(PLAIT_ERR_SYSTEM, "tcp: cannot start the progress thread");
        e->has_thread = 1;
    }
    return PLAIT_OK;
}

void tcp_engine_stop(tcp_engine *e) {
    if (e->has_thread) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;
        pthread_cond_signal(&e->pcv);
        wake_poller(e);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
        e->has_thread = 0;
    }
    for (int p = 0; e->peers && p < e->size; p++) {
        if (!e->peers[p].conns) continue;
        for (int s = 0; s < e->cfg.streams; s++) {
            tcp_conn *c = &e->peers[p].conns[s];
            if (c->fd >= 0) {
                shutdown(c->fd, SHUT_WR);
                close(c->fd);
            }
            free(c->rx);
        }
        free(e->peers[p].conns);
    }
    free(e->peers);
    e->peers = NULL;
    if (e->chans)
        for (size_t b = 0; b < e->n_chan_buckets; b++)
            for (tcp_chan *ch = e->chans[b], *nx; ch; ch = nx) {
                nx = ch->hnext;
                for (tcp_inmsg *m = ch->msgs, *mn; m; m = mn) {
                    mn = m->next;
                    msg_free(m);
                }
                free(ch);
            }
    free(e->chans);
    e->chans = NULL;
    for (tcp_req *r = e->free_reqs, *nx; r; r = nx) {
        nx = r->next;
        free(r);
    }
    e->free_reqs = NULL;
    free(e->scratch);
    if (e->listen_fd >= 0) close(e->listen_fd);
    if (e->ep >= 0) close(e->ep);
    if (e->wake_fd >= 0) close(e->wake_fd);
    e->listen_fd = e->ep = e->wake_fd = -1;
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->pcv);
    pthread_mutex_destroy(&e->mu);
}
