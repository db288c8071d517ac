/* A stand-in for the CUDA runtime and NCCL: state, control, and the
 * execution of queued work. See mock_gpu.h. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_gpu_internal.h"

mock_state g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 4};

__thread int tl_dev;
__thread cudaError_t tl_err;
__thread int tl_depth;
__thread mop *tl_gop;

void misuse(const char *fmt, ...) {
    if (g.misuse++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g.misuse_text, sizeof g.misuse_text, fmt, ap);
        va_end(ap);
        fprintf(stderr, "mock_gpu: misuse: %s\n", g.misuse_text);
    }
}

/* ---- control --------------------------------------------------------------- */

/* The environment of a process that preloads the stand-in (mock_gpu.h). */
__attribute__((constructor)) static void mock_from_environment(void) {
    const char *e = getenv("PLAIT_MOCK_GPUS");
    if (e && atoi(e) >= 0) g.ndev = atoi(e);
    e = getenv("PLAIT_MOCK_NCCL_CORRUPT");
    if (e && atoll(e) > 0) g.corrupt_at = (uint64_t)atoll(e);
}

__attribute__((destructor)) static void mock_at_exit(void) { mock_write_stats(); }

unsigned long long mock_gpu_op_calls(int op) {
    LOCK();
    unsigned long long n = op >= 0 && op < MOCK_OP_COUNT ? g.op_calls[op] : 0;
    UNLOCK();
    return n;
}

unsigned long long mock_gpu_op_bytes(int op) {
    LOCK();
    unsigned long long n = op >= 0 && op < MOCK_OP_COUNT ? g.op_bytes[op] : 0;
    UNLOCK();
    return n;
}

void mock_gpu_reset(int devices) {
    LOCK();
    for (struct ncclComm *c = g.comms, *nx; c; c = nx) {
        nx = c->all_next;
        free(c);
    }
    for (struct CUstream_st *s = g.streams, *nx; s; s = nx) {
        nx = s->all_next;
        free(s->ops);
        free(s);
    }
    for (struct CUevent_st *e = g.events, *nx; e; e = nx) {
        nx = e->all_next;
        free(e);
    }
    for (mop *o = g.ops, *nx; o; o = nx) {
        nx = o->all_next;
        for (int i = 0; i < o->nsub; i++) free(o->subs[i]);
        free(o);
    }
    for (malloc_rec *r = g.allocs, *nx; r; r = nx) {
        nx = r->next;
        free(r->p);
        free(r);
    }
    for (mclique *cl = g.cliques, *nx; cl; cl = nx) {
        nx = cl->all_next;
        clique_free(cl);
        free(cl);
    }
    clique_sweep_created(1);
    memset(g.op_calls, 0, sizeof g.op_calls);
    memset(g.op_bytes, 0, sizeof g.op_bytes);
    g.comms = NULL;
    g.streams = NULL;
    g.events = NULL;
    g.ops = NULL;
    g.allocs = NULL;
    g.n_allocs = 0;
    g.cliques = NULL;
    g.ndev = devices;
    g.no_driver = 0;
    g.inprog_polls = 0;
    g.misuse = g.aborts = g.launches = 0;
    g.misuse_text[0] = '\0';
    UNLOCK();
}

void mock_gpu_no_driver(void) {
    LOCK();
    g.no_driver = 1;
    UNLOCK();
}

void mock_gpu_set_inprogress_polls(int polls) {
    LOCK();
    g.inprog_polls = polls;
    UNLOCK();
}

void mock_gpu_inject_error(int device, ncclResult_t err, const char *text) {
    LOCK();
    for (struct ncclComm *c = g.comms; c; c = c->all_next)
        if (!c->aborted && !c->destroyed && (device < 0 || c->dev == device)) {
            c->async_err = err;
            snprintf(c->last, sizeof c->last, "%s", text);
        }
    UNLOCK();
}

int mock_gpu_misuse(void) {
    LOCK();
    int n = g.misuse;
    UNLOCK();
    return n;
}

const char *mock_gpu_misuse_text(void) { return g.misuse_text; }

int mock_gpu_aborts(void) {
    LOCK();
    int n = g.aborts;
    UNLOCK();
    return n;
}

int mock_gpu_live_comms(void) {
    LOCK();
    int n = 0;
    for (struct ncclComm *c = g.comms; c; c = c->all_next) n += !c->aborted && !c->destroyed;
    UNLOCK();
    return n;
}

int mock_gpu_launches(void) {
    LOCK();
    int n = g.launches;
    UNLOCK();
    return n;
}

size_t mock_gpu_live_allocations(void) {
    LOCK();
    size_t n = g.n_allocs;
    UNLOCK();
    return n;
}

/* ---- execution ---------------------------------------------------------------- */

int run_op(mop *o) {
    switch (o->kind) {
    case OP_COPY:
        memcpy(o->dst, o->src, o->n);
        o->done = 1;
        return 1;
    case OP_FREE: {
        for (malloc_rec **pp = &g.allocs; *pp; pp = &(*pp)->next)
            if ((*pp)->p == o->dst) {
                malloc_rec *r = *pp;
                *pp = r->next;
                free(r->p);
                free(r);
                g.n_allocs--;
                break;
            }
        o->done = 1;
        return 1;
    }
    case OP_WAIT:
        for (size_t i = 0; o->wait_s && i < o->wait_upto; i++)
            if (!o->wait_s->ops[i]->done) return 0;
        o->done = 1;
        return 1;
    default: {
        int changed = 0, left = 0;
        for (int i = 0; i < o->nsub; i++)
            if (!o->subs[i]->done) {
                changed |= clique_step(o->subs[i]);
                left += !o->subs[i]->done;
            }
        if (!left) {
            o->done = 1;
            changed = 1;
        }
        return changed;
    }
    }
}

void pump(void) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (struct CUstream_st *s = g.streams; s; s = s->all_next) {
            while (s->head < s->n && s->ops[s->head]->done) s->head++;
            if (s->head < s->n && run_op(s->ops[s->head])) changed = 1;
        }
    }
}

void place(struct CUstream_st *s, mop *o) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->ops = realloc(s->ops, s->cap * sizeof *s->ops);
    }
    o->stream = s;
    s->ops[s->n++] = o;
}

mop *new_op(int kind) {
    mop *o = calloc(1, sizeof *o);
    o->kind = kind;
    o->all_next = g.ops;
    g.ops = o;
    return o;
}

