/* A stand-in for the CUDA runtime and NCCL; see mock_gpu.h. */
#include <cuda_runtime.h>
#include <nccl.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mock_gpu.h"

#define MAXR 16

typedef struct mop mop;
typedef struct msub msub;
typedef struct mclique mclique;

enum { OP_GROUP, OP_COPY, OP_FREE };
enum { SUB_COLL, SUB_SEND, SUB_RECV };
enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_RS };

struct msub {
    int kind, ckind;
    struct ncclComm *comm;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root, peer;
    uint64_t seq;
    int done;
    mop *owner;
};

struct mop {
    int kind, done;
    struct CUstream_st *stream;
    msub *subs[2 * MAXR + 64];
    int nsub;
    void *dst;
    const void *src;
    size_t n;
    mop *all_next;
};

struct CUstream_st {
    int dev;
    mop **ops;
    size_t n, cap, head;
    int destroyed;
    struct CUstream_st *all_next;
};

struct CUevent_st {
    int dev;
    struct CUstream_st *s;
    size_t upto;
    int recorded, destroyed;
    struct CUevent_st *all_next;
};

struct mclique {
    uint64_t id;
    int n, joined;
    struct ncclComm *members[MAXR];
};

struct ncclComm {
    mclique *cl;
    int rank, n, dev, blocking;
    ncclResult_t state;
    int polls;
    int aborted, destroyed, finalizing;
    ncclResult_t async_err;
    char last[256];
    uint64_t coll_seq, send_seq[MAXR], recv_seq[MAXR];
    mop *pending;
    struct ncclComm *all_next;
};

typedef struct malloc_rec {
    struct malloc_rec *next;
    void *p;
} malloc_rec;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ndev, no_driver, inprog_polls;
    int misuse, aborts, launches;
    char misuse_text[256];
    uint64_t next_clique;
    mclique *cliques[256];
    int ncl;
    struct ncclComm *comms;
    struct CUstream_st *streams;
    struct CUevent_st *events;
    mop *ops;
    malloc_rec *allocs;
    size_t n_allocs;
    char last[256];
} g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 4};

static __thread int tl_dev;
static __thread cudaError_t tl_err;
static __thread int tl_depth;
static __thread mop *tl_gop;

#define LOCK() pthread_mutex_lock(&g.mu)
#define UNLOCK() pthread_mutex_unlock(&g.mu)

static void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void misuse(const char *fmt, ...) {
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

static int run_op(mop *o) {
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

static void pump(void) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (struct CUstream_st *s = g.streams; s; s = s->all_next) {
            while (s->head < s->n && s->ops[s->head]->done) s->head++;
            if (s->head < s->n && run_op(s->ops[s->head])) changed = 1;
        }
    }
}

static void place(struct CUstream_st *s, mop *o) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 16;
        s->ops = realloc(s->ops, s->cap * sizeof *s->ops);
    }
    o->stream = s;
    s->ops[s->n++] = o;
}

static mop *new_op(int kind) {
    mop *o = calloc(1, sizeof *o);
    o->kind = kind;
    o->all_next = g.ops;
    g.ops = o;
    return o;
}

/* ---- CUDA -------------------------------------------------------------------------- */

cudaError_t cudaGetDeviceCount(int *count) {
    LOCK();
    cudaError_t e = g.no_driver ? cudaErrorInsufficientDriver : cudaSuccess;
    *count = g.no_driver ? 0 : g.ndev;
    UNLOCK();
    if (e != cudaSuccess) tl_err = e;
    return e;
}

cudaError_t cudaSetDevice(int device) {
    LOCK();
    int ok = device >= 0 && device < g.ndev && !g.no_driver;
    UNLOCK();
    if (!ok) return tl_err = cudaErrorInvalidDevice;
    tl_dev = device;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
    cudaError_t e = tl_err;
    tl_err = cudaSuccess;
    return e;
}

const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    default: return "cudaErrorInvalidValue";
    }
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version (mock)";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    default: return "invalid argument";
    }
}

