/*
 * Point-to-point helpers of the collective algorithms: every plugin request
 * of the running collective sits in a slot of its context, so a timeout can
 * name every peer still outstanding and a failure can release them all.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll/coll.h"
#include "commstate/comm_watchdog.h"
#include "runtime/error.h"
#include "runtime/memory.h"

void plait_coll_describe(const plait_coll_ctx *c, char *buf, size_t len) {
    const plait_coll_args *a = c->a;
    char where[128];
    plait_comm_where(c->comm, where, sizeof where);
    char what[96] = "";
    size_t bytes = a->count * c->esz;
    switch (a->kind) {
    case PLAIT_COLL_BARRIER: snprintf(what, sizeof what, "%s", plait_coll_algo_name(c->algo)); break;
    case PLAIT_COLL_ALLREDUCE:
    case PLAIT_COLL_REDUCE_SCATTER:
        snprintf(what, sizeof what, "%zu elements = %zu B, %s %s, %s", a->count, bytes,
                 plait_dtype_name(a->dtype), plait_redop_name(a->op), plait_coll_algo_name(c->algo));
        break;
    case PLAIT_COLL_REDUCE:
        snprintf(what, sizeof what, "%zu elements = %zu B, %s %s, root %d, %s", a->count, bytes,
                 plait_dtype_name(a->dtype), plait_redop_name(a->op), a->root,
                 plait_coll_algo_name(c->algo));
        break;
    case PLAIT_COLL_BROADCAST:
    case PLAIT_COLL_GATHER:
    case PLAIT_COLL_SCATTER:
        snprintf(what, sizeof what, "%zu elements = %zu B, %s, root %d, %s", a->count, bytes,
                 plait_dtype_name(a->dtype), a->root, plait_coll_algo_name(c->algo));
        break;
    default:
        snprintf(what, sizeof what, "%zu elements = %zu B, %s, %s", a->count, bytes,
                 plait_dtype_name(a->dtype), plait_coll_algo_name(c->algo));
        break;
    }
    if (a->label[0])
        snprintf(buf, len, "%s #%llu '%s' (%s) on %s", plait_coll_kind_name(a->kind),
                 (unsigned long long)a->seq, a->label, what, where);
    else
        snprintf(buf, len, "%s #%llu (%s) on %s", plait_coll_kind_name(a->kind),
                 (unsigned long long)a->seq, what, where);
}

void plait_coll_copy(void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memmove(dst, src, bytes);
}

void *plait_coll_scratch(plait_coll_ctx *c, size_t bytes) {
    plait_comm *comm = c->comm;
    if (bytes <= comm->scratch_bytes) return comm->scratch;
    if (comm->scratch_leaked) {
        plait_set_error(PLAIT_ERR_INTERNAL, "scratch memory of '%s' is still in use by a failed "
                                            "operation", comm->name);
        return NULL;
    }
    plait_free(comm->scratch);
    comm->scratch = NULL;
    comm->scratch_bytes = 0;
    /* grow geometrically so slowly growing sizes do not reallocate each time */
    size_t want = bytes + bytes / 4;
    void *p = plait_alloc(want, PLAIT_MEM_HOST, 64, "comm scratch");
    if (!p) return NULL;
    comm->scratch = p;
    comm->scratch_bytes = want;
    return p;
}

static int slot_get(plait_coll_ctx *c) {
    if (c->free_slot < 0) {
        int cap = c->n_slots ? c->n_slots * 2 : 16;
        plait_coll_slot *s = realloc(c->slots, (size_t)cap * sizeof *s);
        if (!s) return -1;
        for (int i = c->n_slots; i < cap; i++) {
            s[i].preq = NULL;
            s[i].next_free = i + 1 < cap ? i + 1 : -1;
        }
        c->slots = s;
        c->free_slot = c->n_slots;
        c->n_slots = cap;
    }
    int h = c->free_slot;
    c->free_slot = c->slots[h].next_free;
    c->slots[h].next_free = -2; /* in use */
    c->active++;
    return h;
}

static void slot_put(plait_coll_ctx *c, int h) {
    c->slots[h].preq = NULL;
    c->slots[h].next_free = c->free_slot;
    c->free_slot = h;
    c->active--;
}

/* A plugin function's status, with a message where the plugin failed
 * without one (plait/comm.h: a failing function calls host->set_error
 * first): without this the caller would wrap whatever message an earlier,
 * unrelated call left behind. `sets`: plait_error_sets() before the call. */
