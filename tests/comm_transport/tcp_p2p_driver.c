/*
 * Multi-process driver for the TCP plugin tests: joins the job through the
 * bootstrap (whatever the launcher: plait's, mpirun, torchrun-style env),
 * loads the tcp plugin through the loader and runs one scenario:
 *
 *   basic          ring and all-pairs exchanges of sizes 0, 1, odd, large;
 *                  many tags; unexpected (early) messages; self-sends; a
 *                  too-short receive buffer; sub-communicators sharing the
 *                  connections with identical tags. Every byte is checked.
 *   nojoin R       rank R sleeps instead of joining; the others must fail.
 *   kill R         ring of 32 MiB transfers; rank R SIGKILLs itself midway.
 *   stray          rank 0 sends random bytes and a handshake without the token to the store
 *                  and random bytes and a wrong secret to every transport
 *                  port while the world communicator (the core's, over
 *                  tcp) sets up, and again after; then everyone runs
 *                  `basic` on its point-to-point side and the core's
 *                  allreduce, allgather and broadcast (the conformance
 *                  matrix of those three: every dtype, operator, algorithm
 *                  and in-place form, sizes 0 to 1 MiB + 3), checked exactly.
 *   pingpong       ranks 0 and 1: 4 KiB latency and 64 MiB bandwidth.
 *
 * Exit code 0 on success; on failure the error goes to stderr and to the
 * launcher (plait_launch_report_error) and the exit code is 1.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch/bootstrap.h"
#include "comm/comm_job.h"
#include "comm/conformance.h"
#include "launch/launch.h"
#include "launch/rank_report.h"
#include "launch/net.h"
#include "launch/store_wire.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "../../plugins/comm/tcp/tcp_wire.h"
#include "host/host_table.h"

static int g_rank = -1;
static const plait_comm_ops *g_ops;
static double g_timeout = 60;

static void die(const char *fmt, ...) PLAIT_PRINTF(1, 2);
static void die(const char *fmt, ...) {
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char line[2200];
    snprintf(line, sizeof line, "rank %d: %s", g_rank, msg);
    fprintf(stderr, "driver: error: %s\n", line);
    plait_launch_report_error(line);
    exit(1);
}

#define CHECK(expr, what)                                                                    \
    do {                                                                                     \
        plait_status st_ = (expr);                                                           \
        if (st_ != PLAIT_OK) die("%s: %s (%s)", what, plait_last_error(), plait_status_name(st_)); \
    } while (0)

static unsigned char pattern(int src, int dst, uint32_t tag, size_t i) {
    return (unsigned char)((unsigned)src * 131u + (unsigned)dst * 31u + tag * 7u + (unsigned)i * 13u + (unsigned)(i >> 8));
}

/* pattern() repeats every PATTERN_PERIOD bytes (13 and 1/256 of that
 * period are whole multiples of 256), so a buffer is one period written
 * byte by byte and the rest copied, and checked a period at a time against
 * one: the 32 MiB transfers cost a few calls, not a sanitizer's check a byte. */
#define PATTERN_PERIOD ((size_t)1 << 16)

static void fill(unsigned char *b, size_t n, int src, int dst, uint32_t tag) {
    size_t first = n < PATTERN_PERIOD ? n : PATTERN_PERIOD;
    for (size_t i = 0; i < first; i++) b[i] = pattern(src, dst, tag, i);
    conformance_repeat(b, 1, PATTERN_PERIOD, n);
}

static void verify(const unsigned char *b, size_t n, int src, int dst, uint32_t tag, const char *what) {
    static unsigned char want[PATTERN_PERIOD];
    fill(want, n < PATTERN_PERIOD ? n : PATTERN_PERIOD, src, dst, tag);
    for (size_t at = 0; at < n; at += PATTERN_PERIOD) {
        size_t k = n - at < PATTERN_PERIOD ? n - at : PATTERN_PERIOD;
        if (memcmp(b + at, want, k) == 0) continue;
        for (size_t i = at; i < at + k; i++)
            if (b[i] != want[i - at])
                die("%s: byte %zu of %zu from rank %d (tag %u) is %u, expected %u", what, i, n, src, tag, b[i],
                    want[i - at]);
    }
}