cudaError_t cudaDeviceGetPCIBusId(char *buf, int len, int device) {
    snprintf(buf, (size_t)len, "0000:%02x:00.0", device + 0x10);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    (void)device;
    *value = attr == cudaDevAttrMemoryPoolsSupported;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    struct CUstream_st *x = calloc(1, sizeof *x);
    LOCK();
    x->dev = tl_dev;
    x->all_next = g.streams;
    g.streams = x;
    UNLOCK();
    *s = x;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    LOCK();
    pump();
    if (s->head < s->n) misuse("stream destroyed with %zu operations pending", s->n - s->head);
    s->destroyed = 1;
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags) {
    (void)flags;
    struct CUevent_st *e = calloc(1, sizeof *e);
    LOCK();
    e->dev = tl_dev;
    e->all_next = g.events;
    g.events = e;
    UNLOCK();
    *ev = e;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
    LOCK();
    ev->destroyed = 1;
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s) {
    LOCK();
    if (!s) misuse("event recorded on the legacy default stream");
    else {
        if (s->dev != ev->dev) misuse("event of device %d recorded on a stream of device %d", ev->dev, s->dev);
        for (struct ncclComm *c = g.comms; c; c = c->all_next)
            if (c->pending && c->pending->stream == s)
                misuse("event recorded while an NCCL launch for this stream was still in progress");
        ev->s = s;
        ev->upto = s->n;
        ev->recorded = 1;
    }
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
    LOCK();
    pump();
    cudaError_t e = cudaSuccess;
    if (ev->recorded)
        for (size_t i = 0; i < ev->upto; i++)
            if (!ev->s->ops[i]->done) {
                e = cudaErrorNotReady;
                break;
            }
    UNLOCK();
    return e;
}

static void track(void *p) {
    malloc_rec *r = malloc(sizeof *r);
    r->p = p;
    r->next = g.allocs;
    g.allocs = r;
    g.n_allocs++;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    LOCK();
    *p = malloc(n ? n : 1);
    track(*p);
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    LOCK();
    pump();
    mop fake = {.kind = OP_FREE, .dst = p};
    run_op(&fake);
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s) {
    (void)s;
    return cudaMalloc(p, n);
}

cudaError_t cudaFreeAsync(void *p, cudaStream_t s) {
    LOCK();
    mop *o = new_op(OP_FREE);
    o->dst = p;
    place(s, o);
    pump();
    UNLOCK();
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    (void)kind;
    LOCK();
    mop *o = new_op(OP_COPY);
    o->dst = dst;
    o->src = src;
    o->n = n;
    place(s, o);
    pump();
    UNLOCK();
    return cudaSuccess;
}

/* ---- NCCL ----------------------------------------------------------------------------- */

ncclResult_t ncclGetVersion(int *v) {
    *v = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

const char *ncclGetLastError(ncclComm_t c) { return c ? c->last : g.last; }

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    LOCK();
    uint64_t k = ++g.next_clique;
    UNLOCK();
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "MOCKNCCL", 8);
    memcpy(id->internal + 8, &k, sizeof k);
    return ncclSuccess;
}

