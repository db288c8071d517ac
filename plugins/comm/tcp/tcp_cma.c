/*
 * Single copy between ranks on one host (see tcp_wire.h): large messages to
 * a same-host peer are announced by an RTS frame and copied by the receiver
 * straight from the sender's buffer with process_vm_readv — one copy
 * instead of TCP's two (into and out of the kernel), which is what bounds
 * loopback bandwidth when ranks share cores. Used only where a probe at
 * setup proved it works ([comm.tcp] cma = auto); `off` keeps every byte on
 * the sockets.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp.h"

static uint64_t fnv(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

void tcp_cma_describe(tcp_engine *e, tcp_addr_info *mine) {
    char host[256] = "", boot[64] = "";
    gethostname(host, sizeof host - 1);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f)) boot[0] = '\0';
        fclose(f);
    }
    /* The network namespace is part of the host: ranks in different
     * namespaces (containers, the multi-host test harness) must talk over
     * their sockets like ranks on different machines, even where one kernel
     * would let process_vm_readv through. */
    char net[64] = "";
    ssize_t nl = readlink("/proc/self/ns/net", net, sizeof net - 1);
    net[nl > 0 ? nl : 0] = '\0';
    mine->pid = (int32_t)getpid();
    mine->host_key = fnv(fnv(fnv(1469598103934665603ull, host, strlen(host)), boot, strlen(boot)), net, strlen(net));
    if (getrandom(e->cookie, sizeof e->cookie, 0) != (ssize_t)sizeof e->cookie)
        memset(e->cookie, 0, sizeof e->cookie); /* a zero cookie still tests readability */
    mine->cookie_addr = (uint64_t)(uintptr_t)e->cookie;
    memcpy(mine->cookie, e->cookie, sizeof e->cookie);
}

/* Read `len` bytes at `raddr` of process `pid` into `dst`; 0 or an errno. */
static int read_remote(int pid, void *dst, uint64_t raddr, size_t len) {
    size_t done = 0;
    while (done < len) {
        struct iovec l = {(char *)dst + done, len - done};
        struct iovec r = {(void *)(uintptr_t)(raddr + done), len - done};
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return errno;
        if (n == 0) return EFAULT;
        done += (size_t)n;
    }
    return 0;
}

plait_status tcp_cma_setup(tcp_engine *e, const plait_bootstrap *bs, const tcp_addr_info *infos) {
    const plait_host *h = e->host;
    size_t bytes = ((size_t)e->size + 7) / 8;
    unsigned char *mine = calloc(bytes, 1), *all = calloc(bytes * (size_t)e->size, 1);
    if (!mine || !all) {
        free(mine);
        free(all);
        return h->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
    }
    int readable = 0, local = 0, why = 0;
    for (int p = 0; p < e->size; p++) {
        e->peers[p].pid = infos[p].pid;
        if (p == e->rank || infos[p].host_key != infos[e->rank].host_key) continue;
        local++;
        if (!e->cfg.cma) continue;
        unsigned char got[16];
        int err = read_remote(infos[p].pid, got, infos[p].cookie_addr, sizeof got);
        if (err == 0 && memcmp(got, infos[p].cookie, sizeof got) == 0) {
            mine[p / 8] |= (unsigned char)(1u << (p % 8));
            readable++;
        } else if (!why) {
            why = err ? err : EINVAL;
        }
    }
    /* everyone takes part, whatever its own setting, so the calls match */
    plait_status st = bs->allgather(bs->ctx, mine, all, bytes);
    if (st != PLAIT_OK) {
        free(mine);
        free(all);
        return h->set_error(st, "tcp: agreeing on single-copy peers: %s", h->last_error());
    }
    int sends = 0;
    for (int p = 0; p < e->size; p++) {
        if (p == e->rank) continue;
        e->peers[p].cma_recv = (mine[p / 8] >> (p % 8)) & 1;
        e->peers[p].cma_send = e->cfg.cma && ((all[(size_t)p * bytes + (size_t)e->rank / 8] >> (e->rank % 8)) & 1);
        sends += e->peers[p].cma_send;
    }
    if (local > 0 && e->cfg.cma)
        h->log(readable == local ? PLAIT_LOG_DEBUG : PLAIT_LOG_INFO, TCP_COMPONENT,
               "rank %d: single copy from %d of %d same-host peers%s%s%s (to %d); messages of %llu bytes and more",
               e->rank, readable, local, why ? " (process_vm_readv: " : "", why ? strerror(why) : "", why ? ")" : "",
               sends, (unsigned long long)e->cfg.cma_min);
    free(mine);
    free(all);
    return PLAIT_OK;
}

