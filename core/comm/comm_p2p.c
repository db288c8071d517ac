/*
 * User point-to-point operations (host->coll->send/recv) on a communicator's
 * p2p plugin communicator. Posting and testing hold comm->p2p_lock briefly;
 * a wait holds it while sleeping in the plugin (the plugin lets one thread
 * use a communicator at a time), so drive one communicator's p2p requests
 * from one thread.
 *
 * Device buffers on a host-memory transport travel through a pinned buffer
 * of the communicator's staging pool (staging.h), whole: a send copies
 * out, then sends; a receive copies back once the message is in. One
 * message on the wire whatever the memory on either side, so a device
 * buffer and a host buffer can be peers; the copies are not overlapped
 * with the transfer (the collectives' staging is).
 *
 * Host buffers on a transport that moves device memory only (nccl; the
 * run's control data, a checkpoint's gathered shards) travel the other way
 * round: through a device scratch buffer of the message's size, filled
 * before a send, copied back after a receive, freed with the request.
 *
 * Float32 values may travel as bf16 (plait_comm_p2p_bf16: a bf16 run's
 * pipeline activations and their gradients): encoded on the host side of
 * the transport (after the staging copy of device memory) and decoded
 * there on arrival, half the bytes on the wire. The device never sees the
 * bf16 form, so no device kernel is needed; a transport that moves the
 * device memory itself cannot carry it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "commstate/comm_device.h"
#include "commstate/comm_watchdog.h"
#include "staging/staging.h"
#include "coll/compress.h"
#include "coll/reduce.h"
#include "comm/comm_p2p.h"
#include "commstate/request.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/trace.h"

void plait_p2p_describe(const plait_request *r, char *buf, size_t len) {
    char where[128];
    plait_comm_where(r->comm, where, sizeof where);
    snprintf(buf, len, "%s #%llu %s rank %d (world rank %d), tag %u, %zu bytes, on %s",
             r->is_send ? "send" : "recv", (unsigned long long)r->p2p_seq,
             r->is_send ? "to" : "from", r->peer, r->comm->world_ranks[r->peer], r->tag, r->bytes,
             where);
}

/* A host buffer's device stand-in for a transport that moves device memory
 * only; without a device (or one the transport does not move) the host
 * buffer goes as it is and the transport refuses it, saying why. */
static plait_status through_device(plait_comm *comm, plait_request *r, void *buf, plait_buffer *b) {
    const plait_comm_device *dev = plait_comm_device_of(comm);
    if (!dev || !dev->alloc || !dev->free || !(comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(dev->kind))) return PLAIT_OK;
    if (!(r->scratch = dev->alloc(r->bytes, "comm p2p scratch")))
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "no device memory for a %zu-byte scratch buffer", r->bytes);
    r->scratch_dev = dev;
    r->host = buf;
    *b = (plait_buffer){.ptr = r->scratch, .bytes = r->bytes, .kind = dev->kind, .device = -1};
    plait_status st = r->is_send ? dev->copy(r->scratch, buf, r->bytes, PLAIT_COPY_TO_DEVICE) : PLAIT_OK;
    if (st != PLAIT_OK) return plait_wrap_error(st, "carrying a host buffer through device memory");
    /* the transport's stream follows the copy in only through an event */
    r->ready = plait_comm_ready_take(dev, dev->kind, NULL, &r->own_ready);
    return PLAIT_OK;
}

/* The buffer the transport gets for `buf` of `kind`: itself where the
 * transport declares the kind (pinned host memory goes as host memory),
 * else a staging buffer, filled from the device for a send. */
static plait_status transport_buffer(plait_comm *comm, plait_request *r, void *buf, plait_mem_kind kind,
                                     plait_buffer *b) {
    *b = (plait_buffer){.ptr = buf, .bytes = r->bytes, .kind = kind, .device = -1};
    if (comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(kind)) return PLAIT_OK;
    b->kind = PLAIT_MEM_HOST;
    if (plait_mem_is_host(kind) && !(comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST)) && r->bytes)
        return through_device(comm, r, buf, b);
    if (plait_mem_is_host(kind) || !r->bytes) return PLAIT_OK;
    plait_staging *sg = NULL;
    plait_status st = plait_staging_of(comm, &sg);
    if (st != PLAIT_OK) return st;
    if (!(r->staged = plait_staging_borrow(sg, r->bytes))) return PLAIT_ERR_NO_MEMORY;
    r->dev = buf;
    b->ptr = r->staged;
    if (comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED)) b->kind = PLAIT_MEM_HOST_PINNED;
    if (!r->is_send) return PLAIT_OK;
    if (r->ready && (st = plait_comm_ready_wait(plait_comm_device_of(comm), r->ready)) != PLAIT_OK) return st;
    plait_staging_copy j = {.dir = PLAIT_COPY_TO_HOST, .host = r->staged, .dev = buf, .bytes = r->bytes, .blocks = 1,
                          .on_comm = r->ready != NULL, .device = plait_comm_device_of(comm)};
    st = plait_staging_copy_now(&j);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "staging a device buffer");
}

