/*
 * The stand-in's cliques (the members of one NCCL communicator), shared by
 * threads of one process and by processes alike, so `plait train`'s forked
 * ranks can run through the real nccl plugin over the stand-in.
 *
 * A unique id names an anonymous shared segment (memfd) of the process that
 * made it: members open it through /proc/<pid>/fd/<fd> and map it; the id
 * also carries a random nonce the segment must hold, so a reused fd number
 * is not mistaken for it. No file is ever created: the segment disappears
 * with its last mapping, whatever kills the processes. The maker closes its
 * descriptor once every member joined.
 *
 * The segment holds every member's state and one region per member for
 * collectives plus one per ordered pair for sends; members exchange through
 * it with atomics only (no lock is held while copying, and no process
 * sleeps holding one):
 *
 *   collective number s: a member deposits its input in its region once
 *   every member finished number s-1 (so regions are never overwritten
 *   while read), then waits until every member deposited s and computes
 *   its own result from the regions, in rank order -- the same result on
 *   every member;
 *
 *   send number q from a to b: deposited in region (a,b) once receive q-1
 *   consumed the previous one; the receive copies it out; the send counts
 *   as finished only then. So a send stays at the head of its stream until
 *   its receive runs, as NCCL's do, and "send, then receive" launched one by
 *   one on both sides deadlocks here too.
 *
 * Progress happens when a member's process calls into the stand-in (its
 * waits poll cudaEventQuery / ncclCommGetAsyncError). A member that aborts
 * marks itself so; a member whose process died without leaving is found by
 * its peers (/proc/<pid>/stat) at most every 20 ms; both surface as
 * ncclRemoteError on the peers, never as a hang.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mock_gpu_internal.h"

#define SHM_MAGIC 0x4c43434e4b434f4dull /* "MOCKNCCL" */
#define SIM_OFFSET ((uintptr_t)1 << 62) /* tests/device/sim_device.h */

typedef struct shm_member {
    _Atomic int joined, aborted, left;
    int pid, dev;
    _Atomic uint64_t cdep, cdone; /* collectives deposited / finished */
    int ckind, dt, op, root;      /* of the deposited collective */
    size_t count;
} shm_member;

typedef struct shm_chan {
    _Atomic uint64_t sent, recvd;
    size_t count;
    int dt;
} shm_chan;

struct shm_clique {
    uint64_t magic, nonce;
    _Atomic int lock, joined;
    int n;
    size_t region;
    shm_member m[MAXR];
    shm_chan ch[MAXR][MAXR]; /* [sender][receiver] */
};

/* the header's mapping, page-aligned so the regions are too */
#define HDR ((sizeof(struct shm_clique) + 4095) & ~(size_t)4095)

struct created_id {
    int fd;
    struct shm_clique *sh;
    created_id *next;
};