/* A call on communicator `c`: live, not in progress, this thread's device. */
static int usable(struct ncclComm *c, const char *what) {
    if (!c || c->aborted || c->destroyed) {
        misuse("%s on a communicator that was %s", what, !c ? "NULL" : c->aborted ? "aborted" : "destroyed");
        return 0;
    }
    if (c->state == ncclInProgress) misuse("%s on a communicator whose last call is still in progress", what);
    if (tl_dev != c->dev) misuse("%s on a communicator of GPU %d with GPU %d current", what, c->dev, tl_dev);
    return 1;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *out, int n, ncclUniqueId id, int rank, ncclConfig_t *cfg) {
    uint64_t k;
    memcpy(&k, id.internal + 8, sizeof k);
    if (memcmp(id.internal, "MOCKNCCL", 8) != 0 || n < 1 || n > MAXR || rank < 0 || rank >= n) return ncclInvalidArgument;
    LOCK();
    mclique *cl = NULL;
    for (int i = 0; i < g.ncl; i++)
        if (g.cliques[i]->id == k) cl = g.cliques[i];
    if (!cl) {
        cl = calloc(1, sizeof *cl);
        cl->id = k;
        cl->n = n;
        g.cliques[g.ncl++] = cl;
    }
    if (cl->n != n || cl->members[rank]) {
        snprintf(g.last, sizeof g.last, "mock: rank %d joined twice or with another size", rank);
        UNLOCK();
        return ncclInvalidArgument;
    }
    for (int r = 0; r < n; r++)
        if (cl->members[r] && cl->members[r]->dev == tl_dev) {
            snprintf(g.last, sizeof g.last, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d",
                     rank, r, tl_dev);
            UNLOCK();
            return ncclInvalidUsage;
        }
    struct ncclComm *c = calloc(1, sizeof *c);
    c->cl = cl;
    c->rank = rank;
    c->n = n;
    c->dev = tl_dev;
    c->blocking = !cfg || cfg->blocking != 0;
    c->all_next = g.comms;
    g.comms = c;
    cl->members[rank] = c;
    cl->joined++;
    pthread_cond_broadcast(&g.cv);
    *out = c;
    ncclResult_t res = ncclSuccess;
    if (!c->blocking) {
        c->state = ncclInProgress;
        c->polls = g.inprog_polls;
        res = ncclInProgress;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 30;
        while (cl->joined < n)
            if (pthread_cond_timedwait(&g.cv, &g.mu, &ts) == ETIMEDOUT) {
                snprintf(c->last, sizeof c->last, "mock: timed out waiting for %d ranks", n - cl->joined);
                res = ncclSystemError;
                break;
            }
    }
    UNLOCK();
    return res;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *err) {
    LOCK();
    pump();
    if (!c || c->aborted || c->destroyed) {
        misuse("ncclCommGetAsyncError on a %s communicator", !c ? "NULL" : c->aborted ? "aborted" : "destroyed");
        UNLOCK();
        return ncclInvalidArgument;
    }
    if (c->async_err != ncclSuccess) {
        *err = c->async_err;
        UNLOCK();
        return ncclSuccess;
    }
    if (c->state == ncclInProgress) {
        if (c->polls > 0) {
            c->polls--;
        } else if (c->pending) {
            place(c->pending->stream, c->pending);
            c->pending = NULL;
            g.launches++;
            c->state = ncclSuccess;
            pump();
        } else if (c->finalizing) {
            int busy = 0;
            for (struct CUstream_st *s = g.streams; s; s = s->all_next)
                for (size_t i = s->head; i < s->n; i++)
                    if (s->ops[i]->kind == OP_GROUP && s->ops[i]->nsub && s->ops[i]->subs[0]->comm == c &&
                        !s->ops[i]->done)
                        busy = 1;
            if (!busy) c->state = ncclSuccess;
        } else if (c->cl->joined == c->n) {
            c->state = ncclSuccess; /* init done */
        }
    }
    *err = c->state;
    UNLOCK();
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
    LOCK();
    g.aborts++;
    if (!c || c->aborted || c->destroyed) {
        misuse("ncclCommAbort on a communicator that was already released");
        UNLOCK();
        return ncclInvalidArgument;
    }
    c->aborted = 1;
    c->pending = NULL;
    for (int r = 0; r < c->n; r++) {
        struct ncclComm *m = c->cl->members[r];
        if (m && m != c && !m->aborted && !m->destroyed && m->async_err == ncclSuccess) {
            m->async_err = ncclRemoteError;
            snprintf(m->last, sizeof m->last, "mock: rank %d of the communicator aborted", c->rank);
        }
    }
    pump(); /* its kernels end */
    UNLOCK();
    return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
    LOCK();
    if (!usable(c, "ncclCommFinalize")) {
        UNLOCK();
        return ncclInvalidArgument;
    }
    c->finalizing = 1;
    ncclResult_t r = ncclSuccess;
    if (!c->blocking) {
        c->state = ncclInProgress;
        c->polls = 0;
        r = ncclInProgress;
    }
    UNLOCK();
    return r;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
    LOCK();
    pump();
    if (!c || c->aborted || c->destroyed) misuse("ncclCommDestroy on a released communicator");
    else {
        if (c->state == ncclInProgress) misuse("ncclCommDestroy while in progress");
        for (struct CUstream_st *s = g.streams; s; s = s->all_next)
            for (size_t i = s->head; i < s->n; i++)
                if (s->ops[i]->kind == OP_GROUP && s->ops[i]->nsub && s->ops[i]->subs[0]->comm == c &&
                    !s->ops[i]->done)
                    misuse("ncclCommDestroy with operations pending");
        c->destroyed = 1;
    }
    UNLOCK();
    return ncclSuccess;
}

