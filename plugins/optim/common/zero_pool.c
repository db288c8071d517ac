/*
 * Working buffers of the ZeRO engine: a pool of unit-sized float buffers
 * (allocated on demand through host->alloc and kept for reuse, so the pool
 * settles at the step's high-water mark and nothing is allocated in steady
 * state), and the FIFO of asynchronous collectives that hold them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zero.h"

float *zero_buf_get(zero *z, size_t numel) {
    if (numel == 0) numel = 1;
    /* Best fit among free buffers, so equal layers share buffers and a
     * gradient buffer serves a parameter gather of a like unit later. */
    int32_t best = -1;
    for (int32_t i = 0; i < z->n_pool; i++)
        if (!z->pool[i].busy && z->pool[i].numel >= numel && (best < 0 || z->pool[i].numel < z->pool[best].numel))
            best = i;
    /* A small need does not take a much larger buffer (a later large need
     * would then allocate another one). */
    if (best >= 0 && z->pool[best].numel / 2 > numel) best = -1;
    if (best >= 0) {
        z->pool[best].busy = 1;
        return z->pool[best].ptr;
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
    float *p = z->host->alloc(numel * sizeof(float), PLAIT_MEM_HOST, 64, tag);
    if (!p) return NULL; /* alloc set the message */
    z->pool[z->n_pool++] = (zero_buf){.ptr = p, .numel = numel, .busy = 1};
    z->pool_bytes += numel * sizeof(float);
    return p;
}

void zero_buf_put(zero *z, float *ptr) {
    if (!ptr) return;
    for (int32_t i = 0; i < z->n_pool; i++)
        if (z->pool[i].ptr == ptr) {
            z->pool[i].busy = 0;
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