static plait_buffer hb(void *p, size_t n) { return (plait_buffer){p, n, PLAIT_MEM_HOST, -1}; }

static void wait_ok(void *comm, void *req, size_t expect, const char *what) {
    size_t bytes = 0;
    CHECK(g_ops->wait(comm, req, g_timeout, &bytes), what);
    if (bytes != expect) die("%s: moved %zu bytes, expected %zu", what, bytes, expect);
}

/* Exchange one message of `n` bytes with every other rank, tags `tag`. */
static void all_pairs(void *comm, int rank, int size, size_t n, uint32_t tag, const char *name) {
    unsigned char **sb = calloc((size_t)size, sizeof *sb), **rb = calloc((size_t)size, sizeof *rb);
    void **sr = calloc((size_t)size, sizeof *sr), **rr = calloc((size_t)size, sizeof *rr);
    for (int p = 0; p < size; p++) {
        sb[p] = malloc(n ? n : 1);
        rb[p] = malloc(n + 16);
        fill(sb[p], n, rank, p, tag);
        memset(rb[p], 0xee, n + 16);
    }
    char what[128];
    for (int p = 0; p < size; p++) {
        plait_buffer b = hb(rb[p], n + 16); /* larger than needed: completes with the actual length */
        snprintf(what, sizeof what, "%s irecv %zu from %d", name, n, p);
        CHECK(g_ops->irecv(comm, &b, p, tag, NULL, &rr[p]), what);
    }
    for (int p = 0; p < size; p++) {
        plait_buffer b = hb(sb[p], n);
        snprintf(what, sizeof what, "%s isend %zu to %d", name, n, p);
        CHECK(g_ops->isend(comm, &b, p, tag, NULL, &sr[p]), what);
    }
    for (int p = 0; p < size; p++) {
        snprintf(what, sizeof what, "%s recv %zu from %d", name, n, p);
        wait_ok(comm, rr[p], n, what);
        verify(rb[p], n, p, rank, tag, what);
        for (size_t i = n; i < n + 16; i++)
            if (rb[p][i] != 0xee) die("%s: wrote past the message end", what);
        snprintf(what, sizeof what, "%s send %zu to %d", name, n, p);
        wait_ok(comm, sr[p], n, what);
    }
    for (int p = 0; p < size; p++) {
        free(sb[p]);
        free(rb[p]);
    }
    free(sb);
    free(rb);
    free(sr);
    free(rr);
}

/* Many messages on many tags around a ring, with receives posted in an
 * order different from the sends (tags reversed). */
static void ring_many_tags(void *comm, int rank, int size) {
    enum { TAGS = 40, PER_TAG = 3 };
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t n = 1000;
    unsigned char *sbuf = malloc(TAGS * PER_TAG * n), *rbuf = malloc(TAGS * PER_TAG * n);
    void *sr[TAGS * PER_TAG], *rr[TAGS * PER_TAG];
    for (int t = 0; t < TAGS; t++)
        for (int k = 0; k < PER_TAG; k++) {
            unsigned char *b = sbuf + (size_t)(t * PER_TAG + k) * n;
            fill(b, n, rank, right, (uint32_t)(1000 + t * 10 + k));
            b[0] = (unsigned char)k; /* order within a tag is checked too */
            plait_buffer pb = hb(b, n);
            CHECK(g_ops->isend(comm, &pb, right, (uint32_t)(1000 + t), NULL, &sr[t * PER_TAG + k]), "ring isend");
        }
    for (int t = TAGS - 1; t >= 0; t--)
        for (int k = 0; k < PER_TAG; k++) {
            plait_buffer pb = hb(rbuf + (size_t)(t * PER_TAG + k) * n, n);
            CHECK(g_ops->irecv(comm, &pb, left, (uint32_t)(1000 + t), NULL, &rr[t * PER_TAG + k]), "ring irecv");
        }
    for (int i = 0; i < TAGS * PER_TAG; i++) {
        wait_ok(comm, rr[i], n, "ring recv");
        int t = i / PER_TAG, k = i % PER_TAG;
        unsigned char *b = rbuf + (size_t)i * n;
        if (b[0] != (unsigned char)k) die("ring: tag %d message %d arrived out of order", 1000 + t, k);
        b[0] = pattern(left, rank, (uint32_t)(1000 + t * 10 + k), 0);
        verify(b, n, left, rank, (uint32_t)(1000 + t * 10 + k), "ring recv");
    }
    for (int i = 0; i < TAGS * PER_TAG; i++) wait_ok(comm, sr[i], n, "ring send");
    free(sbuf);
    free(rbuf);
}