void tcp_queue_ctrl(tcp_engine *e, int peer, uint8_t type, const tcp_frame *like, const void *payload) {
    tcp_peer *pp = &e->peers[peer];
    if (pp->lost) return;
    tcp_req *r = tcp_req_new(e);
    if (!r) {
        tcp_fail_peer(e, peer, PLAIT_ERR_NO_MEMORY, "out of memory queueing a control frame");
        return;
    }
    r->kind = TCP_CTRL;
    r->peer = peer;
    memcpy(r->ctrl, payload, sizeof r->ctrl);
    tcp_chunk *k = &r->one;
    r->chunks = k;
    r->chunks_left = 1;
    k->next = NULL;
    k->req = r;
    k->data = (const char *)r->ctrl;
    k->len = sizeof r->ctrl;
    k->sent = 0;
    k->hdr = (tcp_frame){.magic = TCP_FRAME_MAGIC, .version = TCP_WIRE_VERSION, .type = type, .comm_id = like->comm_id,
                         .tag = like->tag, .seq = like->seq, .chunk_len = (uint32_t)sizeof r->ctrl};
    /* the least loaded stream */
    int s = 0;
    for (int i = 1; i < e->cfg.streams; i++)
        if (pp->conns[i].tx_queued < pp->conns[s].tx_queued) s = i;
    tcp_conn *c = &pp->conns[s];
    if (c->txq_tail) c->txq_tail->next = k;
    else c->txq = k;
    c->txq_tail = k;
    if (c->tx_queued == 0) e->tx_pending++;
    c->tx_queued += sizeof k->hdr + k->len;
    if (c->txq == k) tcp_conn_flush(e, c);
}

void tcp_cma_ack(tcp_engine *e, int peer, uint64_t token, uint32_t status) {
    tcp_rts_ack a = {token, status, 0};
    tcp_frame like = {0};
    tcp_queue_ctrl(e, peer, TCP_FRAME_ACK, &like, &a);
}

void tcp_cma_deliver(tcp_engine *e, tcp_inmsg *m, tcp_req *r) {
    if (e->peers[r->peer].lost) { /* never read a process we lost: its pid may be reused */
        char name[96];
        tcp_peer_name(r->comm, r->peer, name, sizeof name);
        tcp_req_fail(e, r, e->peers[r->peer].lost_status, "tcp: receive (tag %u) from %s failed: %s", r->tag, name,
                     e->peers[r->peer].lost_why);
        return;
    }
    int err = m->len ? read_remote(e->peers[r->peer].pid, r->buf, m->raddr, (size_t)m->len) : 0;
    tcp_cma_ack(e, r->peer, m->rtoken, (uint32_t)err);
    if (err == ESRCH) {
        /* a rank going down sends why before it exits: its ABORT frame may
         * wait on a socket, also behind the RTS being handled, and then
         * names the cause */
        tcp_peer *peer = &e->peers[r->peer];
        (void)tcp_read_last_words(e, r->peer, 1);
        if (!peer->lost) {
            char why[160];
            snprintf(why, sizeof why, "rank %d's process is gone (found while reading a message from it directly)",
                     r->peer);
            tcp_fail_peer(e, r->peer, PLAIT_ERR_PEER_LOST, why);
        }
        char name[96];
        tcp_peer_name(r->comm, r->peer, name, sizeof name);
        tcp_req_fail(e, r, PLAIT_ERR_PEER_LOST, "tcp: receive (tag %u) from %s failed: %s", r->tag, name,
                     peer->lost_why);
        return;
    }
    if (err) {
        char name[96];
        tcp_peer_name(r->comm, r->peer, name, sizeof name);
        tcp_req_fail(e, r, PLAIT_ERR_SYSTEM, "tcp: reading a %llu-byte message (tag %u) directly from %s failed: %s",
                     (unsigned long long)m->len, r->tag, name, strerror(err));
        return;
    }
    e->stat_cma++;
    e->stat_cma_bytes += m->len;
    r->len = (size_t)m->len;
    tcp_req_done(e, r);
}

