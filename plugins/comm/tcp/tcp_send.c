/*
 * The TCP plugin's send path: chunking, striping over the streams and
 * writing inline from the posting thread (tcp_wire.h has the frames).
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

/* ---- sending ------------------------------------------------------------ */

/* Write as much of the queue as the socket takes. */
void tcp_conn_flush(tcp_engine *e, tcp_conn *c) {
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
            tcp_io_error(e, c, errno);
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
            if (r->kind == TCP_CTRL) {
                tcp_req_release(e, r); /* an internal frame: nobody waits for it */
            } else if (--r->chunks_left == 0 && !r->done && !r->cma) {
                r->len = r->cap; /* (an RTS send completes at its ACK) */
                tcp_req_done(e, r);
            }
        }
        if ((size_t)w < offered) break; /* the socket is full */
    }
    if (c->fd < 0) return;
    if (c->txq) {
        tcp_set_events(e, c, EPOLLIN | EPOLLOUT);
    } else if (c->events & EPOLLOUT) {
        tcp_set_events(e, c, EPOLLIN);
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
            tcp_req_fail(e, p, PLAIT_ERR_PROTOCOL, "tcp: message of %zu bytes (tag %u) from rank %d (self) is longer "
                                               "than the receive buffer of %zu bytes", len, p->tag, cm->rank, p->cap);
        } else {
            if (len) memcpy(p->buf, data, len);
            p->len = len;
            tcp_req_done(e, p);
        }
        r->len = len;
        tcp_req_done(e, r);
        return PLAIT_OK;
    }
    tcp_inmsg *m = calloc(1, sizeof *m);
    size_t cap = 0;
    char *copy = len ? tcp_ubuf_get(e, len, &cap) : NULL;
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
    m->cap = cap;
    m->owned = 1;
    m->next = ch->msgs;
    ch->msgs = m;
    r->len = len;
    tcp_req_done(e, r);
    return PLAIT_OK;
}

plait_status tcp_isend(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    plait_status st;
    tcp_req *r = tcp_req_post(cm, buf, peer, tag, TCP_SEND, &st);
    if (!r) goto out;
    const int w = r->peer;
    tcp_chan *ch = r->chan;
    if (w == e->rank) {
        st = self_send(e, cm, ch, r, buf->ptr, buf->bytes);
        if (st != PLAIT_OK) tcp_req_release(e, r);
        else *out = r;
        goto out;
    }
    size_t len = buf->bytes, csize = (size_t)e->cfg.chunk_size;
    size_t nchunks = len == 0 ? 1 : (len + csize - 1) / csize;
    tcp_peer *pp = &e->peers[w];
    int cma = pp->cma_send && len >= e->cfg.cma_min;
    if (cma) nchunks = 1; /* one RTS frame; the receiver copies the bytes */
    if (nchunks == 1) {
        r->chunks = &r->one;
    } else {
        r->chunks = malloc(nchunks * sizeof *r->chunks);
        if (!r->chunks) {
            tcp_req_release(e, r);
            st = e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory posting a send of %zu bytes", len);
            goto out;
        }
    }
    r->seq = ch->send_seq++;
    r->chunks_left = (int)nchunks;
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
        k->hdr = (tcp_frame){.magic = TCP_FRAME_MAGIC, .version = TCP_WIRE_VERSION, .type = TCP_FRAME_DATA,
                             .comm_id = cm->id, .tag = tag, .seq = r->seq, .chunk_len = (uint32_t)n,
                             .msg_len = (uint64_t)len, .offset = (uint64_t)off};
        if (cma) {
            tcp_rts rts = {(uint64_t)(uintptr_t)buf->ptr, ++e->next_token};
            memcpy(r->ctrl, &rts, sizeof rts);
            r->cma = 1;
            r->token = rts.token;
            r->anext = pp->awaiting;
            pp->awaiting = r;
            k->data = (const char *)r->ctrl;
            k->len = n = sizeof rts;
            k->hdr.type = TCP_FRAME_RTS;
            k->hdr.chunk_len = (uint32_t)n;
        }
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
        if (c->txq) tcp_conn_flush(e, c);
    }
    *out = r;
    tcp_maybe_kick(e);
out:
    pthread_mutex_unlock(&e->mu);
    return st;
}