static void barrier(const plait_bootstrap *bs) { CHECK(bs->barrier(bs->ctx), "barrier"); }

/* Messages that arrive long before their receive is posted. */
static void unexpected(void *comm, const plait_bootstrap *bs, int rank, int size) {
    size_t sizes[] = {0, 5, 300000, 3u << 20};
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    void *sr[4];
    unsigned char *sb[4];
    for (int i = 0; i < 4; i++) {
        sb[i] = malloc(sizes[i] + 1);
        fill(sb[i], sizes[i], rank, right, 77);
        plait_buffer b = hb(sb[i], sizes[i]);
        CHECK(g_ops->isend(comm, &b, right, 77, NULL, &sr[i]), "unexpected isend");
    }
    barrier(bs); /* everything is in flight or buffered before anyone posts */
    usleep(50000);
    for (int i = 0; i < 4; i++) {
        unsigned char *rb = malloc(sizes[i] + 1);
        void *rr;
        plait_buffer b = hb(rb, sizes[i]);
        CHECK(g_ops->irecv(comm, &b, left, 77, NULL, &rr), "unexpected irecv");
        wait_ok(comm, rr, sizes[i], "unexpected recv");
        verify(rb, sizes[i], left, rank, 77, "unexpected recv");
        free(rb);
    }
    for (int i = 0; i < 4; i++) {
        wait_ok(comm, sr[i], sizes[i], "unexpected send");
        free(sb[i]);
    }
}

/* A receive buffer shorter than the message fails that receive only. */
static void too_short(void *comm, int rank, int size) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t n = 100000;
    unsigned char *s = malloc(n), *r = malloc(n);
    fill(s, n, rank, right, 9);
    void *sr, *rr;
    plait_buffer sb = hb(s, n), rb = hb(r, n / 2);
    CHECK(g_ops->isend(comm, &sb, right, 9, NULL, &sr), "too_short isend");
    CHECK(g_ops->irecv(comm, &rb, left, 9, NULL, &rr), "too_short irecv");
    plait_status st = g_ops->wait(comm, rr, g_timeout, NULL);
    if (st != PLAIT_ERR_PROTOCOL || !strstr(plait_last_error(), "longer than the receive buffer"))
        die("too_short: expected a protocol error, got %s: %s", plait_status_name(st), plait_last_error());
    wait_ok(comm, sr, n, "too_short send");
    /* the stream is still in sync */
    rb = hb(r, n);
    CHECK(g_ops->isend(comm, &sb, right, 9, NULL, &sr), "too_short isend 2");
    CHECK(g_ops->irecv(comm, &rb, left, 9, NULL, &rr), "too_short irecv 2");
    wait_ok(comm, rr, n, "too_short recv 2");
    verify(r, n, left, rank, 9, "too_short recv 2");
    wait_ok(comm, sr, n, "too_short send 2");
    free(s);
    free(r);
}