/* The ACK for one of our RTS sends. */
static int on_ack(tcp_engine *e, tcp_conn *c, const tcp_rts_ack *a) {
    tcp_peer *pp = &e->peers[c->peer];
    for (tcp_req **rp = &pp->awaiting; *rp; rp = &(*rp)->anext) {
        tcp_req *r = *rp;
        if (r->token != a->token) continue;
        *rp = r->anext;
        r->anext = NULL;
        if (a->status == 0) {
            r->len = r->cap;
            tcp_req_done(e, r);
        } else {
            char name[96];
            tcp_peer_name(r->comm, c->peer, name, sizeof name);
            tcp_req_fail(e, r, PLAIT_ERR_SYSTEM, "tcp: %s could not read this %zu-byte message (tag %u) directly: %s",
                         name, r->cap, r->tag, strerror((int)a->status));
        }
        return 0;
    }
    tcp_protocol_error(e, c, "acknowledgement for unknown message %llu", (unsigned long long)a->token);
    return -1;
}

int tcp_cma_control(tcp_engine *e, tcp_conn *c, const tcp_frame *h, const unsigned char *payload) {
    if (h->type == TCP_FRAME_ACK) {
        if (h->offset != 0 || h->msg_len != 0) {
            tcp_protocol_error(e, c, "malformed acknowledgement frame");
            return -1;
        }
        tcp_rts_ack a;
        memcpy(&a, payload, sizeof a);
        return on_ack(e, c, &a);
    }
    /* RTS: a message whose bytes we are to read from the sender */
    if (!e->peers[c->peer].cma_recv) {
        tcp_protocol_error(e, c, "single-copy announcement, but we never agreed to read from rank %d", c->peer);
        return -1;
    }
    if (!tcp_comm_by_id(e, h->comm_id)) {
        tcp_protocol_error(e, c, "frame for unknown communicator %u", h->comm_id);
        return -1;
    }
    if (h->msg_len == 0 || h->offset != 0 || h->msg_len > e->cfg.max_message) {
        tcp_protocol_error(e, c, "single-copy announcement of %llu bytes (offset %llu) is not acceptable",
                           (unsigned long long)h->msg_len, (unsigned long long)h->offset);
        return -1;
    }
    tcp_rts rts;
    memcpy(&rts, payload, sizeof rts);
    tcp_chan *ch = tcp_chan_find(e, c->peer, h->comm_id, h->tag, 1);
    if (!ch) {
        tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
        return -1;
    }
    for (tcp_inmsg *m = ch->msgs; m; m = m->next)
        if (m->seq == h->seq) {
            tcp_protocol_error(e, c, "message %u (tag %u) announced twice", h->seq, h->tag);
            return -1;
        }
    tcp_inmsg *m = calloc(1, sizeof *m);
    if (!m) {
        tcp_fail_peer(e, c->peer, PLAIT_ERR_NO_MEMORY, "out of memory tracking a message");
        return -1;
    }
    m->seq = h->seq;
    m->chan = ch;
    m->len = m->reserved = m->got = h->msg_len;
    m->rts = 1;
    m->raddr = rts.addr;
    m->rtoken = rts.token;
    e->stat_msgs++;
    e->stat_bytes += m->len;
    for (tcp_req *p = ch->posted, *prev = NULL; p; prev = p, p = p->next) {
        if (p->seq != h->seq) continue;
        if (prev) prev->next = p->next;
        else ch->posted = p->next;
        if (ch->posted_tail == p) ch->posted_tail = prev;
        if (m->len > p->cap) {
            char name[96];
            tcp_peer_name(p->comm, p->peer, name, sizeof name);
            tcp_req_fail(e, p, PLAIT_ERR_PROTOCOL, "tcp: message of %llu bytes (tag %u) from %s is longer than the "
                                                  "receive buffer of %zu bytes", (unsigned long long)m->len, p->tag,
                         name, p->cap);
            tcp_cma_ack(e, c->peer, m->rtoken, 0);
        } else {
            tcp_cma_deliver(e, m, p);
        }
        free(m);
        return 0;
    }
    /* not posted yet: nothing to buffer, the bytes wait in the sender */
    m->next = ch->msgs;
    ch->msgs = m;
    return 0;
}
