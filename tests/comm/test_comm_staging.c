/*
 * Device buffers on a host-memory transport (core/staging/coll_staging.c): every
 * collective, dtype and operator at 2-4 ranks, staged in chunks through
 * pinned host memory, gives the same bits as the same collective on host
 * buffers (#wrong counts the elements that differ), at sizes below, at and
 * above the chunk and odd ones, for every algorithm and in-place form;
 * point-to-point on device buffers, device to device and device to host;
 * a peer lost mid-transfer and a stalled peer end every rank within the
 * timeout naming the operation and the rank; nothing stays allocated.
 *
 * The device is fake_device.c: memory the host cannot touch (any
 * dereference by the core is a segfault), reached only through copy().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "commstate/comm_device.h"
#include "staging/staging.h"
#include "comm/comm_threads.h"
#include "coll/reduce.h"
#include "comm/fake_device.h"
#include "host/host_table.h"
#include "runtime/error.h"
#include "runtime/memory.h"

#define CHUNK 256 /* [comm] staging_chunk for these tests: many chunks at small sizes */
#define MAXN 4

static const plait_coll_api *api;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct shared {
    plait_threads_world *w;
    plait_comm_settings settings;
    int n;
    uint64_t cases[MAXN], wrong[MAXN], failed[MAXN];
    char first[MAXN][512];
    /* fault tests */
    plait_status st[MAXN];
    double elapsed[MAXN];
    char msg[MAXN][2048];
} shared;

static shared *world_new(int n, double timeout_s) {
    shared *s = calloc(1, sizeof *s);
    s->n = n;
    s->w = plait_threads_world_new(n, 30.0);
    plait_comm_settings_default(&s->settings);
    s->settings.staging_chunk = CHUNK;
    s->settings.timeout_s = timeout_s;
    s->settings.device = fake_device_comm();
    return s;
}

static void world_free(shared *s) {
    plait_threads_world_free(s->w);
    free(s);
}

/* ---- inputs ------------------------------------------------------------ */

static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Element i of an input: random reals in [-1, 1) for floating types (so the
 * order of a sum shows in its bits), small integers for integer types. */
static void fill(void *buf, plait_dtype t, size_t n, uint64_t seed, int op) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = mix(seed * 1000003u + i);
        double u = (double)(r >> 11) * 0x1p-53 * 2.0 - 1.0;
        int small = (int)(r % 5) - 2; /* -2..2: products stay small */
        if (op != PLAIT_PROD) small = (int)(r % 201) - 100;
        switch (t) {
        case PLAIT_F32: ((float *)buf)[i] = (float)u; break;
        case PLAIT_F64: ((double *)buf)[i] = u; break;
        case PLAIT_BF16: {
            float f = (float)u;
            uint32_t b;
            memcpy(&b, &f, 4);
            ((uint16_t *)buf)[i] = (uint16_t)(b >> 16);
            break;
        }
        case PLAIT_F16: /* sign, exponent 5..14 (magnitudes below 1), mantissa */
            ((uint16_t *)buf)[i] = (uint16_t)(((r >> 20) & 1) << 15 | (5 + (r >> 24) % 10) << 10 | (r & 0x3ff));
            break;
        case PLAIT_I32: ((int32_t *)buf)[i] = small; break;
        case PLAIT_I64: ((int64_t *)buf)[i] = small; break;
        case PLAIT_U8: ((uint8_t *)buf)[i] = (uint8_t)(op == PLAIT_PROD ? 1 + r % 3 : r % 60); break;
        default: break;
        }
    }
}

/* ---- one case: the collective on host buffers, then on device buffers -- */

typedef struct ccase {
    plait_coll_kind kind;
    plait_dtype dtype;
    plait_redop op;
    plait_coll_algo algo;
    size_t count;
    int in_place;
    int root;
} ccase;

static int send_blocks(plait_coll_kind k, int n) {
    return k == PLAIT_COLL_REDUCE_SCATTER || k == PLAIT_COLL_SCATTER || k == PLAIT_COLL_ALLTOALL ? n : 1;
}
static int recv_blocks(plait_coll_kind k, int n) {
    return k == PLAIT_COLL_ALLGATHER || k == PLAIT_COLL_GATHER || k == PLAIT_COLL_ALLTOALL ? n : 1;
}

