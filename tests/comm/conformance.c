#include "comm/conformance.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "coll/reduce.h"
#include "runtime/error.h"

void conformance_store(void *buf, int dtype, size_t i, double v) {
    switch ((plait_dtype)dtype) {
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

double conformance_load(const void *buf, int dtype, size_t i) {
    switch ((plait_dtype)dtype) {
    case PLAIT_F32: return ((const float *)buf)[i];
    case PLAIT_F64: return ((const double *)buf)[i];
    case PLAIT_F16: return plait_f16_to_f32(((const uint16_t *)buf)[i]);
    case PLAIT_BF16: return plait_bf16_to_f32(((const uint16_t *)buf)[i]);
    case PLAIT_I32: return ((const int32_t *)buf)[i];
    case PLAIT_I64: return (double)((const int64_t *)buf)[i];
    case PLAIT_U8: return ((const uint8_t *)buf)[i];
    default: return NAN;
    }
}

double conformance_input(int op, int is_unsigned, int q, size_t i) {
    size_t iq = i + (size_t)q;
    switch (op) {
    case PLAIT_SUM:
    case PLAIT_AVG:
        /* |sum| <= 4*8: exact in u8, bf16 (8-bit mantissa) and up */
        return is_unsigned ? (double)((i * 7 + (size_t)q * 3) % 5)
                           : (double)((i * 7 + (size_t)q * 3) % 9) - 4.0;
    case PLAIT_PROD:
        /* at most two 2s among 8 ranks: |product| <= 4 */
        if (iq % 4 == 0) return 2.0;
        return !is_unsigned && (i + 2 * (size_t)q) % 3 == 0 ? -1.0 : 1.0;
    case PLAIT_MIN:
    case PLAIT_MAX:
        return is_unsigned ? (double)((i * 13 + (size_t)q * 7) % 11)
                           : (double)((i * 13 + (size_t)q * 7) % 11) - 5.0;
    default:
        /* data movement: distinct per (rank, index) in a small range */
        return (double)(((size_t)q * 31 + i * 7) % 97);
    }
}

/* The period of conformance_input in i, whatever q (each case's modulus
 * divides the stride times it). */
static size_t input_period(int op, int is_unsigned) {
    switch (op) {
        case PLAIT_SUM:
        case PLAIT_AVG:
            return is_unsigned ? 5 : 9;
        case PLAIT_PROD:
            return 12; /* i + q mod 4 and i + 2q mod 3 */
        case PLAIT_MIN:
        case PLAIT_MAX:
            return 11;
        default:
            return 97;
    }
}

/* The reduction of element i over ranks 0..n-1, as `dtype` stores it. */
static double reduced(int op, plait_dtype dtype, int n, size_t i) {
    int uns = dtype == PLAIT_U8;
    double acc = conformance_input(op, uns, 0, i);
    for (int q = 1; q < n; q++) {
        double x = conformance_input(op, uns, q, i);
        switch (op) {
        case PLAIT_PROD: acc *= x; break;
        case PLAIT_MIN: acc = x < acc ? x : acc; break;
        case PLAIT_MAX: acc = x > acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    if (op != PLAIT_AVG) return acc;
    switch (dtype) {
    case PLAIT_F32: return (double)((float)acc / (float)n);
    case PLAIT_F64: return acc / n;
    case PLAIT_F16: return plait_f16_to_f32(plait_f32_to_f16((float)acc / (float)n));
    case PLAIT_BF16: return plait_bf16_to_f32(plait_f32_to_bf16((float)acc / (float)n));
    case PLAIT_I32:
    case PLAIT_I64: return (double)((int64_t)acc / n);
    case PLAIT_U8: return (double)((uint8_t)acc / n);
    default: return NAN;
    }
}

typedef struct ccase {
    plait_coll_kind kind;
    plait_coll_algo algo;
    plait_dtype dtype;
    int op;           /* -1 for data movement */
    size_t count;
    int inplace;      /* 0 out of place, 1 MPI form, 2 NCCL form */
    int root;
    int async;
} ccase;

static int is_reduction(plait_coll_kind k) {
    return k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_REDUCE_SCATTER || k == PLAIT_COLL_REDUCE;
}

#define GUARD 64
#define SENTINEL 0xA5

void conformance_repeat(void *buf, size_t elem_size, size_t period, size_t count) {
    unsigned char *b = buf;
    for (size_t done = period; done < count;) { /* done is a whole number of periods */
        size_t n = done < count - done ? done : count - done;
        memcpy(b + done * elem_size, b, n * elem_size);
        done += n;
    }
}

/* Store the values v(i) = conformance_input(op, uns, q, start + i), i <
 * count, into buf as `dtype` stores them: one period from the function, the
 * rest copied from it (doubling), the same bytes as storing each. */
static void fill_values(void *buf, plait_dtype dtype, int op, int q, size_t start, size_t count) {
    int uns = dtype == PLAIT_U8;
    size_t period = input_period(op, uns), esz = plait_dtype_size(dtype);
    size_t first = count < period ? count : period;
    for (size_t i = 0; i < first; i++) conformance_store(buf, dtype, i, conformance_input(op, uns, q, start + i));
    conformance_repeat(buf, esz, period, count);
}

/* Fill rank q's input for case c into buf (`elems` elements). */
static void fill_input(const ccase *c, void *buf, int q, size_t elems) {
    fill_values(buf, c->dtype, c->op, q, 0, elems);
}

/* This rank's expected output of case c (`elems` elements) into want, as
 * the dtype stores it: a reduction's elements from one period of the
 * inputs, reduced once each and copied like fill_values. */
static void expected_output(const ccase *c, int n, int me, void *want, size_t elems) {
    size_t cnt = c->count, esz = plait_dtype_size(c->dtype);
    unsigned char *w = want;
    switch (c->kind) {
    case PLAIT_COLL_ALLREDUCE:
    case PLAIT_COLL_REDUCE:
    case PLAIT_COLL_REDUCE_SCATTER: {
        size_t period = input_period(c->op, c->dtype == PLAIT_U8);
        size_t at = c->kind == PLAIT_COLL_REDUCE_SCATTER ? (size_t)me * cnt : 0;
        size_t first = elems < period ? elems : period;
        for (size_t j = 0; j < first; j++) conformance_store(w, c->dtype, j, reduced(c->op, c->dtype, n, at + j));
        conformance_repeat(w, esz, period, elems);
        break;
    }
    case PLAIT_COLL_ALLGATHER:
    case PLAIT_COLL_GATHER:
        for (size_t q = 0; q * cnt < elems; q++) fill_values(w + q * cnt * esz, c->dtype, -1, (int)q, 0, cnt);
        break;
    case PLAIT_COLL_BROADCAST:
        fill_values(w, c->dtype, -1, c->root, 0, elems);
        break;
    case PLAIT_COLL_SCATTER:
        fill_values(w, c->dtype, -1, c->root, (size_t)me * cnt, elems);
        break;
    case PLAIT_COLL_ALLTOALL:
        for (size_t q = 0; q * cnt < elems; q++)
            fill_values(w + q * cnt * esz, c->dtype, -1, (int)q, (size_t)me * cnt, cnt);
        break;
    default:
        break;
    }
}

#define CASE_FMT "%s algo=%s %s %s count=%zu inplace=%d root=%d async=%d on %d ranks, rank %d: %s"

static void note(conformance_result *res, const ccase *c, int n, int me, const char *extra) {
    if (res->first[0]) return;
    snprintf(res->first, sizeof res->first, CASE_FMT, plait_coll_kind_name(c->kind),
             plait_coll_algo_name(c->algo), plait_dtype_name(c->dtype),
             c->op >= 0 ? plait_redop_name((plait_redop)c->op) : "-", c->count, c->inplace, c->root,
             c->async, n, me, extra);
}

static void run_case(plait_comm *comm, const ccase *c, conformance_result *res) {
    const plait_coll_api *api = plait_coll_api_table();
    int n = api->size(comm), me = api->rank(comm);
    size_t esz = plait_dtype_size(c->dtype), cnt = c->count;
    size_t send_elems = cnt, recv_elems = cnt;
    int root = c->root == me;
    switch (c->kind) {
    case PLAIT_COLL_REDUCE_SCATTER: send_elems = cnt * (size_t)n; break;
    case PLAIT_COLL_ALLGATHER: recv_elems = cnt * (size_t)n; break;
    case PLAIT_COLL_GATHER: recv_elems = root ? cnt * (size_t)n : 0; break;
    case PLAIT_COLL_SCATTER: send_elems = root ? cnt * (size_t)n : 0; break;
    case PLAIT_COLL_ALLTOALL: send_elems = recv_elems = cnt * (size_t)n; break;
    case PLAIT_COLL_REDUCE: recv_elems = root ? cnt : 0; break;
    default: break;
    }
    size_t sb = send_elems * esz, rb = recv_elems * esz;
    size_t big = (sb > rb ? sb : rb) + 2 * GUARD;
    unsigned char *sbase = malloc(big), *rbase = malloc(big);
    if (!sbase || !rbase) {
        free(sbase), free(rbase);
        res->failed++;
        note(res, c, n, me, "out of memory in the test");
        return;
    }
    memset(sbase, SENTINEL, big);
    memset(rbase, SENTINEL, big);
    unsigned char *send = sbase + GUARD, *recv = rbase + GUARD;
    /* input: the in-place forms put it where the collective expects it */
    const void *sp = send;
    void *rp = recv;
    plait_coll_kind k = c->kind;
    if (k == PLAIT_COLL_BROADCAST) {
        if (root) fill_input(c, recv, me, cnt);
    } else if (c->inplace && (k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_ALLTOALL ||
                              (k == PLAIT_COLL_REDUCE_SCATTER && c->inplace == 1) ||
                              (k == PLAIT_COLL_REDUCE && root))) {
        fill_input(c, recv, me, send_elems);
        sp = recv;
    } else if (c->inplace && k == PLAIT_COLL_REDUCE_SCATTER) { /* NCCL: recv = send + me*count */
        fill_input(c, send, me, send_elems);
        rp = send + (size_t)me * cnt * esz;
    } else if (c->inplace && k == PLAIT_COLL_ALLGATHER) {
        unsigned char *own = recv + (size_t)me * cnt * esz;
        fill_input(c, own, me, cnt);
        sp = c->inplace == 1 ? (const void *)recv : own;
    } else if (c->inplace && k == PLAIT_COLL_GATHER && root) {
        fill_input(c, recv + (size_t)me * cnt * esz, me, cnt);
        sp = recv;
    } else if (c->inplace && k == PLAIT_COLL_SCATTER && root) {
        fill_input(c, send, me, send_elems);
        rp = send;
    } else {
        fill_input(c, send, me, send_elems);
    }
    if (k == PLAIT_COLL_REDUCE && !root && c->async) rp = NULL; /* non-roots may pass NULL */
    if (k == PLAIT_COLL_GATHER && !root && c->async) rp = NULL;
    if (k == PLAIT_COLL_SCATTER && !root && c->async) sp = NULL;

    plait_coll_opts opts = {.struct_size = sizeof opts, .algo = c->algo, .label = "conformance"};
    plait_request *req = NULL, **rq = c->async ? &req : NULL;
    plait_status st;
    switch (k) {
    case PLAIT_COLL_ALLREDUCE: st = api->allreduce(comm, sp, rp, cnt, c->dtype, c->op, &opts, rq); break;
    case PLAIT_COLL_REDUCE_SCATTER: st = api->reduce_scatter(comm, sp, rp, cnt, c->dtype, c->op, &opts, rq); break;
    case PLAIT_COLL_ALLGATHER: st = api->allgather(comm, sp, rp, cnt, c->dtype, &opts, rq); break;
    case PLAIT_COLL_BROADCAST: st = api->broadcast(comm, rp, cnt, c->dtype, c->root, &opts, rq); break;
    case PLAIT_COLL_REDUCE: st = api->reduce(comm, sp, rp, cnt, c->dtype, c->op, c->root, &opts, rq); break;
    case PLAIT_COLL_GATHER: st = api->gather(comm, sp, rp, cnt, c->dtype, c->root, &opts, rq); break;
    case PLAIT_COLL_SCATTER: st = api->scatter(comm, sp, rp, cnt, c->dtype, c->root, &opts, rq); break;
    case PLAIT_COLL_ALLTOALL: st = api->alltoall(comm, sp, rp, cnt, c->dtype, &opts, rq); break;
    default: st = api->barrier(comm, &opts, rq); break;
    }
    if (st == PLAIT_OK && req) st = api->wait(req);
    res->cases++;
    if (st != PLAIT_OK) {
        res->failed++;
        note(res, c, n, me, plait_last_error());
        free(sbase), free(rbase);
        return;
    }
    /* where this rank's result is */
    const unsigned char *out = recv;
    size_t out_elems = recv_elems;
    if (k == PLAIT_COLL_REDUCE_SCATTER && c->inplace == 2) out = (const unsigned char *)rp;
    if (k == PLAIT_COLL_SCATTER && c->inplace && root) out = send + (size_t)me * cnt * esz;
    if (k == PLAIT_COLL_BARRIER) out_elems = 0;
    uint64_t wrong = 0;
    /* The expected output as the dtype stores it, compared in one call (a
     * sanitizer intercepts every memcmp) */
    size_t most = out_elems > send_elems ? out_elems : send_elems;
    unsigned char *want = malloc(most * esz + 1);
    if (!want) {
        free(sbase), free(rbase);
        res->failed++;
        note(res, c, n, me, "out of memory in the test");
        return;
    }
    expected_output(c, n, me, want, out_elems);
    if (out_elems && memcmp(want, out, out_elems * esz) != 0)
        for (size_t j = 0; j < out_elems; j++)
            if (memcmp(want + j * esz, out + j * esz, esz) != 0) {
                if (!wrong) {
                    char what[160];
                    snprintf(what, sizeof what, "element %zu is %.9g, expected %.9g", j,
                             conformance_load(out, c->dtype, j), conformance_load(want, c->dtype, j));
                    note(res, c, n, me, what);
                }
                wrong++;
            }
    /* nothing written outside the output, the input untouched (out of place:
     * the same stores of the same values, so the same bytes) */
    int guard_bad = 0;
    for (size_t g = 0; g < GUARD; g++)
        guard_bad |= rbase[g] != SENTINEL || sbase[g] != SENTINEL ||
                     (rb + GUARD + g < big && rbase[GUARD + rb + g] != SENTINEL && !(c->inplace && k != PLAIT_COLL_ALLGATHER)) ;
    if (!c->inplace && k != PLAIT_COLL_BROADCAST && sp && send_elems) {
        fill_input(c, want, me, send_elems);
        if (memcmp(want, send, send_elems * esz) != 0) guard_bad = 1;
    }
    free(want);
    if (!root && rb == 0 && (k == PLAIT_COLL_REDUCE || k == PLAIT_COLL_GATHER))
        for (size_t g = 0; g < big; g++) guard_bad |= rbase[g] != SENTINEL;
    if (guard_bad) {
        wrong++;
        note(res, c, n, me, "wrote outside its output or modified its input");
    }
    res->wrong += wrong;
    free(sbase), free(rbase);
}

/* Point-to-point: every rank sends `count` elements to the rank `shift` to
 * its right and receives them from the one `shift` to its left (receive
 * posted first), checking the data, the guards around it and that the send
 * buffer is untouched. */
static void run_sendrecv(plait_comm *comm, plait_dtype dtype, size_t count, int shift, uint32_t tag,
                         conformance_result *res) {
    const plait_coll_api *api = plait_coll_api_table();
    int n = api->size(comm), me = api->rank(comm), to = (me + shift) % n, from = (me - shift + n) % n;
    size_t esz = plait_dtype_size(dtype), bytes = count * esz;
    unsigned char *send = malloc(bytes + 1), *rbase = malloc(bytes + 2 * GUARD);
    char what[160] = "";
    res->cases++;
    if (!send || !rbase) {
        snprintf(what, sizeof what, "out of memory in the test");
        res->failed++;
        goto out;
    }
    unsigned char *recv = rbase + GUARD;
    memset(rbase, SENTINEL, bytes + 2 * GUARD);
    for (size_t i = 0; i < count; i++)
        conformance_store(send, dtype, i, conformance_input(-1, dtype == PLAIT_U8, me, i));
    plait_request *rr = NULL;
    plait_status st = api->recv(comm, recv, count, dtype, from, tag, NULL, &rr);
    if (st == PLAIT_OK) st = api->send(comm, send, count, dtype, to, tag, NULL, NULL);
    plait_status wst = rr ? api->wait(rr) : st;
    if (st != PLAIT_OK || wst != PLAIT_OK) {
        snprintf(what, sizeof what, "%s", plait_last_error());
        res->failed++;
        goto out;
    }
    uint64_t wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double want = conformance_input(-1, dtype == PLAIT_U8, from, i), got = conformance_load(recv, dtype, i);
        if (got != want && !wrong++) snprintf(what, sizeof what, "element %zu is %g, expected %g", i, got, want);
        if (conformance_load(send, dtype, i) != conformance_input(-1, dtype == PLAIT_U8, me, i) && !wrong++)
            snprintf(what, sizeof what, "send buffer element %zu was modified", i);
    }
    for (size_t g = 0; g < GUARD; g++)
        if ((rbase[g] != SENTINEL || recv[bytes + g] != SENTINEL) && !wrong++)
            snprintf(what, sizeof what, "wrote outside the receive buffer");
    res->wrong += wrong;
out:
    if (what[0] && !res->first[0])
        snprintf(res->first, sizeof res->first,
                 "send/recv %s count=%zu from rank %d to rank %d on %d ranks, rank %d: %s", plait_dtype_name(dtype),
                 count, from, to, n, me, what);
    free(send);
    free(rbase);
}

typedef struct kind_algos {
    plait_coll_kind kind;
    int n_algos;
    plait_coll_algo algos[6];
    int n_inplace; /* forms: 0..n_inplace-1 */
} kind_algos;

static const kind_algos matrix[] = {
    {PLAIT_COLL_ALLREDUCE, 6,
     {PLAIT_ALGO_AUTO, PLAIT_ALGO_RING, PLAIT_ALGO_RHD, PLAIT_ALGO_TREE, PLAIT_ALGO_DIRECT, PLAIT_ALGO_ORDERED}, 2},
    {PLAIT_COLL_REDUCE_SCATTER, 4, {PLAIT_ALGO_AUTO, PLAIT_ALGO_RING, PLAIT_ALGO_RHD, PLAIT_ALGO_ORDERED}, 3},
    {PLAIT_COLL_ALLGATHER, 4, {PLAIT_ALGO_AUTO, PLAIT_ALGO_RING, PLAIT_ALGO_RHD, PLAIT_ALGO_DIRECT}, 3},
    {PLAIT_COLL_BROADCAST, 4, {PLAIT_ALGO_AUTO, PLAIT_ALGO_RING, PLAIT_ALGO_TREE, PLAIT_ALGO_DIRECT}, 1},
    {PLAIT_COLL_REDUCE, 4, {PLAIT_ALGO_AUTO, PLAIT_ALGO_RING, PLAIT_ALGO_TREE, PLAIT_ALGO_ORDERED}, 2},
    {PLAIT_COLL_GATHER, 2, {PLAIT_ALGO_TREE, PLAIT_ALGO_DIRECT}, 2},
    {PLAIT_COLL_SCATTER, 2, {PLAIT_ALGO_TREE, PLAIT_ALGO_DIRECT}, 2},
    {PLAIT_COLL_ALLTOALL, 2, {PLAIT_ALGO_RING, PLAIT_ALGO_DIRECT}, 2},
    {PLAIT_COLL_BARRIER, 1, {PLAIT_ALGO_AUTO}, 1},
};

unsigned conformance_sample(void) {
    const char *env = getenv("PLAIT_TEST_SAMPLE");
    if (env) { /* as lib.sh's sample_cases: a number, or the test stops saying so */
        if (!*env || strspn(env, "0123456789") != strlen(env)) {
            fprintf(stderr, "PLAIT_TEST_SAMPLE=%s is not a number\n", env);
            exit(1);
        }
        return (unsigned)strtoul(env, NULL, 10);
    }
    const char *src = getenv("PLAIT_SOURCE_DIR");
    if (!src || strchr(src, '\'')) return 0;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "git -C '%s' rev-parse --short=7 HEAD 2>/dev/null", src);
    FILE *p = popen(cmd, "r");
    if (!p) return 0;
    char line[64] = "";
    if (!fgets(line, sizeof line, p)) line[0] = 0;
    pclose(p);
    return (unsigned)strtoul(line, NULL, 16);
}

int conformance_complete(void) { return getenv("PLAIT_TEST_ALL") != NULL; }

int conformance_run(plait_comm *world, const conformance_opts *opts, conformance_result *res) {
    const plait_coll_api *api = plait_coll_api_table();
    int n = api->size(world);
    memset(res, 0, sizeof *res);
    uint64_t serial = 0;
    for (size_t m = 0; m < sizeof matrix / sizeof matrix[0]; m++) {
        const kind_algos *ka = &matrix[m];
        if (opts->only_kind >= 0 && (int)ka->kind != opts->only_kind) continue;
        int reduction = is_reduction(ka->kind);
        for (int dt = 0; dt < PLAIT_DTYPE_COUNT_V1; dt++) {
            size_t esz = plait_dtype_size((plait_dtype)dt);
            size_t sizes[6] = {0, 1, 7, (size_t)(n > 1 ? n - 1 : 0), (size_t)n + 1,
                               (1u << 20) / esz + 3};
            int n_sizes = opts->big ? 6 : 5;
            if (ka->kind == PLAIT_COLL_BARRIER) n_sizes = 1;
            for (int si = 0; si < n_sizes; si++) {
                if (si == 3 && (sizes[3] == 0 || sizes[3] == 1 || sizes[3] == 7)) continue;
                if (si == 4 && (sizes[4] == 1 || sizes[4] == 7)) continue;
                int is_big = si == 5;
                for (int op = reduction ? 0 : -1; op < (reduction ? PLAIT_REDOP_COUNT_V1 : 0); op++) {
                    for (int ai = 0; ai < ka->n_algos; ai++) {
                        for (int ip = 0; ip < ka->n_inplace; ip++) {
                            serial++;
                            /* at the big size one algorithm-and-form per op unless asked:
                             * rotate through them so each is covered across dtypes */
                            if (is_big && !opts->full_big &&
                                (size_t)(ai * ka->n_inplace + ip) !=
                                    (size_t)(dt + op + 1) % (size_t)(ka->n_algos * ka->n_inplace))
                                continue;
                            /* and, when asked, one dtype, rotating with the op and the collective */
                            if (is_big && opts->big_subset &&
                                (size_t)dt != ((size_t)(op + 1 + (int)m) + opts->sample) % PLAIT_DTYPE_COUNT_V1)
                                continue;
                            ccase c = {.kind = ka->kind,
                                       .algo = ka->algos[ai],
                                       .dtype = (plait_dtype)dt,
                                       .op = op,
                                       .count = sizes[si],
                                       .inplace = ip,
                                       .root = (int)((serial * 7) % (uint64_t)n),
                                       .async = (int)(serial % 3 == 1)};
                            run_case(world, &c, res);
                            if (res->failed && opts->verbose) return 1;
                        }
                    }
                }
            }
        }
    }
    if (opts->only_kind < 0 && n > 1)
        for (int dt = 0; dt < PLAIT_DTYPE_COUNT_V1; dt++) {
            size_t esz = plait_dtype_size((plait_dtype)dt);
            size_t sizes[6] = {0, 1, 7, (size_t)n - 1, (size_t)n + 1, (1u << 20) / esz + 3};
            for (int si = 0; si < (opts->big ? 6 : 5); si++) {
                /* one dtype at the big size */
                if (si == 5 && opts->big_subset && (unsigned)dt != opts->sample % PLAIT_DTYPE_COUNT_V1) continue;
                run_sendrecv(world, (plait_dtype)dt, sizes[si], 1 + (dt + si) % (n - 1), (uint32_t)(dt * 8 + si),
                             res);
            }
        }
    return res->wrong || res->failed;
}