int plait_comm_p2p_bf16_carried(const plait_comm *comm, plait_mem_kind kind) {
    const uint32_t kinds = comm->ops->mem_kinds;
    if (plait_mem_is_host(kind))
        return (kinds & PLAIT_MEM_KIND_BIT(kind)) || (kinds & PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST));
    return !(kinds & PLAIT_MEM_KIND_BIT(kind));
}

/* The transport's buffer for a bf16 message of r->bytes / 2 float32 values
 * at `buf`: their bf16 form in host memory, encoded for a send (device
 * memory staged first, its float32 values and their bf16 form in one
 * pinned buffer). */
static plait_status wire_buffer(plait_comm *comm, plait_request *r, float *buf, plait_mem_kind kind, plait_buffer *b) {
    const size_t n = r->bytes / 2, fbytes = n * sizeof(float);
    if (!plait_comm_p2p_bf16_carried(comm, kind))
        return plait_set_error(PLAIT_ERR_UNSUPPORTED,
                               "a bf16 message needs a transport that moves host memory; "
                               "this one moves %s",
                               plait_mem_is_host(kind) ? "device memory only" : "the device buffer itself");
    *b = (plait_buffer){.ptr = NULL, .bytes = r->bytes, .kind = PLAIT_MEM_HOST, .device = -1};
    if (!n) return PLAIT_OK;
    if (plait_mem_is_host(kind)) {
        if (!(r->wire = malloc(r->bytes)))
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "no memory for a %zu-byte bf16 message", r->bytes);
        r->wire_owned = 1;
        r->floats = buf;
    } else {
        plait_staging *sg = NULL;
        plait_status st = plait_staging_of(comm, &sg);
        if (st != PLAIT_OK) return st;
        if (!(r->staged = plait_staging_borrow(sg, fbytes + r->bytes))) return PLAIT_ERR_NO_MEMORY;
        r->dev = buf;
        r->floats = r->staged;
        r->wire = (char *)r->staged + fbytes; /* 4-byte aligned: fbytes is a multiple of 4 */
        if (comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED)) b->kind = PLAIT_MEM_HOST_PINNED;
        if (r->is_send) {
            if (r->ready && (st = plait_comm_ready_wait(plait_comm_device_of(comm), r->ready)) != PLAIT_OK) return st;
            plait_staging_copy j = {.dir = PLAIT_COPY_TO_HOST,
                                    .host = r->staged,
                                    .dev = (char *)buf,
                                    .bytes = fbytes,
                                    .blocks = 1,
                                    .on_comm = r->ready != NULL,
                                    .device = plait_comm_device_of(comm)};
            if ((st = plait_staging_copy_now(&j)) != PLAIT_OK) return plait_wrap_error(st, "staging a device buffer");
        }
    }
    b->ptr = r->wire;
    if (r->is_send) plait_compress_encode(PLAIT_COMPRESS_BF16, r->wire, r->floats, n, NULL);
    return PLAIT_OK;
}

/* A bf16 message's end: a completed receive widens its values back into
 * the float32 buffer they stand for. */
static void unwire(plait_request *r, int received) {
    if (!r->wire) return;
    if (received) plait_compress_decode(PLAIT_COMPRESS_BF16, r->floats, r->wire, r->bytes / 2);
    if (r->wire_owned) free(r->wire);
    r->wire = NULL;
}

/* Release the staging buffer; a completed receive first copies it back. */
static plait_status unstage(plait_request *r, int received) {
    const size_t host_bytes = r->wire ? r->bytes * 2 : r->bytes; /* a bf16 message's float32 values */
    unwire(r, received);
    plait_status st = PLAIT_OK;
    if (r->scratch) {
        if (received) st = r->scratch_dev->copy(r->host, r->scratch, r->bytes, PLAIT_COPY_TO_HOST);
        r->scratch_dev->free(r->scratch);
        r->scratch = NULL;
    }
    if (!r->staged) return st;
    if (received) {
        /* the buffer's earlier readers on the compute stream come first */
        if (r->ready) st = plait_comm_ready_wait(plait_comm_device_of(r->comm), r->ready);
        plait_staging_copy j = {.dir = PLAIT_COPY_TO_DEVICE,
                                .host = r->staged,
                                .dev = r->dev,
                                .bytes = host_bytes,
                                .blocks = 1,
                                .on_comm = r->ready != NULL,
                                .device = plait_comm_device_of(r->comm)};
        if (st == PLAIT_OK) st = plait_staging_copy_now(&j);
    }
    plait_staging_give_back(r->comm->staging, r->staged);
    r->staged = NULL;
    return st;
}