static void run_basic(plait_job *job, void *world) {
    const plait_bootstrap *bs = plait_job_world(job);
    int rank = plait_job_rank(job), size = plait_job_size(job);
    size_t sizes[] = {0, 1, 7, 4096, 65537, (1u << 20) + 3, (9u << 20) + 11};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        all_pairs(world, rank, size, sizes[i], (uint32_t)(10 + i), "world all-pairs");
    ring_many_tags(world, rank, size);
    unexpected(world, bs, rank, size);
    if (size > 1) too_short(world, rank, size);

    /* Sub-communicators: evens and odds (in reverse order), sharing the
     * connections and using the same tags as the world at the same time. */
    if (size >= 2) {
        int color = rank % 2, n = 0, members_w[64], members_p[64];
        for (int r = size - 1; r >= 0; r--)
            if (r % 2 == color) members_w[n++] = r;
        for (int i = 0; i < n; i++) members_p[i] = members_w[i];
        uint32_t id;
        char key[64];
        snprintf(key, sizeof key, "driver/split/%d", color);
        CHECK(plait_job_new_comm_id(job, key, rank == members_w[0], &id), "new comm id");
        plait_bootstrap *cbs;
        CHECK(plait_job_bootstrap_for(job, id, n, members_w, &cbs), "bootstrap_for");
        int my = -1;
        for (int i = 0; i < n; i++)
            if (members_w[i] == rank) my = i;
        plait_comm_derive d = {sizeof d, cbs, n, members_p, my};
        void *child;
        CHECK(g_ops->derive(world, &d, &child), "derive");
        if (cbs->rank != my || cbs->size != n) die("bootstrap_for: rank %d size %d, expected %d %d", cbs->rank, cbs->size, my, n);
        /* world traffic on tag 500 in flight while the child uses tag 500 */
        int right = (rank + 1) % size, left = (rank + size - 1) % size;
        size_t wn = 2u << 20;
        unsigned char *ws = malloc(wn), *wr = malloc(wn);
        fill(ws, wn, rank, right, 500);
        void *wsr, *wrr;
        plait_buffer wsb = hb(ws, wn), wrb = hb(wr, wn);
        CHECK(g_ops->isend(world, &wsb, right, 500, NULL, &wsr), "world isend 500");
        CHECK(g_ops->irecv(world, &wrb, left, 500, NULL, &wrr), "world irecv 500");
        for (size_t i = 0; i < 4; i++)
            all_pairs(child, my, n, sizes[i * 2], 500, "child all-pairs");
        wait_ok(world, wrr, wn, "world recv 500");
        verify(wr, wn, left, rank, 500, "world recv 500");
        wait_ok(world, wsr, wn, "world send 500");
        free(ws);
        free(wr);
        barrier(cbs);
        g_ops->destroy(child);
        plait_bootstrap_free(cbs);
    }
    barrier(bs);
}

static void run_kill(plait_job *job, void *world, int victim) {
    int rank = plait_job_rank(job), size = plait_job_size(job);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t n = 32u << 20;
    unsigned char *s = malloc(n), *r = malloc(n);
    memset(s, rank, n);
    barrier(plait_job_world(job));
    for (int iter = 0; iter < 1000; iter++) {
        void *sr, *rr;
        plait_buffer sb = hb(s, n), rb = hb(r, n);
        CHECK(g_ops->irecv(world, &rb, left, 1, NULL, &rr), "kill irecv");
        CHECK(g_ops->isend(world, &sb, right, 1, NULL, &sr), "kill isend");
        if (rank == victim && iter == 2) {
            usleep(20000); /* in the middle of the transfer */
            raise(SIGKILL);
        }
        char what[64];
        snprintf(what, sizeof what, "ring transfer %d (recv from rank %d)", iter, left);
        wait_ok(world, rr, n, what);
        snprintf(what, sizeof what, "ring transfer %d (send to rank %d)", iter, right);
        wait_ok(world, sr, n, what);
    }
    die("the victim never died");
}

/* Connect to host:port and return the fd (blocking); -1 if refused when
 * `refusal_ok` (a closed port rejects a stray too). */
static int dial(const char *host, int port, int refusal_ok, const char *what) {
    struct sockaddr_storage ss;
    socklen_t sl;
    CHECK(plait_net_resolve(host, port, &ss, &sl), "resolve");
    double deadline = plait_clock_now() + (refusal_ok ? 0.01 : 5);
    int fd = plait_net_connect_retry((struct sockaddr *)&ss, sl, deadline, "stray target");
    if (fd < 0 && refusal_ok && strstr(plait_last_error(), "refused")) {
        fprintf(stderr, "driver: stray %s: rejected as expected (port closed)\n", what);
        return -1;
    }
    if (fd < 0) die("stray: %s", plait_last_error());
    return fd;
}

