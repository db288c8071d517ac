/*
 * The TCP plugin's receive path: header validation, matching by
 * (peer, communicator, tag, sequence), payload straight into a posted buffer
 * or into an unexpected-message buffer until its receive is posted.
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

/* Direct reads into the destination are used for payload runs this long. */
#define DIRECT_MIN 4096
/* Bytes read from one connection per readiness event, for fairness. */
#define READ_BUDGET (8u << 20)
/* Largest SO_RCVLOWAT used while receiving a long payload. */
#define LOWAT_MAX (256 * 1024)

/* ---- receiving ---------------------------------------------------------- */

static void msg_deliver_done(tcp_engine *e, tcp_chan *ch, tcp_inmsg *m) {
    /* all bytes are in */
    if (m->req) {
        m->req->len = m->len;
        m->req->msg = NULL;
        tcp_req_done(e, m->req);
        tcp_msg_unlink(ch, m);
        tcp_msg_free(e, m);
    } else if (!m->buf && m->len > 0) { /* discarded (receive too small) */
        tcp_msg_unlink(ch, m);
        tcp_msg_free(e, m);
    }
    /* otherwise unexpected (zero-byte ones included): kept until its
     * receive is posted */
}

/* A matched receive whose buffer is too small: fail it, discard the data. */
static void too_long(tcp_engine *e, tcp_req *r, uint64_t len) {
    char name[96];
    tcp_peer_name(r->comm, r->peer, name, sizeof name);
    tcp_req_fail(e, r, PLAIT_ERR_PROTOCOL, "tcp: message of %llu bytes (tag %u) from %s is longer than the receive "
                                       "buffer of %zu bytes", (unsigned long long)len, r->tag, name, r->cap);
}

/* A chunk header arrived on `c`: validate it and find where its payload goes. */
static int begin_chunk(tcp_engine *e, tcp_conn *c, const tcp_frame *h) {
    if (h->magic != TCP_FRAME_MAGIC) {
        tcp_protocol_error(e, c, "bad frame magic 0x%08x", h->magic);
        return -1;
    }
    if (h->version != TCP_WIRE_VERSION || h->type != TCP_FRAME_DATA || h->flags != 0) {
        tcp_protocol_error(e, c, "frame version %u type %u flags %u not understood", h->version, h->type, h->flags);
        return -1;
    }
    if (!tcp_comm_by_id(e, h->comm_id)) {
        tcp_protocol_error(e, c, "frame for unknown communicator %u", h->comm_id);
        return -1;
    }
    if (h->msg_len > e->cfg.max_message) {
        tcp_protocol_error(e, c, "message of %llu bytes exceeds [comm.tcp] max_message = %llu",
                       (unsigned long long)h->msg_len, (unsigned long long)e->cfg.max_message);
        return -1;
    }
    if (h->offset > h->msg_len || h->chunk_len > h->msg_len - h->offset || (h->chunk_len == 0 && h->msg_len != 0)) {
        tcp_protocol_error(e, c, "chunk [%llu, +%u) outside its message of %llu bytes", (unsigned long long)h->offset,
                       h->chunk_len, (unsigned long long)h->msg_len);
        return -1;
    }
    tcp_chan *ch = tcp_chan_find(e, c->peer, h->comm_id, h->tag, 1);
    if (!ch) {
        tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
        return -1;
    }
    tcp_inmsg *m = ch->msgs;
    while (m && m->seq != h->seq) m = m->next;
    if (!m) {
        m = calloc(1, sizeof *m);
        if (!m) {
            tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
            return -1;
        }
        m->seq = h->seq;
        m->len = h->msg_len;
        m->chan = ch;
        e->stat_msgs++;
        e->stat_bytes += m->len;
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
            e->stat_unexpected++;
            e->stat_unexpected_bytes += m->len;
            m->buf = tcp_ubuf_get(e, m->len, &m->cap);
            if (!m->buf) {
                free(m);
                char why[160];
                snprintf(why, sizeof why, "out of memory buffering an unexpected message of %llu bytes",
                         (unsigned long long)h->msg_len);
                tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, why);
                return -1;
            }
            m->owned = 1;
        }
        m->next = ch->msgs;
        ch->msgs = m;
    } else if (m->len != h->msg_len) {
        tcp_protocol_error(e, c, "chunk says message %u (tag %u) has %llu bytes, an earlier one said %llu", h->seq,
                       h->tag, (unsigned long long)h->msg_len, (unsigned long long)m->len);
        return -1;
    }
    if (h->chunk_len > m->len - m->reserved) {
        tcp_protocol_error(e, c, "chunks of message %u (tag %u) add up to more than its %llu bytes", h->seq, h->tag,
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
            if (h.magic == TCP_FRAME_MAGIC && h.version == TCP_WIRE_VERSION &&
                (h.type == TCP_FRAME_RTS || h.type == TCP_FRAME_ACK)) {
                /* control frames are handled whole: header + 16 bytes */
                if (h.chunk_len != sizeof(tcp_rts) || h.flags != 0) {
                    tcp_protocol_error(e, c, "control frame type %u with %u payload bytes", h.type, h.chunk_len);
                    return;
                }
                if (avail < sizeof h + sizeof(tcp_rts)) break;
                unsigned char payload[sizeof(tcp_rts)];
                memcpy(payload, c->rx + c->rx_pos + sizeof h, sizeof payload);
                c->rx_pos += sizeof h + sizeof payload;
                if (tcp_cma_control(e, c, &h, payload) != 0) return;
                continue;
            }
            if (h.magic == TCP_FRAME_MAGIC && h.version == TCP_WIRE_VERSION && h.type == TCP_FRAME_ABORT) {
                if (h.chunk_len > TCP_ABORT_MAX || h.flags != 0) {
                    tcp_protocol_error(e, c, "abort frame with %u payload bytes", h.chunk_len);
                    return;
                }
                if (avail < sizeof h + h.chunk_len) break;
                char why[TCP_ABORT_MAX + 1], msg[TCP_ABORT_MAX + 64];
                memcpy(why, c->rx + c->rx_pos + sizeof h, h.chunk_len);
                why[h.chunk_len] = '\0';
                for (char *q = why; *q; q++)
                    if ((unsigned char)*q < 32) *q = ' '; /* text from the wire: keep logs clean */
                snprintf(msg, sizeof msg, "rank %d is going down: %s", c->peer, why);
                tcp_fail_peer(e, c->peer, PLAIT_ERR_PEER_LOST, msg);
                return;
            }
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

/* Read until the socket is drained, or the connection fails, or the budget
 * is spent: 1 in the last case (bytes may be left). */
static int conn_read_some(tcp_engine *e, tcp_conn *c) {
    size_t budget = READ_BUDGET;
    /* Whole frames can wait in the staging buffer when this read runs
     * inside the handling of an earlier frame of the same stream (an RTS
     * whose ACK met a broken connection reads the peer's last words): parse
     * them first, as the socket may hold nothing more but its end. */
    if (c->rx_pos < c->rx_len) parse_staged(e, c);
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
                        tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory");
                        return 0;
                    }
                }
                dst = e->scratch;
                if (want > e->scratch_len) want = e->scratch_len;
            }
            r = recv(c->fd, dst, want, MSG_DONTWAIT);
            if (r > 0) {
                advance_payload(e, c, (size_t)r);
                budget -= (size_t)r;
                if ((size_t)r < want) return 0; /* drained */
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
                if ((size_t)r < want) return 0;
                continue;
            }
        }
        if (r == 0) {
            tcp_io_error(e, c, 0);
            return 0;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        tcp_io_error(e, c, errno);
        return 0;
    }
    return c->fd >= 0;
}