/* A request's end: its staging buffer back (unstage) and its event released. */
static void release(plait_request *r) {
    plait_comm_ready_release(plait_comm_device_of(r->comm), r->ready, r->own_ready);
    free(r);
}

/* `bf16`: float32 values (dtype PLAIT_F32) that travel as bf16. */
static plait_status post(plait_comm *comm, int is_send, void *buf, size_t count, plait_dtype dtype, int peer,
                         uint32_t tag, plait_mem_kind kind, plait_device_event *ready, int bf16, plait_request **req) {
    if (req) *req = NULL;
    plait_status st = plait_comm_check_usable(comm);
    if (st != PLAIT_OK) return st;
    size_t esz = plait_dtype_size(dtype);
    const char *what = is_send ? "send" : "recv";
    if (!esz) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: unknown dtype %d", what, (int)dtype);
    if (peer < 0 || peer >= comm->size)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: peer %d is not a rank of communicator "
                                                      "'%s' (size %d)", what, peer, comm->name, comm->size);
    if (peer == comm->rank)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: rank %d of '%s' cannot %s itself", what,
                               peer, comm->name, is_send ? "send to" : "receive from");
    if (tag >= PLAIT_USER_TAG_LIMIT)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tag %u is reserved (user tags are below 2^31)",
                               what, tag);
    if (count && !buf) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: NULL buffer", what);
    if (count > SIZE_MAX / esz) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: count overflows", what);
    plait_request *r = calloc(1, sizeof *r);
    if (!r) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    r->kind = PLAIT_REQ_P2P;
    r->comm = comm;
    r->peer = peer;
    r->is_send = is_send;
    r->bytes = count * (bf16 ? 2 : esz);
    r->tag = tag;
    r->posted_ns = plait_trace_begin();
    r->ready = count ? plait_comm_ready_take(plait_comm_device_of(comm), kind, ready, &r->own_ready) : NULL;
    plait_buffer b;
    st = bf16 ? wire_buffer(comm, r, buf, kind, &b) : transport_buffer(comm, r, buf, kind, &b);
    if (st != PLAIT_OK) {
        char d[256];
        plait_p2p_describe(r, d, sizeof d);
        (void)unstage(r, 0);
        release(r);
        return plait_wrap_error(st, "%s", d);
    }
    pthread_mutex_lock(&comm->p2p_lock);
    r->p2p_seq = ++comm->p2p_seq;
    /* device memory the transport moves itself: its stream follows the event */
    if (!r->staged) st = plait_comm_ready_native(plait_comm_device_of(comm), comm->ops, comm->pp2p, b.kind, r->ready, NULL);
    if (st == PLAIT_OK) {
        plait_watchdog_enter_comm(comm, is_send ? "isend" : "irecv", peer, 0);
        st = is_send ? comm->ops->isend(comm->pp2p, &b, peer, tag, NULL, &r->preq)
                     : comm->ops->irecv(comm->pp2p, &b, peer, tag, NULL, &r->preq);
        plait_watchdog_leave();
    }
    pthread_mutex_unlock(&comm->p2p_lock);
    if (st != PLAIT_OK) {
        char d[256];
        plait_p2p_describe(r, d, sizeof d);
        (void)unstage(r, 0);
        release(r);
        return plait_wrap_error(st, "%s", d);
    }
    if (is_send) atomic_fetch_add(&comm->bytes_sent, r->bytes);
    if (req) {
        *req = r;
        return PLAIT_OK;
    }
    return plait_p2p_wait(r);
}

plait_status plait_comm_send(plait_comm *comm, const void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req) {
    return post(comm, 1, (void *)(uintptr_t)buf, count, dtype, peer, tag, PLAIT_MEM_HOST, NULL, 0, req);
}

plait_status plait_comm_recv(plait_comm *comm, void *buf, size_t count, plait_dtype dtype,
                             int peer, uint32_t tag, plait_request **req) {
    return post(comm, 0, buf, count, dtype, peer, tag, PLAIT_MEM_HOST, NULL, 0, req);
}

plait_status plait_comm_p2p(plait_comm *comm, int is_send, const void *buf, size_t count, plait_dtype dtype,
                            int peer, uint32_t tag, plait_mem_kind kind, plait_request **req) {
    return post(comm, is_send, (void *)(uintptr_t)buf, count, dtype, peer, tag, kind, NULL, 0, req);
}

plait_status plait_comm_p2p_bf16(plait_comm *comm, int is_send, const float *buf, size_t count, int peer, uint32_t tag,
                                 plait_mem_kind kind, plait_request **req) {
    return post(comm, is_send, (void *)(uintptr_t)buf, count, PLAIT_F32, peer, tag, kind, NULL, 1, req);
}