/* The other side must close the connection (EOF or reset) within 5 s. */
static void expect_closed(int fd, const char *what) {
    char b[512];
    double deadline = plait_clock_now() + 10;
    for (;;) {
        if (plait_net_read_all(fd, b, 1, deadline) != 0) {
            if (errno == ETIMEDOUT) die("stray: %s was not rejected", what);
            break;
        }
    }
    close(fd);
    fprintf(stderr, "driver: stray %s: rejected as expected\n", what);
}

static void stray_store(plait_job *job) {
    char host[256];
    int port;
    CHECK(plait_net_split_hostport(plait_job_store_address(job), "store", host, sizeof host, &port), "store addr");
    unsigned char junk[8192];
    /* random bytes, then a well-formed hello with a wrong token */
    plait_net_random(junk, sizeof junk);
    int fd = dial(host, port, 0, "");
    plait_net_write_all(fd, junk, sizeof junk, plait_clock_now() + 5);
    expect_closed(fd, "random bytes to the store");
    /* a well-formed handshake with a proof made without the token, claiming
     * a rank outside the job (a stray process: the job goes on) */
    fd = dial(host, port, 0, "");
    unsigned char hello[sizeof(store_req_hdr) + 4 + 32], answer[sizeof(store_rep_hdr) + 64];
    store_req_hdr h = {STORE_REQ_MAGIC, STORE_HELLO, 0, 0, 4 + 32, 0};
    uint32_t ver = STORE_PROTO_VERSION;
    memcpy(hello, &h, sizeof h);
    memcpy(hello + sizeof h, &ver, 4);
    plait_net_random(hello + sizeof h + 4, 32);
    plait_net_write_all(fd, hello, sizeof hello, plait_clock_now() + 5);
    plait_net_read_all(fd, answer, sizeof answer, plait_clock_now() + 5);
    h = (store_req_hdr){STORE_REQ_MAGIC, STORE_AUTH, 0, 0, 4 + 32, 0};
    int32_t rk = 1000;
    memcpy(hello, &h, sizeof h);
    memcpy(hello + sizeof h, &rk, 4);
    plait_net_random(hello + sizeof h + 4, 32);
    plait_net_write_all(fd, hello, sizeof hello, plait_clock_now() + 5);
    expect_closed(fd, "wrong token to the store");
}

/* Random bytes and a hello with a wrong secret to the transport ports of
 * ranks first..size-1. Ranks > 0 are still setting up when rank 0 does this
 * before its own init (they wait for rank 0's connections, port open); after
 * setup the ports are closed. fds[2*r], fds[2*r+1] receive the connections
 * (-1 if refused). */
static void stray_transport_open(plait_job *job, int first, int *fds) {
    const plait_bootstrap *bs = plait_job_world(job);
    unsigned char junk[8192];
    for (int r = first; r < plait_job_size(job); r++) {
        tcp_addr_info info;
        char key[32];
        size_t len = 0;
        snprintf(key, sizeof key, "tcp.addr.%d", r);
        CHECK(bs->get(bs->ctx, key, &info, sizeof info, &len), "get tcp.addr");
        char ip[64];
        inet_ntop(info.family, info.addr, ip, sizeof ip);
        fds[2 * r] = dial(ip, info.port, 1, "random bytes to a transport port");
        if (fds[2 * r] >= 0) {
            plait_net_random(junk, sizeof junk);
            plait_net_write_all(fds[2 * r], junk, sizeof junk, plait_clock_now() + 5);
        }
        fds[2 * r + 1] = dial(ip, info.port, 1, "wrong secret to a transport port");
        if (fds[2 * r + 1] >= 0) {
            tcp_hello th = {.magic = TCP_HELLO_MAGIC, .version = TCP_WIRE_VERSION, .to_rank = r,
                            .world_size = plait_job_size(job), .streams = 1};
            memset(th.secret, 0x5a, sizeof th.secret);
            plait_net_write_all(fds[2 * r + 1], &th, sizeof th, plait_clock_now() + 5);
        }
    }
}

