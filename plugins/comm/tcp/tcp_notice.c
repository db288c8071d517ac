/*
 * A rank going down tells its peers why (the world's abort): one ABORT frame
 * per live peer, on the stream that reaches a frame boundary soonest. Where
 * every stream to a peer is in the middle of a chunk, the rest of the
 * shortest such chunk is written first, then the frame: a peer that is still
 * reading reads the reason before any of the connections ends, and reports
 * the rank that was lost ("rank 1 is going down: lost rank 2 in allreduce
 * #3") instead of only the neighbour whose connection ended. A frame the
 * peer's kernel has not yet acknowledged could be thrown away when this rank
 * closes a socket with unread data (a reset), so the notice waits for the
 * acknowledgement too.
 *
 * Bounded: the whole notice takes at most TCP_NOTICE_S, and a stream is
 * used only if at most TCP_NOTICE_MAX_BYTES of its chunk are still to be
 * written, so a dead, stopped or flooded peer holds the abort up no longer
 * than that. Meanwhile what peers send is read and dropped, so two ranks
 * going down at once, each writing to the other, do not wait for each
 * other's deadline.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <linux/sockios.h>

#include "tcp.h"

/* One peer's notice: the rest of the chunk in flight, then the frame. */
typedef struct notice {
    tcp_conn *c;
    struct iovec iov[3];
    int i, n; /* next entry of iov, entries */
    int done; /* written and acknowledged, or the peer is gone */
} notice;

typedef struct abort_frame {
    tcp_frame h;
    char text[TCP_ABORT_MAX];
} abort_frame;

/* The stream to `peer` closest to a frame boundary, within the byte bound;
 * *rest gets the bytes of its chunk still to write. NULL: none. */
static tcp_conn *notice_stream(const tcp_engine *e, tcp_peer *peer, size_t *rest) {
    tcp_conn *best = NULL;
    for (int s = 0; s < e->cfg.streams; s++) {
        tcp_conn *c = &peer->conns[s];
        if (c->fd < 0 || c->ended) continue;
        const tcp_chunk *k = c->txq;
        size_t r = k && k->sent > 0 ? sizeof k->hdr + k->len - k->sent : 0;
        if (r > TCP_NOTICE_MAX_BYTES || (best && r >= *rest)) continue;
        best = c;
        *rest = r;
    }
    return best;
}

/* Fill `n` for `c`: the unwritten part of its chunk in flight, then `f`. */
static void notice_fill(notice *n, tcp_conn *c, size_t rest, abort_frame *f) {
    n->c = c;
    n->i = n->n = 0;
    n->done = 0;
    const tcp_chunk *k = c->txq;
    if (rest > 0) {
        size_t hdr = sizeof k->hdr;
        if (k->sent < hdr) {
            n->iov[n->n++] = (struct iovec){(char *)&k->hdr + k->sent, hdr - k->sent};
            if (k->len) n->iov[n->n++] = (struct iovec){(void *)k->data, k->len};
        } else {
            n->iov[n->n++] = (struct iovec){(void *)(k->data + (k->sent - hdr)), k->len - (k->sent - hdr)};
        }
    }
    n->iov[n->n++] = (struct iovec){f, sizeof f->h + f->h.chunk_len};
}

/* Write what the socket takes; -1 when the connection failed. */
static int notice_write(notice *n) {
    while (n->i < n->n) {
        struct msghdr mh = {.msg_iov = n->iov + n->i, .msg_iovlen = (size_t)(n->n - n->i)};
        ssize_t w = sendmsg(n->c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
        }
        for (size_t left = (size_t)w; left > 0;) {
            struct iovec *v = &n->iov[n->i];
            size_t take = left < v->iov_len ? left : v->iov_len;
            v->iov_base = (char *)v->iov_base + take;
            v->iov_len -= take;
            left -= take;
            if (v->iov_len == 0) n->i++;
        }
    }
    return 0;
}

/* Read and drop what the peer sent on every stream; -1 when it is gone
 * (end of stream or an error): it reads nothing more either. The streams
 * leave frame sync, which is why the caller closes them next. */
static int notice_drain(const tcp_engine *e, tcp_peer *peer) {
    char sink[16384];
    for (int s = 0; s < e->cfg.streams; s++) {
        int fd = peer->conns[s].fd;
        if (fd < 0 || peer->conns[s].ended) continue; /* it sends nothing more there */
        for (;;) {
            ssize_t r = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
            if (r > 0) continue;
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            return -1;
        }
    }
    return 0;
}

/* One round over the notices not yet done; returns how many are left. */
static int notice_round(tcp_engine *e, notice *ns, const int *who, int count) {
    int left = 0;
    for (int j = 0; j < count; j++) {
        notice *n = &ns[j];
        if (n->done) continue;
        if (notice_write(n) != 0 || notice_drain(e, &e->peers[who[j]]) != 0) {
            n->done = 1;
            continue;
        }
        int unacked = 0;
        if (n->i == n->n && (ioctl(n->c->fd, SIOCOUTQ, &unacked) != 0 || unacked == 0)) n->done = 1;
        else left++;
    }
    return left;
}

void tcp_notify_peers(tcp_engine *e, const char *why) {
    abort_frame f;
    size_t len = strlen(why);
    if (len > TCP_ABORT_MAX) len = TCP_ABORT_MAX;
    memset(&f.h, 0, sizeof f.h);
    f.h.magic = TCP_FRAME_MAGIC;
    f.h.version = TCP_WIRE_VERSION;
    f.h.type = TCP_FRAME_ABORT;
    f.h.chunk_len = (uint32_t)len;
    f.h.msg_len = len;
    memcpy(f.text, why, len);
    notice *ns = calloc((size_t)e->size, sizeof *ns);
    int *who = calloc((size_t)e->size, sizeof *who);
    struct pollfd *pf = calloc((size_t)e->size, sizeof *pf);
    int count = 0;
    for (int p = 0; ns && who && pf && p < e->size; p++) {
        tcp_peer *peer = &e->peers[p];
        size_t rest = 0;
        tcp_conn *c = p == e->rank || peer->lost || !peer->conns ? NULL : notice_stream(e, peer, &rest);
        if (!c) continue;
        notice_fill(&ns[count], c, rest, &f);
        who[count++] = p;
    }
    double deadline = e->host->now() + TCP_NOTICE_S;
    while (count > 0 && notice_round(e, ns, who, count) > 0) {
        double left = deadline - e->host->now();
        if (left <= 0) break;
        int m = 0;
        for (int j = 0; j < count; j++)
            if (!ns[j].done)
                pf[m++] = (struct pollfd){ns[j].c->fd, (short)(POLLIN | (ns[j].i < ns[j].n ? POLLOUT : 0)), 0};
        /* an acknowledgement wakes nothing: look again every millisecond */
        (void)!poll(pf, (nfds_t)m, 1);
    }
    free(ns);
    free(who);
    free(pf);
}