plait_status plait_comm_p2p_bf16_after(plait_comm *comm, int is_send, const float *buf, size_t count, int peer,
                                       uint32_t tag, plait_mem_kind kind, plait_device_event *ready,
                                       plait_request **req) {
    return post(comm, is_send, (void *)(uintptr_t)buf, count, PLAIT_F32, peer, tag, kind, ready, 1, req);
}

plait_status plait_comm_p2p_after(plait_comm *comm, int is_send, const void *buf, size_t count, plait_dtype dtype,
                                  int peer, uint32_t tag, plait_mem_kind kind, struct plait_device_event *ready,
                                  plait_request **req) {
    return post(comm, is_send, (void *)(uintptr_t)buf, count, dtype, peer, tag, kind, ready, 0, req);
}

/* A transfer's span, from its post to its completion on the thread that
 * finished it; peers as world ranks, so that trace_merge.c links each send
 * to its receive. */
static void trace_p2p(const plait_request *r) {
    const plait_comm *comm = r->comm;
    plait_trace_args ta = PLAIT_TRACE_ARGS;
    ta.bytes = (int64_t)r->bytes;
    ta.peer = comm->world_ranks[r->peer];
    ta.tag = r->tag;
    ta.group = comm->world_ranks[0];
    ta.members = comm->size;
    ta.posted_ns = (int64_t)r->posted_ns;
    ta.comm = comm->name;
    plait_trace_span(PLAIT_TRACE_P2P, r->is_send ? "send" : "recv", r->posted_ns, plait_clock_now_ns(), &ta);
}

static plait_status finish(plait_request *r, plait_status st, size_t bytes) {
    plait_comm *comm = r->comm;
    if (r->posted_ns && st == PLAIT_OK) trace_p2p(r);
    if (st == PLAIT_OK) {
        if (!r->is_send) atomic_fetch_add(&comm->bytes_received, bytes);
        st = unstage(r, !r->is_send);
        if (st != PLAIT_OK) {
            char d[256];
            plait_p2p_describe(r, d, sizeof d);
            plait_wrap_error(st, "%s", d);
        }
        release(r);
        return st;
    }
    char d[256];
    plait_p2p_describe(r, d, sizeof d);
    if (st == PLAIT_ERR_TIMEOUT)
        plait_set_error(st, "%s: timed out after %g s waiting for rank %d (world rank %d)", d,
                        comm->settings.timeout_s, r->peer, comm->world_ranks[r->peer]);
    else
        plait_wrap_error(st, "%s", d);
    if (st == PLAIT_ERR_TIMEOUT) {
        /* The plugin still owns the request: abort releases it. */
        plait_comm_fail(comm, st, plait_last_error());
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", plait_last_error());
        if (comm->ops->abort) {
            pthread_mutex_lock(&comm->p2p_lock);
            plait_watchdog_enter_comm(comm, "wait", r->peer, 1.0);
            plait_status released = comm->ops->wait(comm->pp2p, r->preq, 1.0, NULL);
            plait_watchdog_leave();
            pthread_mutex_unlock(&comm->p2p_lock);
            if (released != PLAIT_ERR_TIMEOUT) (void)unstage(r, 0);
            release(r);
        } /* else: leaked on purpose; the plugin may still write the buffer */
        plait_set_error(st, "%s", msg);
        return st;
    }
    plait_comm_fail(comm, st, plait_last_error());
    (void)unstage(r, 0);
    release(r);
    return st;
}

plait_status plait_p2p_wait(plait_request *r) {
    plait_comm *comm = r->comm;
    size_t bytes = 0;
    uint64_t t0 = plait_clock_now_ns();
    pthread_mutex_lock(&comm->p2p_lock);
    plait_watchdog_enter_comm(comm, "wait", r->peer, comm->settings.timeout_s);
    plait_status st = comm->ops->wait(comm->pp2p, r->preq, comm->settings.timeout_s, &bytes);
    plait_watchdog_leave();
    pthread_mutex_unlock(&comm->p2p_lock);
    atomic_fetch_add(&comm->wait_ns, plait_clock_now_ns() - t0);
    return finish(r, st, bytes);
}

plait_status plait_p2p_test(plait_request *r, int *done) {
    plait_comm *comm = r->comm;
    size_t bytes = 0;
    int d = 0;
    pthread_mutex_lock(&comm->p2p_lock);
    plait_watchdog_enter_comm(comm, "test", r->peer, 0);
    plait_status st = comm->ops->test(comm->pp2p, r->preq, &d, &bytes);
    plait_watchdog_leave();
    pthread_mutex_unlock(&comm->p2p_lock);
    *done = st != PLAIT_OK || d;
    if (st == PLAIT_OK && !d) return PLAIT_OK;
    return finish(r, st, bytes);
}
