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
    for (int i = 0; i < g.ncl; i++) free(g.cliques[i]);
    g.comms = NULL;
    g.streams = NULL;
    g.events = NULL;
    g.ops = NULL;
    g.allocs = NULL;
    g.n_allocs = 0;
    g.ncl = 0;
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

/* ---- element arithmetic ------------------------------------------------------ */

static size_t dt_size(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
    }
}

static int is_float(ncclDataType_t t) {
    return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64;
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    if (exp == 31) bits = sign | 0x7f800000u | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static uint16_t float_to_half(float f) {
    /* exact for the small integers the tests use */
    uint32_t b;
    memcpy(&b, &f, 4);
    uint32_t sign = (b >> 16) & 0x8000;
    int exp = (int)((b >> 23) & 0xff) - 127 + 15;
    uint32_t man = b & 0x7fffff;
    if (f == 0) return (uint16_t)sign;
    if (exp <= 0) return (uint16_t)sign;
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    uint32_t r = man + 0xfff + ((man >> 13) & 1);
    if (r & 0x800000) {
        r = 0;
        exp++;
    }
    return (uint16_t)(sign | ((uint32_t)exp << 10) | (r >> 13));
}

static double ld_f(const void *p, ncclDataType_t t, size_t i) {
    switch (t) {
    case ncclFloat16: return half_to_float(((const uint16_t *)p)[i]);
    case ncclBfloat16: {
        uint32_t b = (uint32_t)((const uint16_t *)p)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void st_f(void *p, ncclDataType_t t, size_t i, double v) {
    switch (t) {
    case ncclFloat16: ((uint16_t *)p)[i] = float_to_half((float)v); break;
    case ncclBfloat16: {
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        b += 0x7fff + ((b >> 16) & 1);
        ((uint16_t *)p)[i] = (uint16_t)(b >> 16);
        break;
    }
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

static int64_t ld_i(const void *p, ncclDataType_t t, size_t i) {
    switch (t) {
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static void st_i(void *p, ncclDataType_t t, size_t i, int64_t v) {
    switch (t) {
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

/* out[i] = op over srcs[r][off + i], r in rank order */
static void reduce_into(void *out, const void *const *srcs, int n, size_t off, size_t count, ncclDataType_t t,
                        ncclRedOp_t op) {
    for (size_t i = 0; i < count; i++) {
        if (is_float(t)) {
            double acc = ld_f(srcs[0], t, off + i);
            for (int r = 1; r < n; r++) {
                double v = ld_f(srcs[r], t, off + i);
                switch (op) {
                case ncclProd: acc *= v; break;
                case ncclMin: acc = v < acc ? v : acc; break;
                case ncclMax: acc = v > acc ? v : acc; break;
                default: acc += v; break;
                }
            }
            if (op == ncclAvg) acc /= n;
            st_f(out, t, i, acc);
        } else {
            int64_t acc = ld_i(srcs[0], t, off + i);
            for (int r = 1; r < n; r++) {
                int64_t v = ld_i(srcs[r], t, off + i);
                switch (op) {
                case ncclProd: acc = (int64_t)((uint64_t)acc * (uint64_t)v); break;
                case ncclMin: acc = v < acc ? v : acc; break;
                case ncclMax: acc = v > acc ? v : acc; break;
                default: acc = (int64_t)((uint64_t)acc + (uint64_t)v); break;
                }
            }
            if (op == ncclAvg) acc /= n;
            st_i(out, t, i, acc);
        }
    }
}

/* ---- execution ---------------------------------------------------------------- */

/* The sub-operation of `c` of `kind` with `seq` (and peer for p2p) at the
 * head of one of its streams, or NULL. */
static msub *find_ready(struct ncclComm *c, int kind, uint64_t seq, int peer) {
    for (struct CUstream_st *s = g.streams; s; s = s->all_next) {
        if (s->head >= s->n) continue;
        mop *o = s->ops[s->head];
        if (o->kind != OP_GROUP) continue;
        for (int i = 0; i < o->nsub; i++) {
            msub *x = o->subs[i];
            if (x->comm == c && x->kind == kind && !x->done && x->seq == seq && (kind == SUB_COLL || x->peer == peer))
                return x;
        }
    }
    return NULL;
}

static void run_collective(msub **subs, int n) {
    msub *a = subs[0];
    size_t esz = dt_size(a->dt), cnt = a->count;
    const void *srcs[MAXR];
    for (int r = 0; r < n; r++) srcs[r] = subs[r]->send;
    switch (a->ckind) {
    case C_ALLREDUCE:
    case C_REDUCE: {
        void *tmp = malloc(cnt * esz + 1);
        reduce_into(tmp, srcs, n, 0, cnt, a->dt, a->op);
        for (int r = 0; r < n; r++)
            if (a->ckind == C_ALLREDUCE || r == a->root) memcpy(subs[r]->recv, tmp, cnt * esz);
        free(tmp);
        break;
    }
    case C_BCAST: {
        void *tmp = malloc(cnt * esz + 1);
        memcpy(tmp, subs[a->root]->send, cnt * esz);
        for (int r = 0; r < n; r++) memcpy(subs[r]->recv, tmp, cnt * esz);
        free(tmp);
        break;
    }
    case C_ALLGATHER: {
        char *tmp = malloc((size_t)n * cnt * esz + 1);
        for (int r = 0; r < n; r++) memcpy(tmp + (size_t)r * cnt * esz, subs[r]->send, cnt * esz);
        for (int r = 0; r < n; r++) memcpy(subs[r]->recv, tmp, (size_t)n * cnt * esz);
        free(tmp);
        break;
    }
    case C_RS: {
        char *tmp = malloc((size_t)n * cnt * esz + 1);
        for (int r = 0; r < n; r++) reduce_into(tmp + (size_t)r * cnt * esz, srcs, n, (size_t)r * cnt, cnt, a->dt, a->op);
        for (int r = 0; r < n; r++) memcpy(subs[r]->recv, tmp + (size_t)r * cnt * esz, cnt * esz);
        free(tmp);
        break;
    }
    }
    for (int r = 0; r < n; r++) subs[r]->done = 1;
}

static int try_sub(msub *x) {
    struct ncclComm *c = x->comm;
    if (c->aborted) {
        x->done = 1; /* kernels of an aborted communicator end */
        return 1;
    }
    if (x->kind == SUB_COLL) {
        msub *all[MAXR] = {0};
        for (int r = 0; r < c->n; r++) {
            struct ncclComm *m = c->cl->members[r];
            if (!m || m->aborted || !(all[r] = find_ready(m, SUB_COLL, x->seq, 0))) return 0;
            if (all[r]->ckind != x->ckind || all[r]->count != x->count || all[r]->dt != x->dt) {
                misuse("ranks called different collectives at sequence %llu", (unsigned long long)x->seq);
                return 0;
            }
        }
        run_collective(all, c->n);
        return 1;
    }
    struct ncclComm *m = c->cl->members[x->peer];
    if (!m || m->aborted) return 0;
    msub *y = find_ready(m, x->kind == SUB_SEND ? SUB_RECV : SUB_SEND, x->seq, c->rank);
    if (!y) return 0;
    msub *s = x->kind == SUB_SEND ? x : y, *r = x->kind == SUB_SEND ? y : x;
    size_t bytes = s->count * dt_size(s->dt);
    if (s->count != r->count || s->dt != r->dt) {
        misuse("send of %zu and receive of %zu elements matched", s->count, r->count);
        bytes = 0;
    }
    if (bytes) memcpy(r->recv, s->send, bytes);
    s->done = r->done = 1;
    return 1;
}

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
    default: {
        int changed = 0, left = 0;
        for (int i = 0; i < o->nsub; i++)
            if (!o->subs[i]->done) {
                changed |= try_sub(o->subs[i]);
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

