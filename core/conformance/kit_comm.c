/* The comm checks of `plait plugin test` in order, each rank's outcome
 * gathered to rank 0 (see kit_comm.h). */
#include "conformance/kit_comm.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_comm.h"
#include "comm/comm.h"
#include "comm/comm_job.h"
#include "commstate/comm_watchdog.h"
#include "coll/reduce.h"
#include "plugin/loader.h"
#include "runtime/process_state.h"

/* Entries of a /proc/self directory (file descriptors, threads). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* opendir's own descriptor, or nothing for task */
}

/* Rank 0 turns every rank's outcome of one check into a row. */
static void gather_row(const plait_bootstrap *bs, const char *name, const char *rule, kit_outcome *mine,
                       kit_report *rep) {
    if (mine->verdict != KIT_FAIL) snprintf(mine->rule, sizeof mine->rule, "%s", rule);
    kit_outcome *all = calloc((size_t)bs->size, sizeof *all);
    if (!all || bs->allgather(bs->ctx, mine, all, sizeof *mine) != PLAIT_OK) {
        if (bs->rank == 0)
            kit_report_add(rep, name, rule, KIT_FAIL, "gathering the ranks' outcomes failed: %s", plait_last_error());
        free(all);
        return;
    }
    if (bs->rank == 0) {
        const kit_outcome *pick = &all[0];
        for (int r = bs->size - 1; r >= 0; r--)
            if (all[r].verdict == KIT_FAIL) pick = &all[r]; /* the lowest failing rank */
        kit_report_add(rep, name, pick->rule, pick->verdict, "%s", pick->why);
    }
    free(all);
}

typedef void (*p2p_check)(kit_p2p *, kit_outcome *);

static void run_check(kit_p2p *k, const char *name, const char *rule, p2p_check fn, kit_report *rep) {
    kit_outcome o = {0};
    if (k->bs->barrier(k->bs->ctx) != PLAIT_OK) kit_fail(&o, "setup", "barrier failed: %s", plait_last_error());
    else fn(k, &o);
    gather_row(k->bs, name, rule, &o, rep);
}

/* destroy() of the kit's plugin communicator, watched as training's is. */
static void raw_destroy_comm(kit_p2p *k) {
    plait_watchdog_destroy(k->ops, k->comm, "plugin test", k->timeout_s);
    k->comm = NULL;
}

/* A plugin communicator over the whole job on a fresh bootstrap namespace,
 * so repeated init() calls never read each other's keys. */
static plait_status raw_init(plait_job *job, const plait_config *cfg, const plait_host *host, const char *key,
                             kit_p2p *k, plait_bootstrap **bs_out) {
    int n = plait_job_size(job), *members = malloc(sizeof(int) * (size_t)n);
    if (!members) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) members[i] = i;
    uint32_t id = 0;
    plait_status st = plait_job_new_comm_id(job, key, plait_job_rank(job) == 0, &id);
    if (st == PLAIT_OK) st = plait_job_bootstrap_for(job, id, n, members, bs_out);
    free(members);
    if (st != PLAIT_OK) return st;
    plait_comm_init args = {.struct_size = sizeof args, .host = host, .config = cfg,
                            .bootstrap = *bs_out, .world_rank = plait_job_rank(job), .world_size = n};
    plait_plugin_call call;
    plait_watchdog_enter_setup(&call, k->ops, "init", "plugin test", (*bs_out)->timeout_s);
    plait_status made = k->ops->init(&args, &k->comm);
    st = plait_watchdog_leave_setup(&call, made);
    if (made == PLAIT_OK && st != PLAIT_OK) raw_destroy_comm(k); /* made, then refused */
    if (st != PLAIT_OK) {
        k->comm = NULL;
        plait_bootstrap_free(*bs_out);
        *bs_out = NULL;
    }
    return st;
}

static void raw_destroy(kit_p2p *k, plait_bootstrap *bs) {
    if (k->comm) raw_destroy_comm(k);
    k->comm = NULL;
    plait_bootstrap_free(bs);
}

/* Every core collective, every dtype, two sizes, through `comm`: the count
 * of wrong elements this rank received over all of them (or an error),
 * counted here: a total summed through the transport under test would be
 * as wrong as its results. */
