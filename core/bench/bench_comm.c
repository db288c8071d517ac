#include "bench/bench_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "coll/reduce.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/memory.h"
#include "runtime/process_state.h"

static const char *const op_names[] = {"allreduce", "reduce_scatter", "allgather",
                                       "broadcast", "alltoall",       "sendrecv"};

const char *plait_bench_op_name(plait_bench_op op) {
    return (unsigned)op < PLAIT_BENCH_OP_COUNT ? op_names[op] : "?";
}

int plait_bench_op_parse(const char *name) {
    for (int i = 0; i < PLAIT_BENCH_OP_COUNT; i++)
        if (name && strcmp(name, op_names[i]) == 0) return i;
    return -1;
}

/* ---- inputs and expected values (closed forms, small integers) ---------- */

static int is_reduction(plait_bench_op op) {
    return op == PLAIT_BENCH_ALLREDUCE || op == PLAIT_BENCH_REDUCE_SCATTER;
}

/* Element i of rank q's input. */
static double input(const plait_bench_comm_opts *o, int q, size_t i) {
    int uns = o->dtype == PLAIT_U8;
    if (!is_reduction(o->op)) return (double)(((size_t)q * 31 + i * 7) % 97);
    switch (o->redop) {
    case PLAIT_PROD:
        if ((i + (size_t)q) % 4 == 0) return 2.0;
        return !uns && (i + 2 * (size_t)q) % 3 == 0 ? -1.0 : 1.0;
    case PLAIT_MIN:
    case PLAIT_MAX:
        return uns ? (double)((i * 13 + (size_t)q * 7) % 11) : (double)((i * 13 + (size_t)q * 7) % 11) - 5.0;
    default:
        return uns ? (double)((i * 7 + (size_t)q * 3) % 5) : (double)((i * 7 + (size_t)q * 3) % 9) - 4.0;
    }
}

