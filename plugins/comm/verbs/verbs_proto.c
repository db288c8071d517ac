/* Pure protocol logic of the verbs plugin; see verbs_proto.h. */
#include "verbs_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- framing ----------------------------------------------------------- */

vb_hdr vp_header(uint8_t type, uint16_t grant, uint32_t comm_id, uint32_t tag, uint32_t seq, uint64_t len) {
    vb_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = VB_HDR_MAGIC;
    h.version = VB_WIRE_VERSION;
    h.type = type;
    h.grant = grant;
    h.comm_id = comm_id;
    h.tag = tag;
    h.seq = seq;
    h.len = len;
    return h;
}

size_t vp_wire_len(int type, uint64_t len) {
    switch (type) {
    case VB_EAGER: return sizeof(vb_hdr) + (size_t)len;
    case VB_RTS: return sizeof(vb_hdr) + sizeof(vb_rts);
    case VB_FIN: return sizeof(vb_hdr) + sizeof(vb_fin);
    case VB_ABORT: return sizeof(vb_hdr) + (size_t)(len < VB_ABORT_MAX ? len : VB_ABORT_MAX);
    default: return sizeof(vb_hdr);
    }
}

int vp_check(const void *wire, size_t wire_len, uint32_t eager_max, uint64_t max_message, char *why, size_t cap) {
    vb_hdr h;
    if (wire_len < sizeof h) {
        snprintf(why, cap, "message of %zu bytes is shorter than a header", wire_len);
        return -1;
    }
    memcpy(&h, wire, sizeof h);
    size_t body = wire_len - sizeof h;
    if (h.magic != VB_HDR_MAGIC) {
        snprintf(why, cap, "bad header magic 0x%04x", h.magic);
        return -1;
    }
    if (h.version != VB_WIRE_VERSION || h.flags != 0 || h.reserved != 0) {
        snprintf(why, cap, "header version %u flags %u not understood (ours: version %u)", h.version, h.flags,
                 VB_WIRE_VERSION);
        return -1;
    }
    switch (h.type) {
    case VB_EAGER:
        if (h.len != body || h.len > eager_max) {
            snprintf(why, cap, "eager message announces %llu bytes but carries %zu (eager_max %u)",
                     (unsigned long long)h.len, body, eager_max);
            return -1;
        }
        return VB_EAGER;
    case VB_RTS:
        if (body != sizeof(vb_rts) || h.len == 0 || h.len > max_message) {
            snprintf(why, cap, "RTS of %zu payload bytes announcing a %llu-byte message (limit %llu)", body,
                     (unsigned long long)h.len, (unsigned long long)max_message);
            return -1;
        }
        return VB_RTS;
    case VB_FIN:
        if (body != sizeof(vb_fin) || h.len != 0) {
            snprintf(why, cap, "FIN of %zu payload bytes", body);
            return -1;
        }
        return VB_FIN;
    case VB_CREDIT:
        if (body != 0 || h.len != 0) {
            snprintf(why, cap, "CREDIT with %zu payload bytes", body);
            return -1;
        }
        return VB_CREDIT;
    case VB_ABORT:
        if (body > VB_ABORT_MAX || h.len != body) {
            snprintf(why, cap, "ABORT with %zu bytes of text", body);
            return -1;
        }
        return VB_ABORT;
    default: snprintf(why, cap, "unknown message type %u", h.type); return -1;
    }
}

uint64_t vp_chunks(uint64_t len, uint64_t max_chunk) {
    if (max_chunk == 0 || len == 0) return 1;
    return (len + max_chunk - 1) / max_chunk;
}

uint64_t vp_chunk_len(uint64_t len, uint64_t max_chunk, uint64_t i) {
    if (max_chunk == 0) return i == 0 ? len : 0;
    uint64_t off = i * max_chunk;
    if (off >= len) return 0;
    return len - off < max_chunk ? len - off : max_chunk;
}

/* ---- credits ------------------------------------------------------------ */

void vp_credit_init(vp_credit *c, int32_t my_window, int32_t peer_window) {
    c->credits = peer_window;
    c->to_return = 0;
    c->window = my_window;
}

int vp_credit_take(vp_credit *c, int type) {
    if (!vp_counted(type)) return 1;
    if (c->credits <= 0) return 0;
    c->credits--;
    return 1;
}

uint16_t vp_credit_grant(vp_credit *c) {
    int32_t g = c->to_return > 0xffff ? 0xffff : c->to_return;
    c->to_return -= g;
    return (uint16_t)g;
}

void vp_credit_received(vp_credit *c, int type, uint16_t grant) {
    c->credits += grant;
    if (vp_counted(type)) c->to_return++;
}