static plait_status call(plait_comm *w, const ccase *c, const void *send, void *recv, plait_mem_kind kind) {
    plait_coll_opts o = {.struct_size = sizeof o, .algo = c->algo, .mem_kind = kind, .label = "stage test"};
    switch (c->kind) {
    case PLAIT_COLL_ALLREDUCE: return api->allreduce(w, send, recv, c->count, c->dtype, c->op, &o, NULL);
    case PLAIT_COLL_REDUCE_SCATTER: return api->reduce_scatter(w, send, recv, c->count, c->dtype, c->op, &o, NULL);
    case PLAIT_COLL_ALLGATHER: return api->allgather(w, send, recv, c->count, c->dtype, &o, NULL);
    case PLAIT_COLL_BROADCAST: return api->broadcast(w, recv, c->count, c->dtype, c->root, &o, NULL);
    case PLAIT_COLL_REDUCE: return api->reduce(w, send, recv, c->count, c->dtype, c->op, c->root, &o, NULL);
    case PLAIT_COLL_GATHER: return api->gather(w, send, recv, c->count, c->dtype, c->root, &o, NULL);
    case PLAIT_COLL_SCATTER: return api->scatter(w, send, recv, c->count, c->dtype, c->root, &o, NULL);
    case PLAIT_COLL_ALLTOALL: return api->alltoall(w, send, recv, c->count, c->dtype, &o, NULL);
    default: return PLAIT_ERR_INVALID_ARG;
    }
}

/* The send and recv pointers of a case inside buffers s (send) and r. */
static void pointers(const ccase *c, int rank, size_t esz, char *s, char *r, const void **send, void **recv) {
    *send = s;
    *recv = r;
    if (!c->in_place) return;
    switch (c->kind) {
    case PLAIT_COLL_ALLREDUCE:
    case PLAIT_COLL_ALLTOALL: *recv = s; break;
    case PLAIT_COLL_REDUCE_SCATTER: *recv = s + (size_t)rank * c->count * esz; break; /* NCCL form */
    case PLAIT_COLL_ALLGATHER: *send = r + (size_t)rank * c->count * esz; break;
    default: break;
    }
}

static void run_case(shared *sh, plait_comm *w, int rank, const ccase *c, uint64_t seed) {
    int n = sh->n, root = c->root == rank;
    size_t esz = plait_dtype_size(c->dtype);
    size_t sb = c->count * esz * (size_t)send_blocks(c->kind, n), rb = c->count * esz * (size_t)recv_blocks(c->kind, n);
    char *hs = malloc(sb + 1), *hr = malloc(rb + 1), *ds = fake_device_alloc(sb + 1), *dr = fake_device_alloc(rb + 1);
    char *got = malloc(rb > sb ? rb + 1 : sb + 1);
    assert_non_null(ds);
    assert_non_null(dr);
    fill(hs, c->dtype, sb / esz, seed * 16 + (uint64_t)rank, (int)c->op);
    memset(hr, 0x5a, rb);
    if (c->kind == PLAIT_COLL_BROADCAST && root) fill(hr, c->dtype, rb / esz, seed * 16 + 9, -1);
    fake_device_upload(ds, hs, sb);
    fake_device_upload(dr, hr, rb);
    int no_send = (c->kind == PLAIT_COLL_SCATTER && !root);
    int no_recv = ((c->kind == PLAIT_COLL_GATHER || c->kind == PLAIT_COLL_REDUCE) && !root);
    const void *send;
    void *recv;
    pointers(c, rank, esz, hs, hr, &send, &recv);
    plait_status st = call(w, c, no_send ? NULL : send, no_recv ? NULL : recv, PLAIT_MEM_HOST);
    pointers(c, rank, esz, ds, dr, &send, &recv);
    plait_status dst = st == PLAIT_OK ? call(w, c, no_send ? NULL : send, no_recv ? NULL : recv, PLAIT_MEM_CUDA) : st;
    sh->cases[rank]++;
    if (st != PLAIT_OK || dst != PLAIT_OK) {
        if (!sh->failed[rank]++)
            snprintf(sh->first[rank], sizeof sh->first[rank], "%s %s count %zu algo %d: %s",
                     plait_coll_kind_name(c->kind), plait_dtype_name(c->dtype), c->count, (int)c->algo,
                     plait_last_error());
    } else {
        /* the result buffer, and the send buffer where the result or an
         * in-place form lives in it */
        int in_send = c->in_place && (c->kind == PLAIT_COLL_ALLREDUCE || c->kind == PLAIT_COLL_ALLTOALL ||
                                      c->kind == PLAIT_COLL_REDUCE_SCATTER);
        const char *want = in_send ? hs : hr;
        size_t bytes = in_send ? sb : rb;
        fake_device_download(got, in_send ? ds : dr, bytes);
        uint64_t wrong = 0;
        for (size_t i = 0; i < bytes; i += esz) wrong += memcmp(got + i, want + i, esz) != 0;
        /* the send buffer of an out-of-place call is untouched */
        if (!in_send && !c->in_place) {
            char *back = malloc(sb + 1);
            fake_device_download(back, ds, sb);
            for (size_t i = 0; i < sb; i += esz) wrong += memcmp(back + i, hs + i, esz) != 0;
            free(back);
        }
        if (wrong && !sh->wrong[rank])
            snprintf(sh->first[rank], sizeof sh->first[rank], "%s %s %s count %zu algo %d in_place %d: %llu wrong",
                     plait_coll_kind_name(c->kind), plait_dtype_name(c->dtype), plait_redop_name(c->op), c->count,
                     (int)c->algo, c->in_place, (unsigned long long)wrong);
        sh->wrong[rank] += wrong;
    }
    fake_device_free(ds);
    fake_device_free(dr);
    free(hs), free(hr), free(got);
}