/* Inside a long payload, ask the kernel to report the socket readable only
 * once a good slice of it has arrived (SO_RCVLOWAT), instead of on every
 * segment: far fewer wake-ups when ranks share cores. The kernel raises the
 * receive buffer to fit and still reports end-of-stream at once. */
static void update_lowat(tcp_conn *c) {
    int want = 1;
    if (c->fd >= 0 && c->rx_payload && c->rx_pos == c->rx_len && c->rx_left > DIRECT_MIN)
        want = c->rx_left < LOWAT_MAX ? (int)c->rx_left : LOWAT_MAX;
    if (want == c->lowat || c->fd < 0) return;
    if (setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) c->lowat = want;
}

int tcp_conn_read(tcp_engine *e, tcp_conn *c) {
    int more = conn_read_some(e, c);
    update_lowat(c);
    return more;
}

plait_status tcp_irecv(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out) {
    tcp_engine *e = cm->eng;
    pthread_mutex_lock(&e->mu);
    plait_status st;
    tcp_req *r = tcp_req_post(cm, buf, peer, tag, TCP_RECV, &st);
    if (!r) goto out;
    const int w = r->peer;
    tcp_chan *ch = r->chan;
    r->seq = ch->recv_seq++;
    tcp_inmsg *m = ch->msgs;
    while (m && m->seq != r->seq) m = m->next;
    if (m && m->rts) { /* announced: copy it from the sender now */
        tcp_msg_unlink(ch, m);
        if (m->len > r->cap) {
            too_long(e, r, m->len);
            tcp_cma_ack(e, w, m->rtoken, 0);
        } else {
            tcp_cma_deliver(e, m, r);
        }
        tcp_msg_free(e, m);
    } else if (m) { /* it arrived before us, entirely or in part */
        if (m->len > r->cap) {
            too_long(e, r, m->len);
            if (m->got == m->len) {
                tcp_msg_unlink(ch, m);
                tcp_msg_free(e, m);
            } else if (m->owned) {
                tcp_ubuf_put(e, m->buf, m->cap);
                m->buf = NULL;
                m->owned = 0;
            }
        } else if (m->got == m->len) {
            if (m->len) memcpy(r->buf, m->buf, m->len);
            r->len = m->len;
            tcp_msg_unlink(ch, m);
            tcp_msg_free(e, m);
            tcp_req_done(e, r);
        } else {
            /* switch the rest of it to the user's buffer */
            if (m->len) memcpy(r->buf, m->buf, m->len);
            if (m->owned) tcp_ubuf_put(e, m->buf, m->cap);
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
    *out = r;
    tcp_maybe_kick(e);
out:
    pthread_mutex_unlock(&e->mu);
    return st;
}