static void stray_transport_check(plait_job *job, int first, int *fds) {
    for (int r = first; r < plait_job_size(job); r++) {
        if (fds[2 * r] >= 0) expect_closed(fds[2 * r], "random bytes to a transport port");
        if (fds[2 * r + 1] >= 0) expect_closed(fds[2 * r + 1], "wrong secret to a transport port");
    }
}

/* The core's collectives on a communicator that survived the strays,
 * every result checked exactly by every rank. */
static void run_core_collectives(plait_comm *comm) {
    static const plait_coll_kind kinds[] = {PLAIT_COLL_ALLREDUCE, PLAIT_COLL_ALLGATHER, PLAIT_COLL_BROADCAST};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        conformance_opts o = {.big = 1, .only_kind = (int)kinds[k]};
        conformance_result res;
        conformance_run(comm, &o, &res);
        const char *name = plait_coll_kind_name(kinds[k]);
        if (res.cases == 0 || res.wrong || res.failed)
            die("core %s after stray clients: %llu calls, %llu wrong elements, %llu failed: %s", name,
                (unsigned long long)res.cases, (unsigned long long)res.wrong, (unsigned long long)res.failed,
                res.first);
        if (g_rank == 0)
            fprintf(stderr, "driver: stray: core %s after stray clients: %llu calls exact\n", name,
                    (unsigned long long)res.cases);
    }
}

static void run_pingpong(plait_job *job, void *world) {
    int rank = plait_job_rank(job);
    if (rank > 1) return;
    int peer = 1 - rank;
    size_t sizes[] = {4096, 64u << 20};
    int iters[] = {4000, 12};
    for (int k = 0; k < 2; k++) {
        size_t n = sizes[k];
        unsigned char *b = malloc(n);
        memset(b, 1, n);
        plait_buffer pb = hb(b, n);
        double t0 = 0;
        for (int i = -iters[k] / 10 - 1; i < iters[k]; i++) {
            if (i == 0) t0 = plait_clock_now();
            void *req;
            if (rank == 0) {
                CHECK(g_ops->isend(world, &pb, peer, 3, NULL, &req), "pp send");
                wait_ok(world, req, n, "pp send");
                CHECK(g_ops->irecv(world, &pb, peer, 3, NULL, &req), "pp recv");
                wait_ok(world, req, n, "pp recv");
            } else {
                CHECK(g_ops->irecv(world, &pb, peer, 3, NULL, &req), "pp recv");
                wait_ok(world, req, n, "pp recv");
                CHECK(g_ops->isend(world, &pb, peer, 3, NULL, &req), "pp send");
                wait_ok(world, req, n, "pp send");
            }
        }
        double t = (plait_clock_now() - t0) / iters[k] / 2;
        if (rank == 0)
            printf("pingpong %10zu bytes: %9.2f us one-way, %8.3f GB/s\n", n, t * 1e6, (double)n / t / 1e9);
        free(b);
    }
    fflush(stdout);
}

/* Transport benchmark (not a collective implementation): the p2p traffic
 * of a ring allreduce (reduce-scatter + allgather over N segments, each
 * step cut into `pieces` pipelined pieces) and of a recursive-doubling
 * allreduce for small sizes, timed, to see what the transport allows. */