static plait_status all_collectives(plait_comm *comm, const char *transport, int dtypes, uint64_t *wrong,
                                    char *what, size_t cap) {
    *wrong = 0;
    char first[96] = ""; /* the first collective with a wrong element here */
    /* every rank runs them all, whatever it counts: a rank stopping at its
     * first wrong result would leave the others waiting in the next one */
    for (int op = 0; op < PLAIT_BENCH_OP_COUNT; op++)
        for (int dt = 0; dt < dtypes && (op != PLAIT_BENCH_SENDRECV || comm->size > 1); dt++) {
            plait_bench_comm_opts b = {.op = (plait_bench_op)op, .min_bytes = 64, .max_bytes = 16384,
                                       .factor = 256, .warmup = 0, .iters = 1, .dtype = (plait_dtype)dt,
                                       .redop = PLAIT_SUM, .algo = PLAIT_ALGO_AUTO, .transport = transport};
            uint64_t all = 0, w = 0;
            snprintf(what, cap, "%s of %s", plait_bench_op_name(b.op), plait_dtype_name(b.dtype));
            plait_status st = plait_bench_comm_run(comm, &b, NULL, &all, &w);
            if (st != PLAIT_OK) return st; /* `what` names the failing one */
            if (w && !first[0]) snprintf(first, sizeof first, "%s", what);
            *wrong += w;
        }
    snprintf(what, cap, "%s", first);
    return PLAIT_OK;
}

static void check_collectives(plait_job *job, const plait_plugin_desc *desc, const plait_config *cfg,
                              const kit_comm_opts *opts, kit_report *rep) {
    const plait_bootstrap *bs = plait_job_world(job);
    kit_outcome co = {0}, so = {0};
    plait_comm_settings settings;
    plait_comm_settings_default(&settings);
    settings.timeout_s = opts->timeout_s;
    plait_comm *world = NULL, *sub = NULL;
    char what[96] = "";
    uint64_t wrong = 0;
    plait_status st = plait_comm_create_job_world(job, desc->ops, cfg, &settings, &world);
    if (st != PLAIT_OK) kit_fail(&co, "setup", "rank %d: the core communicator: %s", bs->rank, plait_last_error());
    if (st == PLAIT_OK) st = all_collectives(world, desc->name, PLAIT_DTYPE_COUNT_V1, &wrong, what, sizeof what);
    if (st == PLAIT_OK && wrong)
        kit_fail(&co, "collectives", "rank %d: %llu wrong elements, first in %s", bs->rank,
                 (unsigned long long)wrong, what);
    else if (st != PLAIT_OK)
        kit_fail(&co, "collectives", "rank %d: %s failed: %s", bs->rank, what, plait_last_error());
    else
        snprintf(co.why, sizeof co.why, "%d collectives x %d dtypes x 2 sizes, #wrong 0", PLAIT_BENCH_OP_COUNT,
                 PLAIT_DTYPE_COUNT_V1);
    gather_row(bs, "collectives", "collectives", &co, rep);
    /* a split in reverse rank order, two colors: derive() with a permuted subset */
    if (world && co.verdict != KIT_FAIL) {
        st = plait_comm_split(world, bs->rank % 2, -bs->rank, "kit-split", &sub);
        if (st == PLAIT_OK) st = all_collectives(sub, desc->name, 1, &wrong, what, sizeof what);
        if (st == PLAIT_OK && wrong)
            kit_fail(&so, "split", "rank %d: %llu wrong elements in %s on a split", bs->rank,
                     (unsigned long long)wrong, what);
        else if (st != PLAIT_OK)
            kit_fail(&so, "split", "rank %d: on a split communicator: %s", bs->rank, plait_last_error());
        else
            snprintf(so.why, sizeof so.why, "every collective on 2 splits in reverse rank order, #wrong 0");
    } else {
        so.verdict = KIT_SKIP;
        snprintf(so.why, sizeof so.why, "skipped: the world communicator failed");
    }
    gather_row(bs, "split", "split", &so, rep);
    plait_comm_free(sub);
    plait_comm_free(world);
}

/* Descriptors and threads back to where they were before the first init;
 * threads take a moment to leave /proc/self/task after they exit. */
static void check_cleanup(const plait_bootstrap *bs, int fds0, int th0, kit_report *rep) {
    kit_outcome o = {0};
    int fds = 0, th = 0;
    for (int tries = 0; tries < 200; tries++) {
        fds = count_entries("/proc/self/fd");
        th = count_entries("/proc/self/task");
        if (fds <= fds0 && th <= th0) break;
        struct timespec ms = {0, 10000000};
        nanosleep(&ms, NULL);
    }
    if (fds > fds0 || th > th0)
        kit_fail(&o, "cleanup", "rank %d: after destroy() of every communicator the process holds %d more file "
                 "descriptor%s and %d more thread%s than before the first init()", bs->rank, fds - fds0,
                 fds - fds0 == 1 ? "" : "s", th - th0, th - th0 == 1 ? "" : "s");
    else
        snprintf(o.why, sizeof o.why, "no descriptor or thread left after destroy()");
    gather_row(bs, "cleanup", "cleanup", &o, rep);
}

/* The process as the kit found it, compared after each check's calls
 * (plait/plugin.h: no call may change it); the first change is kept. */
typedef struct process_watch {
    plait_process_state before;
    kit_outcome o;
} process_watch;