int vp_credit_due(const vp_credit *c) {
    int32_t half = c->window / 2;
    return c->to_return > 0 && c->to_return >= (half > 0 ? half : 1);
}

/* ---- queues and channels -------------------------------------------------- */

void vp_queue_push(vp_queue *q, vp_link *x) {
    x->next = NULL;
    if (q->tail) q->tail->next = x;
    else q->head = x;
    q->tail = x;
}

vp_link *vp_queue_pop(vp_queue *q) {
    vp_link *x = q->head;
    if (!x) return NULL;
    q->head = x->next;
    if (!q->head) q->tail = NULL;
    x->next = NULL;
    return x;
}

int vp_queue_remove(vp_queue *q, vp_link *x) {
    vp_link *prev = NULL;
    for (vp_link *y = q->head; y; prev = y, y = y->next) {
        if (y != x) continue;
        if (prev) prev->next = y->next;
        else q->head = y->next;
        if (q->tail == y) q->tail = prev;
        y->next = NULL;
        return 1;
    }
    return 0;
}

static size_t chan_hash(int peer, uint32_t comm, uint32_t tag) {
    uint64_t h = ((uint64_t)(uint32_t)peer * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)comm << 32 | tag);
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    return (size_t)(h ^ (h >> 32));
}

int vp_table_init(vp_table *t) {
    t->n_buckets = 64;
    t->n = 0;
    t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
    return t->buckets ? 0 : -1;
}

static void grow(vp_table *t) {
    size_t nb = t->n_buckets * 2;
    vp_chan **b = calloc(nb, sizeof *b);
    if (!b) return; /* keep the longer chains */
    for (size_t i = 0; i < t->n_buckets; i++)
        for (vp_chan *c = t->buckets[i], *nx; c; c = nx) {
            nx = c->hnext;
            size_t k = chan_hash(c->peer, c->comm_id, c->tag) & (nb - 1);
            c->hnext = b[k];
            b[k] = c;
        }
    free(t->buckets);
    t->buckets = b;
    t->n_buckets = nb;
}

vp_chan *vp_chan_find(vp_table *t, int peer, uint32_t comm_id, uint32_t tag, int create) {
    size_t k = chan_hash(peer, comm_id, tag) & (t->n_buckets - 1);
    for (vp_chan *c = t->buckets[k]; c; c = c->hnext)
        if (c->peer == peer && c->comm_id == comm_id && c->tag == tag) return c;
    if (!create) return NULL;
    if (t->n >= t->n_buckets) {
        grow(t);
        k = chan_hash(peer, comm_id, tag) & (t->n_buckets - 1);
    }
    vp_chan *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->peer = peer;
    c->comm_id = comm_id;
    c->tag = tag;
    c->hnext = t->buckets[k];
    t->buckets[k] = c;
    t->n++;
    return c;
}

void vp_table_each(vp_table *t, void (*fn)(vp_chan *ch, void *ctx), void *ctx) {
    for (size_t i = 0; i < t->n_buckets; i++)
        for (vp_chan *c = t->buckets[i]; c; c = c->hnext) fn(c, ctx);
}

void vp_table_drop(vp_table *t, uint32_t comm_id, int all, void (*drop)(vp_link *x, int posted, void *ctx),
                   void *ctx) {
    for (size_t i = 0; t->buckets && i < t->n_buckets; i++)
        for (vp_chan **pp = &t->buckets[i]; *pp;) {
            vp_chan *c = *pp;
            if (!all && c->comm_id != comm_id) {
                pp = &c->hnext;
                continue;
            }
            *pp = c->hnext;
            for (vp_link *x; (x = vp_queue_pop(&c->posted));)
                if (drop) drop(x, 1, ctx);
            for (vp_link *x; (x = vp_queue_pop(&c->unexpected));)
                if (drop) drop(x, 0, ctx);
            free(c);
            t->n--;
        }
}

void vp_table_free(vp_table *t) {
    vp_table_drop(t, 0, 1, NULL, NULL);
    free(t->buckets);
    t->buckets = NULL;
    t->n_buckets = 0;
}

/* ---- matching -------------------------------------------------------------- */

vp_link *vp_post_recv(vp_chan *ch, vp_link *recv) {
    vp_link *m = vp_queue_pop(&ch->unexpected);
    if (m) return m;
    vp_queue_push(&ch->posted, recv);
    return NULL;
}

int vp_arrive(vp_chan *ch, uint32_t seq, vp_link *msg, vp_link **recv) {
    *recv = NULL;
    if (seq != ch->recv_seq) return -1;
    ch->recv_seq++;
    vp_link *r = vp_queue_pop(&ch->posted);
    if (r) {
        *recv = r;
        return 0;
    }
    vp_queue_push(&ch->unexpected, msg);
    return 0;
}