static int has_op(plait_coll_kind k) {
    return k == PLAIT_COLL_ALLREDUCE || k == PLAIT_COLL_REDUCE_SCATTER || k == PLAIT_COLL_REDUCE;
}

/* Algorithms worth pinning per collective (AUTO first). */
static int algos_of(plait_coll_kind k, plait_coll_algo *out) {
    int n = 0;
    out[n++] = PLAIT_ALGO_AUTO;
    switch (k) {
    case PLAIT_COLL_ALLREDUCE: out[n++] = PLAIT_ALGO_RING, out[n++] = PLAIT_ALGO_RHD, out[n++] = PLAIT_ALGO_TREE,
                               out[n++] = PLAIT_ALGO_ORDERED; break;
    case PLAIT_COLL_REDUCE_SCATTER: out[n++] = PLAIT_ALGO_RING, out[n++] = PLAIT_ALGO_RHD,
                                    out[n++] = PLAIT_ALGO_ORDERED; break;
    case PLAIT_COLL_ALLGATHER: out[n++] = PLAIT_ALGO_RING, out[n++] = PLAIT_ALGO_RHD, out[n++] = PLAIT_ALGO_DIRECT; break;
    case PLAIT_COLL_BROADCAST: out[n++] = PLAIT_ALGO_RING, out[n++] = PLAIT_ALGO_DIRECT; break;
    case PLAIT_COLL_REDUCE: out[n++] = PLAIT_ALGO_RING, out[n++] = PLAIT_ALGO_ORDERED; break;
    case PLAIT_COLL_GATHER:
    case PLAIT_COLL_SCATTER: out[n++] = PLAIT_ALGO_DIRECT; break;
    case PLAIT_COLL_ALLTOALL: out[n++] = PLAIT_ALGO_RING; break;
    default: break;
    }
    return n;
}

static void matrix_main(int rank, void *arg) {
    shared *sh = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(sh->w, rank, &sh->settings, &w) != PLAIT_OK) {
        sh->failed[rank]++;
        snprintf(sh->first[rank], sizeof sh->first[rank], "world: %s", plait_last_error());
        return;
    }
    int n = sh->n;
    uint64_t seed = 1;
    for (int k = 0; k < PLAIT_COLL_BARRIER; k++) {
        plait_coll_kind kind = (plait_coll_kind)k;
        plait_coll_algo algos[8];
        int n_algos = algos_of(kind, algos);
        for (int t = 0; t < PLAIT_DTYPE_COUNT_V1; t++) {
            size_t esz = plait_dtype_size((plait_dtype)t);
            size_t m = CHUNK / (esz * (size_t)(send_blocks(kind, n) > recv_blocks(kind, n) ? send_blocks(kind, n)
                                                                                           : recv_blocks(kind, n)));
            if (!m) m = 1;
            /* below, at and above one chunk, and odd sizes over several */
            size_t counts[] = {1, m - 1 ? m - 1 : 1, m, m + 1, 2 * m + 1, 5 * m + 3};
            for (int o = 0; o < (has_op(kind) ? PLAIT_REDOP_COUNT_V1 : 1); o++)
                for (int a = 0; a < n_algos; a++)
                    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
                        /* pinned algorithms on two dtypes (one float, one integer) */
                        if (a > 0 && t != PLAIT_F32 && t != PLAIT_I32) continue;
                        ccase c = {kind, (plait_dtype)t, (plait_redop)o, algos[a], counts[ci], 0, (int)(ci % (size_t)n)};
                        run_case(sh, w, rank, &c, seed++);
                        /* in-place forms, where the collective has one */
                        if (a == 0 && (kind == PLAIT_COLL_ALLREDUCE || kind == PLAIT_COLL_REDUCE_SCATTER ||
                                       kind == PLAIT_COLL_ALLGATHER || kind == PLAIT_COLL_ALLTOALL)) {
                            c.in_place = 1;
                            run_case(sh, w, rank, &c, seed++);
                        }
                    }
        }
    }
    plait_comm_free(w);
}