static void ring_allreduce_traffic(void *world, int rank, int size, float *buf, float *tmp, size_t count, int pieces) {
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    size_t seg = count / (size_t)size;
    for (int phase = 0; phase < 2; phase++)
        for (int step = 0; step < size - 1; step++) {
            int send_seg = ((rank - step - phase + 2 * size) % size);
            int recv_seg = ((rank - step - 1 - phase + 2 * size) % size);
            size_t piece = (seg + (size_t)pieces - 1) / (size_t)pieces;
            void *rr[64], *sr[64];
            int np = 0;
            for (size_t off = 0; off < seg; off += piece, np++) {
                size_t n = seg - off < piece ? seg - off : piece;
                plait_buffer rb = hb(phase == 0 ? tmp + off : buf + (size_t)recv_seg * seg + off, n * 4);
                plait_buffer sb = hb(buf + (size_t)send_seg * seg + off, n * 4);
                CHECK(g_ops->irecv(world, &rb, left, 100 + (uint32_t)phase, NULL, &rr[np]), "bench irecv");
                CHECK(g_ops->isend(world, &sb, right, 100 + (uint32_t)phase, NULL, &sr[np]), "bench isend");
            }
            np = 0;
            for (size_t off = 0; off < seg; off += piece, np++) {
                size_t n = seg - off < piece ? seg - off : piece;
                CHECK(g_ops->wait(world, rr[np], g_timeout, NULL), "bench recv");
                if (phase == 0) {
                    float *d = buf + (size_t)recv_seg * seg + off, *t = tmp + off;
                    for (size_t i = 0; i < n; i++) d[i] += t[i];
                }
            }
            for (int i = 0; i < np; i++) CHECK(g_ops->wait(world, sr[i], g_timeout, NULL), "bench send");
        }
}

static void rd_allreduce_traffic(void *world, int rank, int size, float *buf, float *tmp, size_t count) {
    for (int mask = 1; mask < size; mask <<= 1) {
        int peer = rank ^ mask;
        void *rr, *sr;
        plait_buffer rb = hb(tmp, count * 4), sb = hb(buf, count * 4);
        CHECK(g_ops->irecv(world, &rb, peer, 200, NULL, &rr), "rd irecv");
        CHECK(g_ops->isend(world, &sb, peer, 200, NULL, &sr), "rd isend");
        CHECK(g_ops->wait(world, rr, g_timeout, NULL), "rd recv");
        CHECK(g_ops->wait(world, sr, g_timeout, NULL), "rd send");
        for (size_t i = 0; i < count; i++) buf[i] += tmp[i];
    }
}