static plait_status plugin_said(plait_status st, uint64_t sets, const char *fn) {
    if (st != PLAIT_OK && plait_error_sets() == sets)
        plait_set_error(st, "the comm plugin's %s() returned '%s' without a message (plait/comm.h: a failing function "
                            "calls host->set_error first)",
                        fn, plait_status_name(st));
    return st;
}

static plait_status post(plait_coll_ctx *c, int is_send, void *buf, size_t bytes, int peer,
                         unsigned phase, int *handle) {
    *handle = -1;
    int h = slot_get(c);
    if (h < 0) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_comm *comm = c->comm;
    plait_buffer b = {.ptr = buf, .bytes = bytes, .kind = c->a->mem_kind, .device = -1};
    uint32_t tag = plait_coll_tag(c->a->seq, phase);
    void *preq = NULL;
    uint64_t sets = plait_error_sets();
    plait_watchdog_enter_comm(comm, is_send ? "isend" : "irecv", peer, 0);
    plait_status st = is_send ? comm->ops->isend(comm->pcoll, &b, peer, tag, NULL, &preq)
                              : comm->ops->irecv(comm->pcoll, &b, peer, tag, NULL, &preq);
    plait_watchdog_leave();
    st = plugin_said(st, sets, is_send ? "isend" : "irecv");
    if (st != PLAIT_OK) {
        slot_put(c, h);
        char d[512];
        plait_coll_describe(c, d, sizeof d);
        return plait_wrap_error(st, "%s: posting a %s of %zu B %s rank %d (world rank %d)", d,
                                is_send ? "send" : "receive", bytes, is_send ? "to" : "from", peer,
                                comm->world_ranks[peer]);
    }
    plait_coll_slot *s = &c->slots[h];
    s->preq = preq;
    s->bytes = bytes;
    s->peer = peer;
    s->is_send = is_send;
    if (is_send) atomic_fetch_add(&comm->bytes_sent, bytes);
    *handle = h;
    return PLAIT_OK;
}

plait_status plait_coll_isend(plait_coll_ctx *c, const void *buf, size_t bytes, int peer,
                              unsigned phase, int *handle) {
    return post(c, 1, (void *)(uintptr_t)buf, bytes, peer, phase, handle);
}

plait_status plait_coll_irecv(plait_coll_ctx *c, void *buf, size_t bytes, int peer, unsigned phase,
                              int *handle) {
    return post(c, 0, buf, bytes, peer, phase, handle);
}

/* List the peers of every outstanding request into buf, grouped:
 * "2 receives from rank 1 (world rank 1), 1 send to rank 3 (world rank 3)". */
static void pending_peers(const plait_coll_ctx *c, char *buf, size_t len) {
    size_t used = 0;
    buf[0] = '\0';
    int listed = 0;
    for (int i = 0; i < c->n_slots && used < len; i++) {
        const plait_coll_slot *s = &c->slots[i];
        if (s->next_free != -2) continue;
        int seen = 0, count = 0;
        for (int j = 0; j < c->n_slots; j++) {
            const plait_coll_slot *t = &c->slots[j];
            if (t->next_free != -2 || t->peer != s->peer || t->is_send != s->is_send) continue;
            if (j < i) seen = 1;
            count++;
        }
        if (seen) continue;
        if (listed == 8) {
            used += (size_t)snprintf(buf + used, len - used, ", ...");
            break;
        }
        used += (size_t)snprintf(buf + used, len - used, "%s%d %s rank %d (world rank %d)",
                                 listed ? ", " : "", count,
                                 s->is_send ? (count > 1 ? "sends to" : "send to")
                                            : (count > 1 ? "receives from" : "receive from"),
                                 s->peer, c->comm->world_ranks[s->peer]);
        listed++;
    }
}

