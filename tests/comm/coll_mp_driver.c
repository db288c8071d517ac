/*
 * Multi-process collective driver: one process per rank, started by plait's
 * launcher or by mpirun. Joins the job, builds the world over a comm plugin
 * ([comm] plugin, default tcp) and runs
 *   (no argument)  the conformance matrix (tests/comm/conformance.c), then
 *                  two interleaved splits with asynchronous collectives and
 *                  an ordered allreduce checked bit for bit; rank 0 prints
 *                  "coll_mp_driver: ok" when every rank passed. Exit 0 = pass.
 *   big-subset     the same, the 1 MiB + 3 size for one dtype per
 *                  (collective, op), rotating from PLAIT_TEST_SAMPLE
 *                  (conformance_opts.big_subset and sample).
 *   stall R        rank R sits out an allreduce (sleeps 3x the timeout); the
 *                  others print how their call failed and how long it took,
 *                  and exit 0 when it failed (timeout or peer lost).
 *   kill R         32 MiB allreduces; rank R SIGKILLs itself while its third
 *                  one is moving data; the others print as for stall.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm_job.h"
#include "comm/conformance.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "host/host_table.h"

static const plait_coll_api *api;

static int fail(const char *what) {
    fprintf(stderr, "coll_mp_driver: %s: %s\n", what, plait_last_error());
    return 1;
}

/* Two splits used at once: parity (reversed order) and halves. */
static int splits(plait_comm *world, char *err, size_t len) {
    int r = api->rank(world), n = api->size(world);
    plait_comm *a = NULL, *b = NULL;
    if (api->split(world, r % 2, -r, "parity", &a) != PLAIT_OK ||
        api->split(world, r < n / 2, r, "half", &b) != PLAIT_OK) {
        snprintf(err, len, "split: %s", plait_last_error());
        api->comm_free(b), api->comm_free(a);
        return 1;
    }
    enum { K = 6 };
    plait_request *ra[K], *rb[K];
    int64_t va[K], vb[K], oa[K], ob[K];
    int bad = 0;
    for (int k = 0; k < K; k++) {
        va[k] = r * 10 + k, vb[k] = r * 100 + k;
        bad |= api->allreduce(a, &va[k], &oa[k], 1, PLAIT_I64, PLAIT_SUM, NULL, &ra[k]) != PLAIT_OK;
        bad |= api->allreduce(b, &vb[k], &ob[k], 1, PLAIT_I64, PLAIT_MAX, NULL, &rb[k]) != PLAIT_OK;
    }
    for (int k = K - 1; k >= 0; k--) bad |= api->wait(rb[k]) != PLAIT_OK || api->wait(ra[k]) != PLAIT_OK;
    if (bad) {
        snprintf(err, len, "async on splits: %s", plait_last_error());
        api->comm_free(b), api->comm_free(a);
        return 1;
    }
    for (int k = 0; k < K && !bad; k++) {
        int64_t sa = 0, mb = -1;
        for (int q = 0; q < n; q++) {
            if (q % 2 == r % 2) sa += q * 10 + k;
            if ((q < n / 2) == (r < n / 2) && q * 100 + k > mb) mb = q * 100 + k;
        }
        if (oa[k] != sa || ob[k] != mb) {
            snprintf(err, len, "splits: request %d gave %lld/%lld, want %lld/%lld", k, (long long)oa[k],
                     (long long)ob[k], (long long)sa, (long long)mb);
            bad = 1;
        }
    }
    /* ordered allreduce on the parity group: the tree in its rank order */
    size_t count = 200003;
    float *in = malloc(count * 4), *out = malloc(count * 4);
    for (size_t i = 0; i < count; i++) in[i] = (float)((i * 2654435761u + (size_t)r * 40503u) % 100003) * 1e-3f + 1e7f * (float)(r % 3 == 0);
    plait_coll_opts o = {.struct_size = sizeof o, .algo = PLAIT_ALGO_ORDERED};
    if (!bad && api->allreduce(a, in, out, count, PLAIT_F32, PLAIT_SUM, &o, NULL) != PLAIT_OK) {
        snprintf(err, len, "ordered: %s", plait_last_error());
        bad = 1;
    }
    int m = api->size(a);
    for (size_t i = 0; i < count && !bad; i++) {
        float leaf[64];
        for (int q = 0; q < m; q++) {
            int w = api->world_rank(a, q);
            leaf[q] = (float)((i * 2654435761u + (size_t)w * 40503u) % 100003) * 1e-3f + 1e7f * (float)(w % 3 == 0);
        }
        for (int s = 1; s < m; s *= 2) /* the canonical tree, bottom-up */
            for (int j = 0; j + s < m; j += 2 * s) leaf[j] = leaf[j] + leaf[j + s];
        if (memcmp(&leaf[0], &out[i], 4) != 0) {
            snprintf(err, len, "ordered allreduce element %zu: %a, tree gives %a", i, (double)out[i], (double)leaf[0]);
            bad = 1;
        }
    }
    free(in), free(out);
    api->comm_free(b);
    api->comm_free(a);
    return bad;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A failed call's report, read by test_coll_tcp: status, time, message. */
static int report_failure(int r, plait_status st, double seconds) {
    printf("coll_mp_driver: rank %d: %s after %.2f s: %s\n", r, plait_status_name(st), seconds, plait_last_error());
    fflush(stdout);
    return st == PLAIT_ERR_TIMEOUT || st == PLAIT_ERR_PEER_LOST ? 0 : 1;
}

/* Rank `who` does not take part in allreduce #2. */
static int stall(plait_comm *world, int who, double timeout) {
    int r = api->rank(world);
    float x[256] = {0}, y[256];
    if (api->barrier(world, NULL, NULL) != PLAIT_OK) return fail("barrier");
    if (r == who) {
        usleep((useconds_t)(3 * timeout * 1e6));
        return 0;
    }
    plait_coll_opts o = {.struct_size = sizeof o, .label = "stall test"};
    double t0 = now();
    plait_status st = api->allreduce(world, x, y, 256, PLAIT_F32, PLAIT_SUM, &o, NULL);
    return report_failure(r, st, now() - t0);
}

/* Rank `victim` dies by SIGKILL in the middle of allreduce #3 (its own call
 * in flight on the communicator's worker thread); the others are inside
 * the same allreduce, blocked on the data it no longer sends. */
static int kill_during_allreduce(plait_comm *world, int victim) {
    int r = api->rank(world);
    size_t count = 8u << 20;
    float *x = malloc(count * sizeof *x), *y = malloc(count * sizeof *y);
    if (!x || !y) return fail("out of memory");
    for (size_t i = 0; i < count; i++) x[i] = 1.0f;
    if (api->barrier(world, NULL, NULL) != PLAIT_OK) return fail("barrier");
    plait_coll_opts o = {.struct_size = sizeof o, .label = "kill test"};
    for (int it = 0; it < 50; it++) {
        if (r == victim && it == 2) {
            plait_request *req = NULL;
            if (api->allreduce(world, x, y, count, PLAIT_F32, PLAIT_SUM, &o, &req) != PLAIT_OK) return fail("allreduce");
            usleep(100000); /* data moving */
            raise(SIGKILL);
        }
        double t0 = now();
        plait_status st = api->allreduce(world, x, y, count, PLAIT_F32, PLAIT_SUM, &o, NULL);
        if (st != PLAIT_OK) return report_failure(r, st, now() - t0);
    }
    fprintf(stderr, "coll_mp_driver: rank %d: 50 allreduces and rank %d never died\n", r, victim);
    return 1;
}

int main(int argc, char **argv) {
    plait_host_install();
    api = plait_coll_api_table();
    plait_config *cfg = plait_config_new();
    if (plait_config_declare_core(cfg) != PLAIT_OK) return fail("config");
    const char *plugin = getenv("PLAIT_COMM_PLUGIN") ? getenv("PLAIT_COMM_PLUGIN") : "tcp";
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, plugin);
    if (!d) return fail("loading the comm plugin");
    char section[64];
    snprintf(section, sizeof section, "comm.%s", d->name);
    if (d->n_keys && plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, "plugin") != PLAIT_OK)
        return fail("declare");
    if (plait_config_finalize(cfg, NULL) != PLAIT_OK) return fail("config");
    plait_comm_settings settings;
    if (plait_comm_settings_from_config(cfg, &settings) != PLAIT_OK) return fail("settings");
    plait_job *job = NULL;
    plait_comm *world = NULL;
    if (plait_job_join(cfg, &job) != PLAIT_OK) return fail("join");
    if (plait_comm_create_job_world(job, d->ops, cfg, &settings, &world) != PLAIT_OK) {
        int rc = fail("world");
        plait_job_leave(job, 1);
        return rc;
    }
    int r = api->rank(world), n = api->size(world);
    if (argc > 2 && (strcmp(argv[1], "stall") == 0 || strcmp(argv[1], "kill") == 0)) {
        int rc = strcmp(argv[1], "stall") == 0 ? stall(world, atoi(argv[2]), settings.timeout_s)
                                               : kill_during_allreduce(world, atoi(argv[2]));
        plait_comm_free(world);
        plait_job_leave(job, 1);
        plait_config_free(cfg);
        return rc;
    }
    conformance_opts opts = {.big = 1, .only_kind = -1};
    opts.big_subset = argc > 1 && strcmp(argv[1], "big-subset") == 0;
    opts.sample = conformance_sample(); /* PLAIT_TEST_SAMPLE, set by the test for every rank */
    conformance_result res;
    conformance_run(world, &opts, &res);
    char err[512] = "";
    int split_bad = res.failed ? 0 : splits(world, err, sizeof err);
    if (res.first[0]) fprintf(stderr, "coll_mp_driver: rank %d: first problem: %s\n", r, res.first);
    if (split_bad) fprintf(stderr, "coll_mp_driver: rank %d: %s\n", r, err);
    int64_t mine[4] = {(int64_t)res.cases, (int64_t)res.wrong, (int64_t)res.failed, split_bad}, all[4] = {0};
    plait_status st = res.failed ? PLAIT_ERR_INTERNAL
                                 : api->allreduce(world, mine, all, 4, PLAIT_I64, PLAIT_SUM, NULL, NULL);
    int ok = st == PLAIT_OK && all[1] == 0 && all[2] == 0 && all[3] == 0 && all[0] > 0;
    if (r == 0 && st == PLAIT_OK)
        printf("coll_mp_driver: %d ranks over %s%s: %lld collectives, %lld wrong elements, %lld failed calls, "
               "%lld split failures (PLAIT_TEST_SAMPLE=%u)\n",
               n, d->name, opts.big_subset ? " (1 MiB + 3 for a subset)" : "", (long long)all[0], (long long)all[1],
               (long long)all[2], (long long)all[3], opts.sample);
    if (r == 0 && ok) printf("coll_mp_driver: ok\n");
    fflush(stdout);
    plait_comm_free(world);
    plait_job_leave(job, !ok);
    plait_config_free(cfg);
    return ok ? 0 : 1;
}