void *mock_host_ptr(const void *p) {
    uintptr_t a = (uintptr_t)p;
    return (void *)(a >= SIM_OFFSET ? a - SIM_OFFSET : a);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static size_t region_bytes(void) {
    const char *e = getenv("PLAIT_MOCK_NCCL_REGION_MB");
    long mb = e ? atol(e) : 64;
    return (size_t)(mb > 0 ? mb : 64) << 20;
}

static char *coll_region(mclique *cl, int r) { return (char *)cl->sh + HDR + (size_t)r * cl->sh->region; }
static char *chan_region(mclique *cl, int from, int to) {
    return (char *)cl->sh + HDR + (size_t)(cl->n + from * cl->n + to) * cl->sh->region;
}

/* ---- ids and joining ------------------------------------------------------------ */

ncclResult_t clique_new_id(ncclUniqueId *id) {
    int fd = memfd_create("plait-mock-nccl", MFD_CLOEXEC);
    if (fd < 0) return ncclSystemError;
    struct shm_clique *sh = MAP_FAILED;
    if (ftruncate(fd, (off_t)HDR) == 0) sh = mmap(NULL, HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    created_id *c = malloc(sizeof *c);
    if (sh == MAP_FAILED || !c) {
        if (sh != MAP_FAILED) munmap(sh, HDR);
        free(c);
        close(fd);
        return ncclSystemError;
    }
    LOCK();
    uint64_t k = ++g.next_clique;
    sh->magic = SHM_MAGIC;
    sh->nonce = ((uint64_t)getpid() << 40) ^ (k << 20) ^ (uint64_t)(now_s() * 1e9);
    *c = (created_id){fd, sh, g.created};
    g.created = c;
    UNLOCK();
    int32_t pid = (int32_t)getpid(), f = fd;
    memset(id, 0, sizeof *id);
    memcpy(id->internal, "MOCKNCCL", 8);
    memcpy(id->internal + 8, &pid, 4);
    memcpy(id->internal + 12, &f, 4);
    memcpy(id->internal + 16, &sh->nonce, 8);
    return ncclSuccess;
}

void clique_sweep_created(int all) {
    for (created_id **pp = &g.created; *pp;) {
        created_id *c = *pp;
        if (all || (c->sh->n > 0 && atomic_load(&c->sh->joined) == c->sh->n)) {
            *pp = c->next;
            munmap(c->sh, HDR);
            close(c->fd);
            free(c);
        } else {
            pp = &c->next;
        }
    }
}

static int lock_header(struct shm_clique *sh) {
    double until = now_s() + 10;
    int zero = 0;
    while (!atomic_compare_exchange_weak(&sh->lock, &zero, 1)) {
        zero = 0;
        if (now_s() > until) return 0;
        sched_yield();
    }
    return 1;
}

ncclResult_t clique_join(struct ncclComm *c, const ncclUniqueId *id, char *why, size_t cap) {
    int32_t pid, f;
    uint64_t nonce;
    memcpy(&pid, id->internal + 8, 4);
    memcpy(&f, id->internal + 12, 4);
    memcpy(&nonce, id->internal + 16, 8);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, (int)f);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "mock: cannot open the clique of this unique id (%s: %s); its maker has exited", path,
                 strerror(errno));
        return ncclSystemError;
    }
    ncclResult_t res = ncclSuccess;
    size_t total = 0;
    struct shm_clique *sh = mmap(NULL, HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (sh == MAP_FAILED) {
        snprintf(why, cap, "mock: mapping %s: %s", path, strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    if (sh->magic != SHM_MAGIC || sh->nonce != nonce) {
        snprintf(why, cap, "mock: %s is not the clique of this unique id (its maker has exited)", path);
        res = ncclInvalidArgument;
    } else if (!lock_header(sh)) {
        snprintf(why, cap, "mock: the clique's header stayed locked for 10 s");
        res = ncclSystemError;
    } else {
        if (sh->n == 0) {
            sh->n = c->n;
            sh->region = region_bytes();
            if (ftruncate(fd, (off_t)(HDR + (size_t)(c->n + c->n * c->n) * sh->region)) != 0) {
                snprintf(why, cap, "mock: sizing the clique: %s", strerror(errno));
                sh->n = 0;
                res = ncclSystemError;
            }
        }
        if (res == ncclSuccess && (sh->n != c->n || atomic_load(&sh->m[c->rank].joined))) {
            snprintf(why, cap, "mock: rank %d joined twice or with another size", c->rank);
            res = ncclInvalidArgument;
        }
        for (int r = 0; r < sh->n && res == ncclSuccess; r++)
            if (atomic_load(&sh->m[r].joined) && sh->m[r].dev == c->dev) { /* one host: any process */
                snprintf(why, cap, "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d", c->rank, r,
                         c->dev);
                res = ncclInvalidUsage;
            }
        if (res == ncclSuccess) {
            shm_member *me = &sh->m[c->rank];
            me->pid = (int)getpid();
            me->dev = c->dev;
            atomic_store(&me->joined, 1);
            atomic_fetch_add(&sh->joined, 1);
            total = HDR + (size_t)(sh->n + sh->n * sh->n) * sh->region;
        }
        atomic_store(&sh->lock, 0);
    }
    munmap(sh, HDR);
    mclique *cl = NULL;
    if (res == ncclSuccess) {
        sh = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        cl = sh == MAP_FAILED ? NULL : calloc(1, sizeof *cl);
        if (!cl) {
            if (sh != MAP_FAILED) munmap(sh, total);
            snprintf(why, cap, "mock: mapping the clique's %zu bytes failed", total);
            res = ncclSystemError;
        } else {
            *cl = (mclique){sh, total, c->n, g.cliques};
            g.cliques = cl;
            c->cl = cl;
        }
    }
    close(fd);
    clique_sweep_created(0);
    return res;
}

int clique_joined(const struct ncclComm *c) { return c->cl ? atomic_load(&c->cl->sh->joined) : 0; }

void clique_free(mclique *cl) {
    if (cl->sh) munmap(cl->sh, cl->map_bytes);
    cl->sh = NULL;
}

void clique_leave(struct ncclComm *c, int aborted) {
    if (!c->cl || !c->cl->sh) return;
    shm_member *me = &c->cl->sh->m[c->rank];
    atomic_store(aborted ? &me->aborted : &me->left, 1);
    clique_free(c->cl);
}

/* A process gone, or a zombie its parent has not reaped yet. */
static int process_dead(int pid) {
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

int clique_peer_failed(struct ncclComm *c, char *why, size_t cap) {
    if (!c->cl || !c->cl->sh) return 0;
    struct shm_clique *sh = c->cl->sh;
    double t = now_s();
    int look = t >= c->next_liveness;
    if (look) c->next_liveness = t + 0.02;
    for (int r = 0; r < c->n; r++) {
        shm_member *m = &sh->m[r];
        if (r == c->rank || !atomic_load(&m->joined)) continue;
        if (atomic_load(&m->aborted)) {
            snprintf(why, cap, "mock: rank %d of the communicator aborted", r);
            return 1;
        }
        if (look && m->pid != getpid() && !atomic_load(&m->left) && process_dead(m->pid)) {
            snprintf(why, cap, "mock: rank %d of the communicator (process %d) exited without leaving it", r, m->pid);
            return 1;
        }
    }
    return 0;
}

/* ---- element arithmetic ------------------------------------------------------------ */

static size_t dt_size(int t) {
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

static int is_float(int t) { return t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat32 || t == ncclFloat64; }

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

static double ld_f(const void *p, int t, size_t i) {
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

static void st_f(void *p, int t, size_t i, double v) {
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

static int64_t ld_i(const void *p, int t, size_t i) {
    switch (t) {
    case ncclUint8: return ((const uint8_t *)p)[i];
    case ncclInt8: return ((const int8_t *)p)[i];
    case ncclInt32: return ((const int32_t *)p)[i];
    case ncclUint32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
    }
}

static void st_i(void *p, int t, size_t i, int64_t v) {
    switch (t) {
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
    }
}

/* out[i] = op over srcs[r][off + i], r in rank order. Floats accumulate in
 * double: for two f32 or bf16 inputs that is the correctly rounded sum,
 * bit for bit what a + b gives (double has more than 2p+2 bits). Half
 * types (fp16, bf16) round the running result to the type after every
 * member, as NCCL's ring does at each hop: its partial sums travel in the
 * collective's type. */
static void reduce_into(void *out, char *const *srcs, int n, size_t off, size_t count, int t, int op) {
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
                if (dt_size(t) == 2) { /* the partial sum as the next hop receives it */
                    st_f(out, t, i, acc);
                    acc = ld_f(out, t, i);
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

/* ---- the exchange ------------------------------------------------------------------- */

static const int op_of_ckind[] = {[C_ALLREDUCE] = MOCK_OP_ALLREDUCE, [C_REDUCE] = MOCK_OP_REDUCE,
                                  [C_BCAST] = MOCK_OP_BROADCAST, [C_ALLGATHER] = MOCK_OP_ALLGATHER,
                                  [C_RS] = MOCK_OP_REDUCE_SCATTER};

static void count_op(int op, size_t bytes) {
    g.op_calls[op]++;
    g.op_bytes[op] += bytes;
}

/* A message too large for the segment's regions: the communicator fails
 * with a message naming the limit (a limit of the stand-in, not NCCL's). */
static int too_large(msub *x, size_t bytes) {
    size_t cap = x->comm->cl->sh->region;
    if (bytes <= cap) return 0;
    x->comm->async_err = ncclInvalidUsage;
    snprintf(x->comm->last, sizeof x->comm->last,
             "mock: a message of %zu bytes exceeds the stand-in's %zu-byte regions (PLAIT_MOCK_NCCL_REGION_MB)", bytes,
             cap);
    x->done = 1;
    return 1;
}

static int coll_step(msub *x) {
    struct ncclComm *c = x->comm;
    mclique *cl = c->cl;
    struct shm_clique *sh = cl->sh;
    int n = c->n, me = c->rank;
    size_t esz = dt_size(x->dt), blk = x->count * esz;
    size_t in_bytes = x->ckind == C_RS ? blk * (size_t)n : blk;
    shm_member *m = &sh->m[me];
    int changed = 0;
    if (atomic_load(&m->cdep) == x->seq) {
        for (int r = 0; r < n; r++)
            if (atomic_load(&sh->m[r].cdone) < x->seq) return 0; /* a region may still be read */
        if (too_large(x, in_bytes)) return 1;
        if (in_bytes && (x->ckind != C_BCAST || x->root == me))
            memcpy(coll_region(cl, me), mock_host_ptr(x->send), in_bytes);
        m->ckind = x->ckind;
        m->count = x->count;
        m->dt = (int)x->dt;
        m->op = (int)x->op;
        m->root = x->root;
        atomic_store(&m->cdep, x->seq + 1);
        changed = 1;
    }
    char *src[MAXR];
    for (int r = 0; r < n; r++) {
        shm_member *o = &sh->m[r];
        if (atomic_load(&o->cdep) < x->seq + 1) return changed;
        if (o->ckind != x->ckind || o->count != x->count || o->dt != (int)x->dt) {
            misuse("ranks called different collectives at sequence %llu", (unsigned long long)x->seq);
            return changed;
        }
        src[r] = coll_region(cl, r);
    }
    char *out = mock_host_ptr(x->recv);
    switch (x->ckind) {
    case C_ALLREDUCE: reduce_into(out, src, n, 0, x->count, x->dt, x->op); break;
    case C_REDUCE:
        if (me == x->root) reduce_into(out, src, n, 0, x->count, x->dt, x->op);
        break;
    case C_BCAST:
        if (blk) memcpy(out, src[x->root], blk);
        break;
    case C_ALLGATHER:
        for (int r = 0; r < n && blk; r++) memcpy(out + (size_t)r * blk, src[r], blk);
        break;
    case C_RS: reduce_into(out, src, n, (size_t)me * x->count, x->count, x->dt, x->op); break;
    }
    count_op(op_of_ckind[x->ckind], x->ckind == C_ALLGATHER ? blk * (size_t)n : in_bytes);
    if (g.corrupt_at && x->ckind == C_ALLREDUCE && x->dt == ncclFloat32 && x->count >= 1024 &&
        ++g.corrupt_seen == g.corrupt_at)
        ((float *)(void *)out)[0] += 1.0f;
    atomic_store(&m->cdone, x->seq + 1);
    x->done = 1;
    return 1;
}

static int send_step(msub *x) {
    struct ncclComm *c = x->comm;
    shm_chan *ch = &c->cl->sh->ch[c->rank][x->peer];
    size_t bytes = x->count * dt_size(x->dt);
    int changed = 0;
    if (atomic_load(&ch->sent) == x->seq && atomic_load(&ch->recvd) == x->seq) {
        if (too_large(x, bytes)) return 1;
        if (bytes) memcpy(chan_region(c->cl, c->rank, x->peer), mock_host_ptr(x->send), bytes);
        ch->count = x->count;
        ch->dt = (int)x->dt;
        atomic_store(&ch->sent, x->seq + 1);
        changed = 1;
    }
    if (atomic_load(&ch->recvd) < x->seq + 1) return changed;
    count_op(MOCK_OP_SEND, bytes);
    x->done = 1;
    return 1;
}

static int recv_step(msub *x) {
    struct ncclComm *c = x->comm;
    shm_chan *ch = &c->cl->sh->ch[x->peer][c->rank];
    if (atomic_load(&ch->sent) < x->seq + 1) return 0;
    size_t bytes = x->count * dt_size(x->dt);
    if (ch->count != x->count || ch->dt != (int)x->dt) {
        misuse("send of %zu and receive of %zu elements matched", ch->count, x->count);
        bytes = 0;
    }
    if (bytes) memcpy(mock_host_ptr(x->recv), chan_region(c->cl, x->peer, c->rank), bytes);
    count_op(MOCK_OP_RECV, bytes);
    atomic_store(&ch->recvd, x->seq + 1);
    x->done = 1;
    return 1;
}

int clique_step(msub *x) {
    struct ncclComm *c = x->comm;
    if (c->aborted || c->destroyed || !c->cl || !c->cl->sh) {
        x->done = 1; /* kernels of an aborted communicator end */
        return 1;
    }
    switch (x->kind) {
    case SUB_COLL: return coll_step(x);
    case SUB_SEND: return send_step(x);
    default: return recv_step(x);
    }
}

/* ---- counters ------------------------------------------------------------------------ */

static const char *const op_names[MOCK_OP_COUNT] = {"allreduce", "reduce", "broadcast", "allgather",
                                                    "reduce_scatter", "send", "recv"};

void mock_write_stats(void) {
    const char *dir = getenv("PLAIT_MOCK_NCCL_STATS");
    if (!dir || !*dir) return;
    char path[4096], tmp[4200];
    snprintf(path, sizeof path, "%s/nccl-stats.%d", dir, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    for (int i = 0; i < MOCK_OP_COUNT; i++)
        fprintf(f, "%s %llu %llu\n", op_names[i], (unsigned long long)g.op_calls[i], (unsigned long long)g.op_bytes[i]);
    if (fclose(f) == 0) rename(tmp, path);
    else unlink(tmp);
}