static plait_status completed(plait_coll_ctx *c, int *handle, plait_status st, size_t bytes) {
    int h = *handle;
    plait_coll_slot *s = &c->slots[h];
    plait_comm *comm = c->comm;
    if (st == PLAIT_OK && !s->is_send && bytes != s->bytes) {
        char d[512];
        plait_coll_describe(c, d, sizeof d);
        plait_set_error(PLAIT_ERR_PROTOCOL,
                        "%s: received %zu B from rank %d (world rank %d) where %zu B were expected: "
                        "the ranks called this collective with different arguments (set [comm] "
                        "check_collectives = true to compare them)",
                        d, bytes, s->peer, comm->world_ranks[s->peer], s->bytes);
        slot_put(c, h);
        *handle = -1;
        return PLAIT_ERR_PROTOCOL;
    }
    if (st == PLAIT_OK) {
        if (!s->is_send) atomic_fetch_add(&comm->bytes_received, bytes);
        slot_put(c, h);
        *handle = -1;
        return PLAIT_OK;
    }
    char d[512], peers[512];
    plait_coll_describe(c, d, sizeof d);
    if (st == PLAIT_ERR_TIMEOUT) {
        /* still pending in the plugin: stays in its slot for drain() */
        pending_peers(c, peers, sizeof peers);
        return plait_set_error(st, "%s: timed out after %g s waiting to %s rank %d (world rank %d); "
                                   "outstanding: %s",
                               d, comm->settings.timeout_s, s->is_send ? "send to" : "receive from",
                               s->peer, comm->world_ranks[s->peer], peers);
    }
    int peer = s->peer, is_send = s->is_send;
    slot_put(c, h);
    *handle = -1;
    return plait_wrap_error(st, "%s: %s rank %d (world rank %d)", d,
                            is_send ? "sending to" : "receiving from", peer, comm->world_ranks[peer]);
}

plait_status plait_coll_wait(plait_coll_ctx *c, int *handle) {
    if (*handle < 0) return PLAIT_OK;
    plait_comm *comm = c->comm;
    size_t bytes = 0;
    uint64_t sets = plait_error_sets();
    plait_watchdog_enter_comm(comm, "wait", c->slots[*handle].peer, comm->settings.timeout_s);
    plait_status st = comm->ops->wait(comm->pcoll, c->slots[*handle].preq, comm->settings.timeout_s, &bytes);
    plait_watchdog_leave();
    st = plugin_said(st, sets, "wait");
    return completed(c, handle, st, bytes);
}

plait_status plait_coll_test(plait_coll_ctx *c, int *handle, int *done) {
    *done = 1;
    if (*handle < 0) return PLAIT_OK;
    plait_comm *comm = c->comm;
    size_t bytes = 0;
    int d = 0;
    uint64_t sets = plait_error_sets();
    plait_watchdog_enter_comm(comm, "test", c->slots[*handle].peer, 0);
    plait_status st = comm->ops->test(comm->pcoll, c->slots[*handle].preq, &d, &bytes);
    plait_watchdog_leave();
    st = plugin_said(st, sets, "test");
    if (st == PLAIT_OK && !d) {
        *done = 0;
        return PLAIT_OK;
    }
    return completed(c, handle, st, bytes);
}

plait_status plait_coll_waitall(plait_coll_ctx *c, int *handles, int n) {
    for (int i = 0; i < n; i++) {
        plait_status st = plait_coll_wait(c, &handles[i]);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

plait_status plait_coll_sendrecv(plait_coll_ctx *c, const void *sbuf, size_t sbytes, int dst,
                                 void *rbuf, size_t rbytes, int src, unsigned phase) {
    int h[2] = {-1, -1};
    plait_status st = plait_coll_irecv(c, rbuf, rbytes, src, phase, &h[0]);
    if (st == PLAIT_OK) st = plait_coll_isend(c, sbuf, sbytes, dst, phase, &h[1]);
    if (st == PLAIT_OK) st = plait_coll_waitall(c, h, 2);
    return st;
}

void plait_coll_drain(plait_coll_ctx *c) {
    if (!c->active) return;
    plait_comm *comm = c->comm;
    if (!comm->ops->abort) {
        /* Without abort() the plugin may still write into these buffers:
         * keep the scratch memory alive for the process's lifetime. */
        comm->scratch_leaked = 1;
        return;
    }
    for (int i = 0; i < c->n_slots; i++) {
        if (c->slots[i].next_free != -2) continue;
        plait_watchdog_enter_comm(comm, "wait", c->slots[i].peer, 2.0);
        plait_status st = comm->ops->wait(comm->pcoll, c->slots[i].preq, 2.0, NULL);
        plait_watchdog_leave();
        if (st == PLAIT_ERR_TIMEOUT) {
            comm->scratch_leaked = 1; /* abort did not release it */
            continue;
        }
        slot_put(c, i);
    }
}