/* The reduction over n ranks of element i, as the dtype stores it. */
static double reduced(const plait_bench_comm_opts *o, int n, size_t i) {
    double acc = input(o, 0, i);
    for (int q = 1; q < n; q++) {
        double x = input(o, q, i);
        switch (o->redop) {
        case PLAIT_PROD: acc *= x; break;
        case PLAIT_MIN: acc = x < acc ? x : acc; break;
        case PLAIT_MAX: acc = x > acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    if (o->redop != PLAIT_AVG) return acc;
    switch (o->dtype) {
    case PLAIT_F32: return (double)((float)acc / (float)n);
    case PLAIT_F16: return plait_f16_to_f32(plait_f32_to_f16((float)acc / (float)n));
    case PLAIT_BF16: return plait_bf16_to_f32(plait_f32_to_bf16((float)acc / (float)n));
    case PLAIT_I32:
    case PLAIT_I64: return (double)((int64_t)acc / n);
    case PLAIT_U8: return (double)((uint8_t)acc / n);
    default: return acc / n;
    }
}

static void store(void *buf, plait_dtype dt, size_t i, double v) {
    switch (dt) {
    case PLAIT_F32: ((float *)buf)[i] = (float)v; break;
    case PLAIT_F64: ((double *)buf)[i] = v; break;
    case PLAIT_F16: ((uint16_t *)buf)[i] = plait_f32_to_f16((float)v); break;
    case PLAIT_BF16: ((uint16_t *)buf)[i] = plait_f32_to_bf16((float)v); break;
    case PLAIT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case PLAIT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case PLAIT_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    default: break;
    }
}

/* Element counts of one size: send and receive buffer lengths and the
 * "count" column (elements of S). */
typedef struct shape {
    size_t send, recv, count, per;
} shape;

static shape shape_of(plait_bench_op op, uint64_t bytes, size_t esz, int n) {
    shape s = {0, 0, 0, 0};
    size_t total = (size_t)(bytes / esz), per = total / (size_t)n;
    switch (op) {
    case PLAIT_BENCH_ALLGATHER: s = (shape){per, per * (size_t)n, per * (size_t)n, per}; break;
    case PLAIT_BENCH_REDUCE_SCATTER: s = (shape){per * (size_t)n, per, per * (size_t)n, per}; break;
    case PLAIT_BENCH_ALLTOALL: s = (shape){per * (size_t)n, per * (size_t)n, per * (size_t)n, per}; break;
    default: s = (shape){total, total, total, total}; break;
    }
    return s;
}

static double bus_factor(plait_bench_op op, int n) {
    switch (op) {
    case PLAIT_BENCH_ALLREDUCE: return 2.0 * (n - 1) / n;
    case PLAIT_BENCH_REDUCE_SCATTER:
    case PLAIT_BENCH_ALLGATHER:
    case PLAIT_BENCH_ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

/* Expected receive buffer of rank `me`. */
static void fill_expected(const plait_bench_comm_opts *o, const shape *s, int n, int me, void *exp) {
    size_t per = s->per;
    for (size_t j = 0; j < s->recv; j++) {
        double v;
        switch (o->op) {
        case PLAIT_BENCH_ALLREDUCE: v = reduced(o, n, j); break;
        case PLAIT_BENCH_REDUCE_SCATTER: v = reduced(o, n, (size_t)me * per + j); break;
        case PLAIT_BENCH_ALLGATHER: v = input(o, (int)(j / per), j % per); break;
        case PLAIT_BENCH_BROADCAST: v = input(o, o->root, j); break;
        case PLAIT_BENCH_ALLTOALL: v = input(o, (int)(j / per), (size_t)me * per + j % per); break;
        default: v = input(o, (me - 1 + n) % n, j); break; /* sendrecv: from the left */
        }
        store(exp, o->dtype, j, v);
    }
}

/* Elements of `got` that differ from `exp` (esz bytes each). */
static uint64_t count_wrong(const unsigned char *got, const unsigned char *exp, size_t n, size_t esz) {
    uint64_t wrong = 0;
    const size_t block = 4096 / esz;
    for (size_t i = 0; i < n; i += block) {
        size_t m = n - i < block ? n - i : block;
        if (memcmp(got + i * esz, exp + i * esz, m * esz) == 0) continue;
        for (size_t j = i; j < i + m; j++) wrong += memcmp(got + j * esz, exp + j * esz, esz) != 0;
    }
    return wrong;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define SENTINEL 0xA5

/* Before every checked operation: the sentinel, or for the broadcast
 * root its own data; copied to the device buffer `drecv` when there is one. */
static plait_status reset_recv(const plait_bench_mem *dm, void *drecv, unsigned char *recv,
                               const unsigned char *exp, size_t bytes, int bcast_root) {
    if (bcast_root)
        memcpy(recv, exp, bytes);
    else
        memset(recv, SENTINEL, bytes);
    return dm && bytes ? dm->copy(drecv, recv, bytes, PLAIT_COPY_TO_DEVICE) : PLAIT_OK;
}

/* The result into host memory: from the device buffer when there is one. */
static plait_status fetch_result(const plait_bench_mem *dm, unsigned char *recv, const void *drecv, size_t bytes) {
    return dm && bytes ? dm->copy(recv, drecv, bytes, PLAIT_COPY_TO_HOST) : PLAIT_OK;
}

/* Elements of an operation's result that differ from the expected one,
 * after the injected fault (--corrupt flips one element on rank 0). */
static uint64_t check_result(const plait_bench_comm_opts *o, int me, unsigned char *recv, const unsigned char *exp,
                             size_t count, size_t esz) {
    if (o->fault == PLAIT_BENCH_FAULT_FLIP && me == 0 && count) recv[0] ^= 1;
    return count_wrong(recv, exp, count, esz);
}

/* One iteration; the receive buffer was reset by the caller. */
static plait_status one_op(plait_comm *comm, const plait_bench_comm_opts *o, const plait_coll_opts *co,
                           void *send, void *recv, const shape *s) {
    const plait_coll_api *api = plait_coll_api_table();
    switch (o->op) {
    case PLAIT_BENCH_ALLREDUCE:
        return api->allreduce(comm, send, recv, s->count, o->dtype, o->redop, co, NULL);
    case PLAIT_BENCH_REDUCE_SCATTER:
        return api->reduce_scatter(comm, send, recv, s->per, o->dtype, o->redop, co, NULL);
    case PLAIT_BENCH_ALLGATHER: return api->allgather(comm, send, recv, s->per, o->dtype, co, NULL);
    case PLAIT_BENCH_BROADCAST: return api->broadcast(comm, recv, s->count, o->dtype, o->root, co, NULL);
    case PLAIT_BENCH_ALLTOALL: return api->alltoall(comm, send, recv, s->per, o->dtype, co, NULL);
    default: {
        int n = api->size(comm), me = api->rank(comm);
        plait_request *rr = NULL, *sr = NULL;
        plait_status st = api->recv(comm, recv, s->count, o->dtype, (me - 1 + n) % n, 7, co, &rr);
        if (st != PLAIT_OK) return st;
        st = api->send(comm, send, s->count, o->dtype, (me + 1) % n, 7, co, &sr);
        plait_status w1 = st == PLAIT_OK ? api->wait(sr) : st;
        plait_status w2 = api->wait(rr);
        return w1 != PLAIT_OK ? w1 : w2;
    }
    }
}

static void header(const plait_comm *comm, const plait_bench_comm_opts *o, int n, FILE *out) {
    char algo[96];
    if (o->algo == PLAIT_ALGO_AUTO)
        snprintf(algo, sizeof algo, "[comm] algorithm = %s", plait_coll_algo_name(comm->settings.algorithm));
    else
        snprintf(algo, sizeof algo, "%s", plait_coll_algo_name(o->algo));
    const char *mem = o->mem && o->mem->kind != PLAIT_MEM_HOST ? o->mem->name : "host";
    fprintf(out, "# plait bench comm: %s on %d rank%s (%s), %s%s%s, algorithm %s, %s memory%s\n",
            plait_bench_op_name(o->op), n, n == 1 ? "" : "s", o->transport ? o->transport : "?",
            plait_dtype_name(o->dtype), is_reduction(o->op) ? " " : "",
            is_reduction(o->op) ? plait_redop_name(o->redop) : "", algo, mem,
            strcmp(mem, "host") ? " (results copied back to be checked)" : "");
    fprintf(out, "# warmup %d, iters %d; time = median over iterations of the slowest rank, each iteration "
                 "timed alone after a barrier (bandwidths from it); loop = the same iterations back to back, "
                 "total / iters on the slowest rank; every result checked\n#\n",
            o->warmup, o->iters);
    fprintf(out, "# %12s %12s %6s %6s %11s %9s %9s %7s %7s %11s\n", "size", "count", "type", "redop", "time",
            "algbw", "busbw", "#wrong", "algo", "loop");
    fprintf(out, "# %12s %12s %6s %6s %11s %9s %9s %7s %7s %11s\n", "(B)", "(elements)", "", "", "(us)", "(GB/s)",
            "(GB/s)", "", "(ran)", "(us)");
    fflush(out);
}

plait_status plait_bench_comm_check(const plait_bench_comm_opts *o, int n) {
    if (!plait_dtype_size(o->dtype)) return plait_set_error(PLAIT_ERR_INVALID_ARG, "bench: unknown dtype");
    if (o->iters < 1 || o->warmup < 0 || !(o->factor > 1.0) || o->min_bytes > o->max_bytes)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bench: need iters >= 1, warmup >= 0, factor > 1, "
                                                      "min <= max (--min %llu, --max %llu)",
                               (unsigned long long)o->min_bytes, (unsigned long long)o->max_bytes);
    /* the sizes grow by the factor from --min to --max: a factor a hair
     * above 1 (1.0000000000000002 moved a size by one ulp a step) made
     * steps without end, the ranks spinning before their next row */
    double steps = log((double)o->max_bytes / (double)o->min_bytes) / log1p(o->factor - 1.0);
    if (steps > 1e7)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "bench: --factor %.17g takes %.3g steps from --min %llu to --max %llu bytes (at most "
                               "10 million); give a larger factor",
                               o->factor, steps, (unsigned long long)o->min_bytes, (unsigned long long)o->max_bytes);
    size_t esz = plait_dtype_size(o->dtype);
    if (shape_of(o->op, o->max_bytes, esz, n).count == 0) {
        int split = o->op == PLAIT_BENCH_ALLGATHER || o->op == PLAIT_BENCH_REDUCE_SCATTER || o->op == PLAIT_BENCH_ALLTOALL;
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "bench: --max %llu bytes holds no %s element%s (%zu bytes each%s): nothing to measure; "
                               "give --max %zu or more",
                               (unsigned long long)o->max_bytes, plait_dtype_name(o->dtype), split ? " per rank" : "",
                               esz, split ? ", one per rank" : "", esz * (split ? (size_t)n : 1));
    }
    if (o->op == PLAIT_BENCH_SENDRECV && n < 2)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bench: sendrecv needs at least 2 ranks (this job has %d)", n);
    if (o->op == PLAIT_BENCH_BROADCAST && (o->root < 0 || o->root >= n))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bench: --root %d is not a rank of this job of %d (0..%d)",
                               o->root, n, n - 1);
    return PLAIT_OK;
}

uint64_t plait_bench_comm_host_bytes(const plait_bench_comm_opts *o, int n) {
    size_t esz = plait_dtype_size(o->dtype);
    shape big = shape_of(o->op, o->max_bytes, esz, n);
    uint64_t sb = big.send * esz, rb = big.recv * esz;
    return (sb ? sb : 64) + 2 * (rb ? rb : 64) + 2 * (uint64_t)o->iters * sizeof(double);
}

plait_status plait_bench_comm_check_memory(const plait_bench_comm_opts *o, int n, int local, int threads) {
    plait_host_memory m;
    plait_host_memory_read(&m);
    uint64_t per = plait_bench_comm_host_bytes(o, n);
    double all = (double)per * (local > 0 ? local : 1);
    /* ulimit -v bounds one process: a rank's buffers, or all of a threads run's */
    double one = threads ? all : (double)per;
    int over_host = m.usable > 0 && m.usable != UINT64_MAX && all > (double)m.usable;
    int over_process = m.process_limit != UINT64_MAX && one > (double)m.process_limit;
    if (!over_host && !over_process) return PLAIT_OK;
    double room = over_host ? (double)m.usable / (local > 0 ? local : 1) : (double)m.process_limit / (threads ? local : 1);
    /* the largest power of two --max whose buffers fit (they grow in
     * proportion to it), written as --max takes it */
    double fit = (double)o->max_bytes * room / (double)per;
    uint64_t p2 = 1;
    while ((double)(p2 * 2) <= fit && p2 < ((uint64_t)1 << 62)) p2 *= 2;
    static const char units[] = " KMGTP";
    int u = 0;
    while (u < 5 && p2 >= 1024) p2 /= 1024, u++;
    char d[32];
    if (u) snprintf(d, sizeof d, "%llu%c", (unsigned long long)p2, units[u]);
    else snprintf(d, sizeof d, "%llu", (unsigned long long)p2);
    char a[32], b[32], c[32], ranks[96] = "", room_text[512];
    if (over_host) plait_host_memory_room_text(&m, room_text, sizeof room_text);
    else snprintf(room_text, sizeof room_text, "ulimit -v allows one process %s",
                  plait_bytes_text((double)m.process_limit, c, sizeof c));
    if (local > 1)
        snprintf(ranks, sizeof ranks, " on each of %d ranks here, %s in all,", local, plait_bytes_text(all, b, sizeof b));
    return plait_set_error(PLAIT_ERR_NO_MEMORY,
                           "--max %llu bytes needs %s of host buffers (send, receive and the expected result)%s and "
                           "%s; give --max %s or less",
                           (unsigned long long)o->max_bytes, plait_bytes_text((double)per, a, sizeof a), ranks,
                           room_text, d);
}

/* long: one loop over the sizes whose buffers, reset, timed region and
 * check are one measurement; the comments inside say why each is where it is */
plait_status plait_bench_comm_run(plait_comm *comm, const plait_bench_comm_opts *o, FILE *out,
                                  uint64_t *wrong_total, uint64_t *wrong_here) {
    const plait_coll_api *api = plait_coll_api_table();
    int n = api->size(comm), me = api->rank(comm);
    size_t esz = plait_dtype_size(o->dtype);
    *wrong_total = 0;
    if (wrong_here) *wrong_here = 0;
    plait_status checked = plait_bench_comm_check(o, n);
    if (checked != PLAIT_OK) return checked;
    /* each size's calls into the comm plugin are compared with this, as
     * `plait train` compares each step's (train/run.h) */
    plait_process_state set_up;
    plait_process_state_take(&set_up);
    shape big = shape_of(o->op, o->max_bytes, esz, n);
    size_t sb = big.send * esz, rb = big.recv * esz;
    unsigned char *send = plait_alloc(sb ? sb : 64, PLAIT_MEM_HOST, 4096, "bench send");
    unsigned char *recv = plait_alloc(rb ? rb : 64, PLAIT_MEM_HOST, 4096, "bench recv");
    unsigned char *exp = plait_alloc(rb ? rb : 64, PLAIT_MEM_HOST, 4096, "bench expected");
    double *times = malloc((size_t)o->iters * sizeof(double)), *tmax = malloc((size_t)o->iters * sizeof(double));
    /* device buffers, if any; send/recv above are then their host images */
    const plait_bench_mem *dm = o->mem && o->mem->kind != PLAIT_MEM_HOST ? o->mem : NULL;
    unsigned char *dsend = dm ? dm->alloc(sb ? sb : 64, "bench send") : NULL;
    unsigned char *drecv = dm ? dm->alloc(rb ? rb : 64, "bench recv") : NULL;
    plait_status st = PLAIT_OK;
    if (dm && (!dsend || !drecv)) {
        st = plait_wrap_error(PLAIT_ERR_NO_MEMORY, "bench: %s buffers for %llu bytes", dm->name,
                              (unsigned long long)o->max_bytes);
        goto out;
    }
    if (!send || !recv || !exp || !times || !tmax) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "bench: cannot allocate buffers for %llu bytes",
                             (unsigned long long)o->max_bytes);
        goto out;
    }
    plait_coll_opts co = {.struct_size = sizeof co, .algo = o->algo, .mem_kind = dm ? dm->kind : PLAIT_MEM_HOST,
                          .label = "bench"};
    void *op_send = dm ? dsend : send, *op_recv = dm ? drecv : recv;
    if (me == 0 && out) header(comm, o, n, out);
    double bus_sum = 0;
    int rows = 0;
    uint64_t last = 0;
    for (double b = (double)o->min_bytes; b <= (double)o->max_bytes * 1.0000001; b *= o->factor) {
        uint64_t bytes = (uint64_t)llround(b);
        shape s = shape_of(o->op, bytes, esz, n);
        if (s.count == 0 || s.count * esz == last) continue; /* rounding gave the same size */
        last = s.count * esz;
        for (size_t i = 0; i < s.send; i++) store(send, o->dtype, i, input(o, me, i));
        if (dm && (st = dm->copy(dsend, send, s.send * esz, PLAIT_COPY_TO_DEVICE)) != PLAIT_OK) goto out;
        fill_expected(o, &s, n, me, exp);
        int bcast_root = o->op == PLAIT_BENCH_BROADCAST && me == o->root;
        uint64_t wrong = 0;
        int ran = -1; /* the algorithm the operation ran (AUTO resolved); -1 for sendrecv */
        /* Every iteration, warm-up or timed, starts from a reset receive
         * buffer (the sentinel; the root's own data for broadcast), so an
         * operation that writes nothing cannot pass on an earlier result,
         * and every result is checked. Reset and check stay outside the
         * timed region, and the barrier after the reset starts the ranks
         * together, so no rank's time includes another rank's checking. */
        for (int it = -o->warmup; it < o->iters; it++) {
            if ((st = reset_recv(dm, drecv, recv, exp, s.recv * esz, bcast_root)) != PLAIT_OK) goto out;
            if ((st = api->barrier(comm, NULL, NULL)) != PLAIT_OK) goto out;
            double t0 = plait_clock_now();
            if (o->fault != PLAIT_BENCH_FAULT_STALE || it < 1) st = one_op(comm, o, &co, op_send, op_recv, &s);
            double dt = plait_clock_now() - t0;
            if (st != PLAIT_OK) goto out;
            if (o->op != PLAIT_BENCH_SENDRECV) ran = plait_comm_last_algorithm(comm);
            if (it >= 0) times[it] = dt;
            if ((st = fetch_result(dm, recv, drecv, s.recv * esz)) != PLAIT_OK) goto out;
            wrong += check_result(o, me, recv, exp, s.recv, esz);
        }
        /* The back-to-back figure (nccl-tests' time, the peers' "loop"):
         * `iters` operations with no barrier between them, so a rank that
         * finishes early starts the next one as in a training step. Only
         * the last result survives to be checked; it is. */
        if ((st = reset_recv(dm, drecv, recv, exp, s.recv * esz, bcast_root)) != PLAIT_OK) goto out;
        if ((st = api->barrier(comm, NULL, NULL)) != PLAIT_OK) goto out;
        double l0 = plait_clock_now();
        for (int it = 0; it < o->iters && o->fault != PLAIT_BENCH_FAULT_STALE; it++)
            if ((st = one_op(comm, o, &co, op_send, op_recv, &s)) != PLAIT_OK) goto out;
        double loop = (plait_clock_now() - l0) / o->iters, loop_max = 0;
        if ((st = fetch_result(dm, recv, drecv, s.recv * esz)) != PLAIT_OK) goto out;
        wrong += check_result(o, me, recv, exp, s.recv, esz);
        /* the slowest rank per iteration and per loop; #wrong over all ranks */
        if (wrong_here) *wrong_here += wrong;
        int64_t w = (int64_t)wrong, wsum = 0;
        if ((st = api->allreduce(comm, times, tmax, (size_t)o->iters, PLAIT_F64, PLAIT_MAX, NULL, NULL)) != PLAIT_OK ||
            (st = api->allreduce(comm, &loop, &loop_max, 1, PLAIT_F64, PLAIT_MAX, NULL, NULL)) != PLAIT_OK ||
            (st = api->allreduce(comm, &w, &wsum, 1, PLAIT_I64, PLAIT_SUM, NULL, NULL)) != PLAIT_OK)
            goto out;
        *wrong_total += (uint64_t)wsum;
        char subject[160];
        /* "threads" is the core's own in-process transport, not a plugin */
        const char *name = o->transport ? o->transport : "?";
        int inprocess = strcmp(name, "threads") == 0;
        snprintf(subject, sizeof subject, "%zu bytes: the calls into the %s '%s'", s.count * esz,
                 inprocess ? "in-process transport" : "comm plugin", name);
        if ((st = plait_process_state_refuse(&set_up, subject, "")) != PLAIT_OK) goto out;
        qsort(tmax, (size_t)o->iters, sizeof(double), cmp_double);
        double t = tmax[o->iters / 2], S = (double)(s.count * esz);
        double algbw = S / t / 1e9, busbw = algbw * bus_factor(o->op, n);
        bus_sum += busbw;
        rows++;
        const char *ran_name = ran < 0 ? "-" : plait_coll_algo_name((plait_coll_algo)ran);
        if (me == 0 && out) {
            fprintf(out, "  %12zu %12zu %6s %6s %11.1f %9.3f %9.3f %7lld %7s %11.1f\n", s.count * esz, s.count,
                    plait_dtype_name(o->dtype), is_reduction(o->op) ? plait_redop_name(o->redop) : "-",
                    t * 1e6, algbw, busbw, (long long)wsum, ran_name, loop_max * 1e6);
            fflush(out);
        }
        if (me == 0 && o->csv) {
            fprintf(o->csv, "%s,%d,%s,%s,%s,%s,%zu,%zu,%.3f,%.3f,%.6f,%.6f,%lld,%.3f\n",
                    plait_bench_op_name(o->op), n, o->transport ? o->transport : "",
                    ran_name, plait_dtype_name(o->dtype),
                    is_reduction(o->op) ? plait_redop_name(o->redop) : "", s.count * esz, s.count,
                    t * 1e6, tmax[0] * 1e6, algbw, busbw, (long long)wsum, loop_max * 1e6);
            fflush(o->csv);
        }
    }
    if (me == 0 && out) {
        fprintf(out, "# Avg bus bandwidth    : %.3f GB/s\n", rows ? bus_sum / rows : 0.0);
        fprintf(out, "# Total #wrong         : %llu\n", (unsigned long long)*wrong_total);
        fflush(out);
    }
out:
    plait_process_state_free(&set_up);
    if (dm) dm->free(dsend), dm->free(drecv);
    plait_free(send);
    plait_free(recv);
    plait_free(exp);
    free(times);
    free(tmax);
    return st;
}