static void run_matrix(int n) {
    shared *sh = world_new(n, 30.0);
    uint64_t copies0 = fake_device_copies_on_stager();
    assert_int_equal(plait_threads_run(n, matrix_main, sh), PLAIT_OK);
    uint64_t cases = 0, wrong = 0, failed = 0;
    for (int r = 0; r < n; r++) {
        cases += sh->cases[r], wrong += sh->wrong[r], failed += sh->failed[r];
        if (sh->first[r][0]) fprintf(stderr, "rank %d: %s\n", r, sh->first[r]);
    }
    fprintf(stderr, "%d ranks: %llu cases, #wrong %llu, failed %llu, %llu device copies on the staging thread\n", n,
            (unsigned long long)cases, (unsigned long long)wrong, (unsigned long long)failed,
            (unsigned long long)(fake_device_copies_on_stager() - copies0));
    assert_true(cases > 1000);
    assert_int_equal(failed, 0);
    assert_int_equal(wrong, 0);
    /* the staged copies ran on the staging thread */
    assert_true(fake_device_copies_on_stager() - copies0 > cases);
    /* nothing left behind: the pool went with the communicator */
    assert_int_equal(plait_mem_usage_of("comm staging"), 0);
    assert_int_equal(fake_device_in_use(), 0);
    world_free(sh);
}

static void test_matrix_2_ranks(void **state) { (void)state; run_matrix(2); }
static void test_matrix_3_ranks(void **state) { (void)state; run_matrix(3); }
static void test_matrix_4_ranks(void **state) { (void)state; run_matrix(4); }

/* ---- point-to-point ------------------------------------------------------- */

static void p2p_main(int rank, void *arg) {
    shared *sh = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(sh->w, rank, &sh->settings, &w) != PLAIT_OK) return;
    int n = sh->n, to = (rank + 1) % n, from = (rank + n - 1) % n;
    size_t sizes[] = {0, 1, CHUNK - 1, CHUNK, 3 * CHUNK + 5, 100003};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (int mode = 0; mode < 3; mode++) { /* 0 device->device, 1 device->host, 2 host->device */
            size_t b = sizes[i];
            char *mine = malloc(b + 1), *want = malloc(b + 1), *got = malloc(b + 1);
            fill(mine, PLAIT_U8, b, 77 + (uint64_t)rank * 31 + i, 0);
            fill(want, PLAIT_U8, b, 77 + (uint64_t)from * 31 + i, 0);
            char *ds = fake_device_alloc(b + 1), *dr = fake_device_alloc(b + 1);
            fake_device_upload(ds, mine, b);
            plait_coll_opts dev = {.struct_size = sizeof dev, .mem_kind = PLAIT_MEM_CUDA};
            plait_coll_opts host = {.struct_size = sizeof host, .mem_kind = PLAIT_MEM_HOST};
            int send_dev = mode != 2, recv_dev = mode != 1;
            plait_request *rq = NULL;
            memset(got, 0, b + 1);
            plait_status st = api->send(w, send_dev ? ds : mine, b, PLAIT_U8, to, 5, send_dev ? &dev : &host, &rq);
            if (st == PLAIT_OK)
                st = api->recv(w, recv_dev ? dr : got, b, PLAIT_U8, from, 5, recv_dev ? &dev : &host, NULL);
            if (st == PLAIT_OK) st = api->wait(rq);
            if (st == PLAIT_OK && recv_dev) fake_device_download(got, dr, b);
            sh->cases[rank]++;
            if (st != PLAIT_OK) {
                if (!sh->failed[rank]++) snprintf(sh->first[rank], sizeof sh->first[rank], "%s", plait_last_error());
            } else {
                sh->wrong[rank] += memcmp(got, want, b) != 0;
            }
            fake_device_free(ds);
            fake_device_free(dr);
            free(mine), free(want), free(got);
        }
    plait_comm_free(w);
}