/* nccl.h declares these without `(void)` */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclGroupStart(void) {
    if (tl_depth++ == 0) {
        LOCK();
        tl_gop = new_op(OP_GROUP);
        UNLOCK();
    }
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (tl_depth == 0) return ncclInvalidUsage;
    if (--tl_depth > 0) return ncclSuccess;
    LOCK();
    mop *o = tl_gop;
    tl_gop = NULL;
    ncclResult_t r = ncclSuccess;
    if (o->nsub == 0) {
        o->done = 1;
    } else {
        struct ncclComm *c = o->subs[0]->comm;
        struct CUstream_st *s = o->stream;
        for (int i = 1; i < o->nsub; i++)
            if (o->subs[i]->comm != c) misuse("a group mixes communicators");
        if (!c->blocking && g.inprog_polls > 0) {
            c->state = ncclInProgress;
            c->polls = g.inprog_polls;
            c->pending = o;
            o->stream = s;
            r = ncclInProgress;
        } else {
            place(s, o);
            g.launches++;
            pump();
        }
    }
    UNLOCK();
    return r;
}

/* Add one operation to the thread's group (opening one if needed). */
static ncclResult_t add(msub *x, cudaStream_t s, const char *what) {
    int own = tl_depth == 0;
    if (own) ncclGroupStart();
    LOCK();
    ncclResult_t r = ncclSuccess;
    if (!usable(x->comm, what)) {
        r = ncclInvalidArgument;
        free(x);
    } else if (!s) {
        misuse("%s on the legacy default stream", what);
        r = ncclInvalidArgument;
        free(x);
    } else {
        if (tl_gop->nsub && tl_gop->stream != s) misuse("a group spans several streams");
        tl_gop->stream = s;
        x->owner = tl_gop;
        tl_gop->subs[tl_gop->nsub++] = x;
        if (x->kind == SUB_COLL) x->seq = x->comm->coll_seq++;
        else if (x->kind == SUB_SEND) x->seq = x->comm->send_seq[x->peer]++;
        else x->seq = x->comm->recv_seq[x->peer]++;
    }
    UNLOCK();
    if (own) {
        ncclResult_t e = ncclGroupEnd();
        if (r == ncclSuccess) r = e;
    }
    return r;
}

static msub *sub(int kind, int ckind, ncclComm_t c, const void *send, void *recv, size_t count, ncclDataType_t dt,
                 ncclRedOp_t op, int root, int peer) {
    msub *x = calloc(1, sizeof *x);
    *x = (msub){kind, ckind, c, send, recv, count, dt, op, root, peer, 0, 0, NULL};
    return x;
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
    return add(sub(SUB_COLL, C_ALLREDUCE, c, s, r, n, t, op, 0, 0), st, "ncclAllReduce");
}

ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
    if (root < 0 || root >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_COLL, C_REDUCE, c, s, r, n, t, op, root, 0), st, "ncclReduce");
}

ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t st) {
    if (root < 0 || root >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_COLL, C_BCAST, c, s, r, n, t, ncclSum, root, 0), st, "ncclBroadcast");
}

ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
    return add(sub(SUB_COLL, C_ALLGATHER, c, s, r, n, t, ncclSum, 0, 0), st, "ncclAllGather");
}

ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
    return add(sub(SUB_COLL, C_RS, c, s, r, n, t, op, 0, 0), st, "ncclReduceScatter");
}

ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    if (peer < 0 || peer >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_SEND, 0, c, s, NULL, n, t, ncclSum, 0, peer), st, "ncclSend");
}

ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
    if (peer < 0 || peer >= c->n) return ncclInvalidArgument;
    return add(sub(SUB_RECV, 0, c, NULL, r, n, t, ncclSum, 0, peer), st, "ncclRecv");
}