static void run_ringbench(plait_job *job, void *world) {
    int rank = plait_job_rank(job), size = plait_job_size(job);
    const plait_bootstrap *bs = plait_job_world(job);
    size_t sizes[] = {4096, 65536, 262144, 1u << 20, 4u << 20, 16u << 20, 64u << 20};
    const char *pe = getenv("PLAIT_BENCH_PIECES");
    int pieces = pe ? atoi(pe) : 4;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t bytes = sizes[k], count = bytes / 4;
        float *buf = malloc(bytes), *tmp = malloc(bytes);
        for (size_t i = 0; i < count; i++) buf[i] = 1.0f;
        int small = bytes <= 65536 && (size & (size - 1)) == 0;
        int iters = bytes <= 65536 ? 2000 : bytes <= (1u << 20) ? 50 : 8;
        barrier(bs);
        double t0 = 0;
        struct rusage ru0, ru1;
        for (int it = -2; it < iters; it++) {
            if (it == 0) {
                t0 = plait_clock_now();
                getrusage(RUSAGE_SELF, &ru0);
            }
            if (small) rd_allreduce_traffic(world, rank, size, buf, tmp, count);
            else ring_allreduce_traffic(world, rank, size, buf, tmp, count, pieces);
        }
        double t = (plait_clock_now() - t0) / iters;
        getrusage(RUSAGE_SELF, &ru1);
        double cpu = ((double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) + 1e-6 * (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) +
                      (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + 1e-6 * (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / iters;
        double sys = ((double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) + 1e-6 * (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec)) / iters;
        double csw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw + ru1.ru_nivcsw - ru0.ru_nivcsw) / iters;
        double busbw = (double)bytes / t * 2.0 * (size - 1) / size / 1e9;
        if (rank == 0)
            printf("ring-traffic %10zu bytes (%s): %10.1f us  busbw %6.3f GB/s  rank 0 cpu %8.1f us (sys %8.1f)  ctx switches %.1f\n", bytes,
                   small ? "recursive doubling" : "ring", t * 1e6, busbw, cpu * 1e6, sys * 1e6, csw);
        free(buf);
        free(tmp);
    }
    fflush(stdout);
}

int main(int argc, char **argv) {
    plait_host_install(); /* plugins are handed the core's host table */
    plait_log_init_from_env();
    /* `tcp_p2p_driver -n N mode ...`: run N ranks of ourselves under plait's launcher */
    int nranks = 0;
    const char *bad = NULL;
    if (plait_launch_take_nranks(&argc, argv, &nranks, &bad) != 0) die("%s", bad);
    if (nranks > 0) {
        plait_launch_opts o = {0};
        o.nranks = nranks;
        o.argv = argv;
        o.stdout_fd = o.stderr_fd = -1;
        plait_launch_result res;
        CHECK(plait_launch_local(&o, &res), "launch");
        return res.exit_code;
    }
    const char *mode = argc > 1 ? argv[1] : "basic";
    int arg = argc > 2 ? atoi(argv[2]) : -1;
    if (strcmp(mode, "nojoin") == 0) {
        const char *r = getenv("PLAIT_RANK");
        if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
        if (r && atoi(r) == arg) {
            sleep(120); /* never joins; the launcher ends us */
            return 0;
        }
    }
    plait_config *cfg = plait_config_new();
    CHECK(plait_config_declare_core(cfg), "declare core");
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "tcp");
    if (!d) die("loading the tcp plugin: %s", plait_last_error());
    CHECK(plait_config_declare(cfg, "comm.tcp", d->keys, d->n_keys, d->key_size, "plugin comm/tcp"),
          "declare comm.tcp");
    CHECK(plait_config_finalize(cfg, NULL), "config");
    g_timeout = plait_config_float(cfg, "comm", "timeout");
    g_ops = d->ops;

    plait_job *job;
    CHECK(plait_job_join(cfg, &job), "join");
    g_rank = plait_job_rank(job);
    if (strcmp(mode, "nojoin") == 0) die("rank %d joined although rank %d never did", g_rank, arg);

    /* stray: rank 0 attacks the store, and the other ranks' transport
     * ports while they set up (they wait for rank 0, so it goes first) */
    int stray = strcmp(mode, "stray") == 0 && g_rank == 0;
    int fds[128];
    for (int i = 0; i < 128; i++) fds[i] = -1;
    if (stray && plait_job_size(job) > 64) die("stray mode supports at most 64 ranks");
    if (stray) {
        stray_store(job);
        stray_transport_open(job, 1, fds);
    }
    /* stray: the core's world communicator (its plugin side set up while
     * rank 0's strays arrive); the other modes: the plugin's alone */
    void *world = NULL;
    plait_comm *core_world = NULL;
    if (strcmp(mode, "stray") == 0) {
        plait_comm_settings settings;
        CHECK(plait_comm_settings_from_config(cfg, &settings), "settings");
        CHECK(plait_comm_create_job_world(job, g_ops, cfg, &settings, &core_world), "core world over tcp");
        world = core_world->pp2p;
    } else {
        plait_comm_init init = {sizeof init, plait_host_table(), cfg, plait_job_world(job), g_rank,
                                plait_job_size(job)};
        CHECK(g_ops->init(&init, &world), "tcp init");
    }
    if (stray) {
        stray_transport_check(job, 1, fds);
        /* after setup: the store still rejects, the ports are closed */
        stray_store(job);
        stray_transport_open(job, 0, fds);
        stray_transport_check(job, 0, fds);
    }
    if (strcmp(mode, "basic") == 0) run_basic(job, world);
    else if (strcmp(mode, "stray") == 0) {
        run_basic(job, world);
        run_core_collectives(core_world);
    } else if (strcmp(mode, "kill") == 0) run_kill(job, world, arg);
    else if (strcmp(mode, "pingpong") == 0) run_pingpong(job, world);
    else if (strcmp(mode, "ringbench") == 0) run_ringbench(job, world);
    else die("unknown mode '%s'", mode);
    barrier(plait_job_world(job));
    if (core_world)
        plait_comm_free(core_world);
    else
        g_ops->destroy(world);
    plait_job_leave(job, 0);
    plait_config_free(cfg);
    plait_plugins_unload_all();
    if (g_rank == 0) fprintf(stderr, "driver: %s: ok\n", mode);
    return 0;
}