static void process_after(process_watch *w, int rank, const char *check) {
    char what[KIT_WHY_LEN - 160];
    if (w->o.verdict == KIT_FAIL || !plait_process_state_changed(&w->before, what, sizeof what)) return;
    kit_fail(&w->o, "process", "rank %d: the calls of the %s check changed the process: %s", rank, check, what);
}

void plait_kit_comm_run(plait_job *job, const plait_plugin_desc *desc, const plait_config *cfg,
                        const kit_comm_opts *opts, kit_report *rep) {
    const plait_bootstrap *world = plait_job_world(job);
    plait_watchdog_start(); /* its thread is plait's, not the plugin's: running before the count */
    int fds0 = count_entries("/proc/self/fd"), th0 = count_entries("/proc/self/task");
    kit_p2p k = {.ops = desc->ops, .rank = plait_job_rank(job), .size = plait_job_size(job),
                 .timeout_s = opts->timeout_s, .large_bytes = opts->large_bytes, .bs = world};
    plait_bootstrap *bs_a = NULL, *bs_b = NULL;
    process_watch pw = {0};
    plait_process_state_take(&pw.before);
    kit_outcome o = {0};
    if (raw_init(job, cfg, opts->host, "kit/a", &k, &bs_a) != PLAIT_OK)
        kit_fail(&o, "setup", "rank %d: init(): %s", k.rank, plait_last_error());
    else
        snprintf(o.why, sizeof o.why, "%d ranks, flags 0x%x%s", k.size, desc->ops ? k.ops->flags : 0,
                 k.ops->flags & PLAIT_COMM_ASYNC_PROGRESS ? " (async progress)" : " (progress in test/wait)");
    gather_row(world, "init", "setup", &o, rep);
    process_after(&pw, k.rank, "init");
    /* every rank must know whether every rank has a communicator */
    int ok = o.verdict == KIT_PASS, all_ok = 1;
    int *oks = calloc((size_t)k.size, sizeof *oks);
    if (!oks || world->allgather(world->ctx, &ok, oks, sizeof ok) != PLAIT_OK) all_ok = 0;
    for (int r = 0; oks && r < k.size; r++) all_ok &= oks[r];
    free(oks);
    if (!all_ok) {
        if (k.rank == 0) kit_report_add(rep, "(rest)", "setup", KIT_SKIP, "skipped: init() failed");
        raw_destroy(&k, bs_a);
        plait_process_state_free(&pw.before);
        return;
    }
    static const struct {
        const char *name, *rule;
        p2p_check fn;
    } checks[] = {
        {"order", "order", kit_check_order},          {"tags", "tags", kit_check_tags},
        {"zero-byte", "zero", kit_check_zero},        {"truncation", "truncation", kit_check_truncation},
        {"large+posting", "posting", kit_check_posting}, {"progress", "progress", kit_check_progress},
        {"timeout", "timeout", kit_check_timeout},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        run_check(&k, checks[i].name, checks[i].rule, checks[i].fn, rep);
        process_after(&pw, k.rank, checks[i].name);
    }
    check_collectives(job, desc, cfg, opts, rep);
    process_after(&pw, k.rank, "collectives");
    /* abort() on a second communicator, so the first stays usable until destroyed */
    kit_p2p kb = k;
    kb.comm = NULL;
    kit_outcome ao = {0};
    if (raw_init(job, cfg, opts->host, "kit/b", &kb, &bs_b) != PLAIT_OK)
        kit_fail(&ao, "setup", "rank %d: a second init(): %s", k.rank, plait_last_error());
    else if (world->barrier(world->ctx) == PLAIT_OK)
        kit_check_abort(&kb, &ao);
    gather_row(world, "abort", "loss", &ao, rep);
    process_after(&pw, k.rank, "abort");
    raw_destroy(&kb, bs_b);
    raw_destroy(&k, bs_a);
    check_cleanup(world, fds0, th0, rep);
    process_after(&pw, k.rank, "cleanup");
    if (pw.o.verdict != KIT_FAIL)
        snprintf(pw.o.why, sizeof pw.o.why, "the working directory and the variables plait reads as found");
    gather_row(world, "process", "process", &pw.o, rep);
    plait_process_state_free(&pw.before);
    if (!opts->lose_peer || k.size < 2) return;
    /* last: one rank exits in the middle; only the survivors report (rank 0's view) */
    plait_bootstrap *bs_c = NULL;
    kit_outcome lo = {0};
    if (raw_init(job, cfg, opts->host, "kit/c", &k, &bs_c) != PLAIT_OK)
        kit_fail(&lo, "setup", "rank %d: a third init(): %s", k.rank, plait_last_error());
    else
        kit_check_peer_lost(&k, &lo);
    if (k.rank == 0) {
        if (lo.verdict != KIT_FAIL) snprintf(lo.rule, sizeof lo.rule, "loss");
        kit_report_add(rep, "peer-lost", lo.rule, lo.verdict, "%s", lo.why);
    }
    raw_destroy(&k, bs_c);
}