static void test_p2p(void **state) {
    (void)state;
    for (int n = 2; n <= 3; n++) {
        shared *sh = world_new(n, 30.0);
        assert_int_equal(plait_threads_run(n, p2p_main, sh), PLAIT_OK);
        for (int r = 0; r < n; r++) {
            if (sh->first[r][0]) fprintf(stderr, "rank %d: %s\n", r, sh->first[r]);
            assert_int_equal(sh->cases[r], 18);
            assert_int_equal(sh->failed[r], 0);
            assert_int_equal(sh->wrong[r], 0);
        }
        assert_int_equal(plait_mem_usage_of("comm staging"), 0);
        assert_int_equal(fake_device_in_use(), 0);
        world_free(sh);
    }
}

/* ---- faults ---------------------------------------------------------------- */

#define TIMEOUT 0.5
#define FAULT_COUNT (64 * 40) /* f32: 40 chunks of 256 B */

typedef struct fault {
    shared *sh;
    int victim;
    double stall_s; /* 0: the victim's device copy fails (it drops out); > 0: it stalls */
} fault;

static void fault_main(int rank, void *arg) {
    fault *f = arg;
    shared *sh = f->sh;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(sh->w, rank, &sh->settings, &w) != PLAIT_OK) return;
    size_t bytes = FAULT_COUNT * sizeof(float);
    float *h = calloc(FAULT_COUNT, sizeof(float));
    char *d = fake_device_alloc(bytes);
    fake_device_upload(d, h, bytes);
    plait_coll_opts o = {.struct_size = sizeof o, .mem_kind = PLAIT_MEM_CUDA, .label = "grad bucket 7"};
    plait_status st = api->barrier(w, NULL, NULL); /* everyone is in before the fault is armed */
    if (rank == f->victim) fake_device_fault(d, bytes, 5, f->stall_s); /* mid-transfer: the 6th copy */
    st = api->barrier(w, NULL, NULL);
    double t0 = now();
    if (st == PLAIT_OK) st = api->allreduce(w, d, d, FAULT_COUNT, PLAIT_F32, PLAIT_SUM, &o, NULL);
    sh->elapsed[rank] = now() - t0;
    sh->st[rank] = st;
    snprintf(sh->msg[rank], sizeof sh->msg[rank], "%s", plait_last_error());
    plait_comm_free(w);
    fake_device_free(d);
    free(h);
}

static void run_fault(double stall_s) {
    int n = 3;
    fault f = {world_new(n, TIMEOUT), 2, stall_s};
    assert_int_equal(plait_threads_run(n, fault_main, &f), PLAIT_OK);
    fake_device_fault_clear();
    shared *sh = f.sh;
    int named = 0;
    for (int r = 0; r < n; r++) {
        fprintf(stderr, "rank %d (%.2f s): %s\n", r, sh->elapsed[r], sh->msg[r]);
        assert_int_not_equal(sh->st[r], PLAIT_OK);
        /* every rank ends within the timeout (the stalled one after its stall) */
        assert_true(sh->elapsed[r] < (r == f.victim ? stall_s : 0) + 3 * TIMEOUT + 1.0);
        assert_non_null(strstr(sh->msg[r], "allreduce #"));
        assert_non_null(strstr(sh->msg[r], "grad bucket 7"));
        if (r != f.victim && strstr(sh->msg[r], "rank 2")) named++;
    }
    if (stall_s == 0) {
        assert_non_null(strstr(sh->msg[f.victim], "injected copy failure"));
        assert_non_null(strstr(sh->msg[f.victim], "staged through pinned host memory"));
    } else {
        assert_true(sh->st[0] == PLAIT_ERR_TIMEOUT || sh->st[1] == PLAIT_ERR_TIMEOUT);
    }
    assert_true(named >= 1);
    assert_int_equal(plait_mem_usage_of("comm staging"), 0);
    assert_int_equal(fake_device_in_use(), 0);
    world_free(sh);
}

static void test_peer_lost_mid_transfer(void **state) { (void)state; run_fault(0); }
static void test_stalled_peer_times_out(void **state) { (void)state; run_fault(4 * TIMEOUT); }

