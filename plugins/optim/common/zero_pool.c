/*
 * Working buffers of the ZeRO engine: a pool of float buffers (allocated on
 * demand through host->alloc and kept for reuse, so the pool settles at the
 * step's high-water mark and nothing is allocated in steady state), and the
 * FIFO of asynchronous collectives that hold them.
 *
 * The pool stays within the buffers the partition declares (the start-up memory
 * report). Requests come in the sizes of units, and the sizes one moment
 * needs are not the sizes an earlier moment left free: a request takes a
 * free buffer of at most twice its size, else a new buffer while the partition
 * has room, else space in a buffer that has room left (several small
 * requests share one large buffer, each carved from its unused end), and
 * only then are unused buffers released, smallest first, for a new one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

uint64_t zero_buffer_bytes(const zero *z) {
    size_t per_layer = 0, gather_per_layer = 0;
    for (int32_t l = 0; l < z->n_layer_slots; l++) {
        size_t g = 0, q = 0;
        for (int32_t k = z->grad_first[l]; k < z->grad_first[l + 1]; k++) g += z->units[z->grad_units[k]].padded;
        for (int32_t k = z->gather_first[l]; k < z->gather_first[l + 1]; k++)
            q += zero_gathered_floats(&z->units[z->gather_units[k]]);
        if (g > per_layer) per_layer = g;
        if (q > gather_per_layer) gather_per_layer = q;
    }
    size_t P = z->max_unit, f = (size_t)z->max_inflight;
    size_t elems;
    /* the received slice: over the smaller of the two groups at most */
    size_t n = (size_t)(z->en < z->n ? z->en : z->n);
    if (!z->owns_grads) elems = f * (P + P / n);
    else elems = per_layer + f * P;
    if (z->zero_stage == 3) elems += (size_t)(z->prefetch + 1) * gather_per_layer;
    /* a bf16 gather of slices the offload store holds: the float32 slice it
     * hands over, rounded into the unit (zero_gather.c) */
    if (z->zero_stage == 3 && z->gathered16 && z->offload.params) elems += P / n + 1;
    return (uint64_t)elems * sizeof(float);
}

static size_t carve_size(size_t numel) { return (numel + ZERO_ALIGN - 1) / ZERO_ALIGN * ZERO_ALIGN; }

/* Floats a new request can still take from b (its last request may end
 * inside the alignment of a full buffer). */
static size_t room_left(const zero_buf *b) { return b->used < b->numel ? b->numel - b->used : 0; }

static float *take(zero_buf *b, size_t numel) {
    float *p = b->ptr + b->used;
    b->used += carve_size(numel);
    b->refs++;
    return p;
}

/* Free unused buffers, smallest first, until `numel` more floats fit the
 * partition (or nothing unused is left). */
static void release_unused(zero *z, size_t numel, uint64_t budget) {
    while (z->pool_bytes + numel * sizeof(float) > budget) {
        int32_t pick = -1;
        for (int32_t i = 0; i < z->n_pool; i++)
            if (z->pool[i].refs == 0 && (pick < 0 || z->pool[i].numel < z->pool[pick].numel)) pick = i;
        if (pick < 0) return;
        z->host->free(z->pool[pick].ptr);
        z->pool_bytes -= z->pool[pick].numel * sizeof(float);
        z->pool[pick] = z->pool[--z->n_pool];
    }
}