/* ---- the pipeline ------------------------------------------------------------ */

#define PIPE_CHUNKS 48

typedef struct pipe_run {
    shared *sh;
    uint64_t copies[2], overlapped[2];
} pipe_run;

static void pipe_main(int rank, void *arg) {
    pipe_run *p = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(p->sh->w, rank, &p->sh->settings, &w) != PLAIT_OK) return;
    size_t count = PIPE_CHUNKS * (CHUNK / sizeof(float)), bytes = count * sizeof(float);
    char *d = fake_device_alloc(bytes);
    float *h = calloc(count, sizeof(float));
    fake_device_upload(d, h, bytes);
    plait_coll_opts o = {.struct_size = sizeof o, .mem_kind = PLAIT_MEM_CUDA};
    p->sh->st[rank] = api->allreduce(w, d, d, count, PLAIT_F32, PLAIT_SUM, &o, NULL);
    plait_staging_counts(w->staging, &p->copies[rank], &p->overlapped[rank]);
    plait_comm_free(w);
    fake_device_free(d);
    free(h);
}

/* With a slow bus (200 us a copy), the chunks' transfers run while the
 * copy thread copies: chunk k+1's copy-out is queued before chunk k's
 * transfer starts. A pipeline that serialised copies and transfers would
 * count none. All 48 overlap here when the machine is quiet; a rank's
 * thread descheduled long enough for the copy thread to run dry loses a
 * few (46 of 48 seen under ASan on the loaded machine). */
static void test_copies_overlap_transfers(void **state) {
    (void)state;
    pipe_run p = {.sh = world_new(2, 30.0)};
    fake_device_set_delay(200);
    assert_int_equal(plait_threads_run(2, pipe_main, &p), PLAIT_OK);
    fake_device_set_delay(0);
    uint64_t overlapped = 0;
    for (int r = 0; r < 2; r++) {
        fprintf(stderr, "rank %d: %llu chunk transfers, %llu overlapped a device copy\n", r,
                (unsigned long long)p.copies[r], (unsigned long long)p.overlapped[r]);
        assert_int_equal(p.sh->st[r], PLAIT_OK);
        assert_int_equal(p.copies[r], PIPE_CHUNKS);
        overlapped += p.overlapped[r];
    }
    assert_true(overlapped >= PIPE_CHUNKS / 2); /* of 2 * PIPE_CHUNKS; none if serialised */
    world_free(p.sh);
}

/* ---- refusals ------------------------------------------------------------- */

static void lone_main(int rank, void *arg) {
    shared *sh = arg;
    plait_comm *w = NULL;
    if (plait_threads_comm_world(sh->w, rank, &sh->settings, &w) != PLAIT_OK) return;
    char *d = fake_device_alloc(64);
    plait_coll_opts o = {.struct_size = sizeof o, .mem_kind = PLAIT_MEM_CUDA};
    sh->st[rank] = api->allreduce(w, d, d, 16, PLAIT_F32, PLAIT_SUM, &o, NULL);
    snprintf(sh->msg[rank], sizeof sh->msg[rank], "%s", plait_last_error());
    plait_comm_free(w);
    fake_device_free(d);
}

/* A communicator handed no device (and none open) refuses device buffers,
 * never dereferences them. */
static void test_no_device_refused(void **state) {
    (void)state;
    shared *sh = world_new(2, 5.0);
    sh->settings.device = NULL; /* the open device: none */
    assert_int_equal(plait_threads_run(2, lone_main, sh), PLAIT_OK);
    for (int r = 0; r < 2; r++) {
        fprintf(stderr, "rank %d: %s\n", r, sh->msg[r]);
        assert_int_equal(sh->st[r], PLAIT_ERR_UNSUPPORTED);
        assert_non_null(strstr(sh->msg[r], "no device is open"));
    }
    world_free(sh);
}

int main(void) {
    plait_host_install();
    api = plait_coll_api_table();
    fake_device_open((size_t)1 << 30);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_2_ranks),
        cmocka_unit_test(test_matrix_3_ranks),
        cmocka_unit_test(test_matrix_4_ranks),
        cmocka_unit_test(test_p2p),
        cmocka_unit_test(test_copies_overlap_transfers),
        cmocka_unit_test(test_peer_lost_mid_transfer),
        cmocka_unit_test(test_stalled_peer_times_out),
        cmocka_unit_test(test_no_device_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fake_device_close();
    return rc;
}