float *zero_buf_get(zero *z, size_t numel) {
    if (numel == 0) numel = 1;
    /* Best fit among free buffers, so equal layers share buffers and a
     * gradient buffer serves a parameter gather of a like unit later; a
     * small need does not take a much larger one (a later large need would
     * then allocate another) while the partition leaves room for its own. */
    int32_t best = -1;
    for (int32_t i = 0; i < z->n_pool; i++)
        if (z->pool[i].refs == 0 && z->pool[i].numel >= numel &&
            (best < 0 || z->pool[i].numel < z->pool[best].numel))
            best = i;
    if (best >= 0 && z->pool[best].numel / 2 <= numel) return take(&z->pool[best], numel);
    uint64_t budget = zero_buffer_bytes(z);
    if (z->pool_bytes + numel * sizeof(float) > budget) {
        /* Share: the buffer with the least room that still fits (in use or not). */
        int32_t room = -1;
        for (int32_t i = 0; i < z->n_pool; i++) {
            zero_buf *b = &z->pool[i];
            size_t left = room_left(b);
            if (left >= numel && (room < 0 || left < room_left(&z->pool[room]))) room = i;
        }
        if (room >= 0) return take(&z->pool[room], numel);
        release_unused(z, numel, budget);
    }
    if (z->n_pool == z->cap_pool) {
        int32_t cap = z->cap_pool ? 2 * z->cap_pool : 16;
        zero_buf *bigger = realloc(z->pool, sizeof *bigger * (size_t)cap);
        if (!bigger) {
            z->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory for the buffer pool", z->name);
            return NULL;
        }
        z->pool = bigger;
        z->cap_pool = cap;
    }
    char tag[64];
    snprintf(tag, sizeof tag, "%s buffers", z->name);
    float *p = plait_tensor_alloc(z->host, numel, tag); /* tensor memory: collectives and kernels use it */
    if (!p) return NULL; /* alloc set the message */
    z->pool[z->n_pool] = (zero_buf){.ptr = p, .numel = numel};
    z->pool_bytes += numel * sizeof(float);
    return take(&z->pool[z->n_pool++], numel);
}

void zero_buf_put(zero *z, float *ptr) {
    if (!ptr) return;
    for (int32_t i = 0; i < z->n_pool; i++) {
        zero_buf *b = &z->pool[i];
        if (ptr < b->ptr || ptr >= b->ptr + b->numel) continue;
        if (--b->refs == 0) b->used = 0;
        return;
    }
}

void zero_pool_free(zero *z) {
    for (int32_t i = 0; i < z->n_pool; i++) z->host->free(z->pool[i].ptr);
    free(z->pool);
    free(z->flight);
    z->pool = NULL;
    z->flight = NULL;
    z->n_pool = z->cap_pool = z->n_flight = z->cap_flight = 0;
    z->pool_bytes = 0;
}

plait_status zero_flight_pop(zero *z) {
    if (z->n_flight == 0) return PLAIT_OK;
    zero_flight f = z->flight[0];
    memmove(z->flight, z->flight + 1, sizeof *z->flight * (size_t)(z->n_flight - 1));
    z->n_flight--;
    plait_status st = f.req ? z->host->coll->wait(f.req) : PLAIT_OK;
    if (st == PLAIT_OK) {
        switch (f.kind) {
        case ZERO_FLIGHT_RS: st = zero_rs_complete(z, &f); break;
        case ZERO_FLIGHT_AG_STEP: st = zero_ag_complete(z, &f); break;
        case ZERO_FLIGHT_AR: break; /* reduced in place */
        default: st = z->host->set_error(PLAIT_ERR_INTERNAL, "%s: unknown in-flight operation %d", z->name, f.kind);
        }
    }
    zero_buf_put(z, f.buf);
    return st;
}

plait_status zero_flight_room(zero *z) {
    while (z->n_flight >= z->max_inflight) {
        plait_status st = zero_flight_pop(z);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

plait_status zero_flight_push(zero *z, int32_t unit, int kind, float *buf, plait_request *req) {
    if (z->n_flight == z->cap_flight) {
        int32_t cap = z->cap_flight ? 2 * z->cap_flight : 8;
        zero_flight *bigger = realloc(z->flight, sizeof *bigger * (size_t)cap);
        if (!bigger) return z->host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", z->name);
        z->flight = bigger;
        z->cap_flight = cap;
    }
    z->flight[z->n_flight++] = (zero_flight){.unit = unit, .kind = kind, .buf = buf, .req = req};
    return PLAIT_OK;
}

plait_status zero_flight_drain(zero *z) {
    plait_status st = PLAIT_OK;
    while (z->n_flight > 0) {
        plait_status s = zero_flight_pop(z);
        if (st == PLAIT_OK) st = s;
    }
    return st;
}

plait_status zero_flight_wait_unit(zero *z, int32_t unit) {
    int32_t last = -1;
    for (int32_t i = 0; i < z->n_flight; i++)
        if (z->flight[i].unit == unit) last = i;
    for (int32_t i = 0; i <= last; i++) {
        plait_status st = zero_flight_pop(z);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}
