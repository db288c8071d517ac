/*
 * `plait train`: the loop around plait_run — steps, evaluation, metrics.csv,
 * progress on rank 0, checkpoints every ckpt_every steps and at the end,
 * resume from the latest complete checkpoint.
 */
#include "train/train_loop.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch/bootstrap.h"
#include "comm/comm.h"
#include "elastic/agent_client.h"
#include "launch/rank_report.h"
#include "launch/restart.h"
#include "layout/mesh.h"
#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/out_file.h"
#include "runtime/stop_signal.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "train/data.h"
#include "train/metrics.h"
#include "train/mfu_peak.h"
#include "train/out_dir_lock.h"
#include "train/preflight.h"
#include "train/progress.h"
#include "train/run.h"
#include "train/run_ckpt.h"
#include "train/run_shared_dir.h"
#include "train/run_internal.h"
#include "train/run_replica.h"
#include "train/run_trace.h"
#include "train/tfevents.h"
#include "runtime/trace.h"
#include "runtime/trace_nvtx.h"

static plait_status make_dirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", buf, strerror(errno));
    return PLAIT_OK;
}

void plait_train_out_dir(const plait_config *cfg, char *buf, size_t len) {
    const char *dir = plait_config_str(cfg, "run", "out_dir");
    if (*dir) {
        snprintf(buf, len, "%s", dir);
        return;
    }
    const char *path = plait_config_path(cfg);
    const char *base = path ? strrchr(path, '/') : NULL;
    base = base ? base + 1 : path ? path : "run";
    size_t n = strlen(base);
    if (n > 4 && strcmp(base + n - 4, ".ini") == 0) n -= 4;
    snprintf(buf, len, "runs/%.*s", (int)n, base);
}

static void add_columns(plait_metrics *m, const plait_run *run) {
    const int32_t pp = run->world.mesh.pp;
    static const char *const cols[] = {
        "step", "loss", "val_loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "compute_ms", "comm_ms",
        "idle_ms", "peak_rss_mb", "dp_bytes", "tp_bytes", "pp_bytes", "optim_bytes", "early_buckets",
        "param_mb", "grad_mb", "optim_state_mb", "buffer_mb", "activation_mb", "tp_ms", "bubble_measured",
        "bubble_formula", "pipe_span_ms", "restarts", "time_s", "tokens_seen", "mfu", "hosts",
        "membership_changes"};
    for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) plait_metrics_column(m, cols[i]);
    /* [data] val_sets: each set's loss where it was evaluated */
    for (int k = 0; k < run->n_val_sets; k++) {
        char name[64];
        snprintf(name, sizeof name, "val_loss_%s", run->val_names[k]);
        plait_metrics_column(m, name);
    }
    /* each pipeline stage's idle time (the bubble), as the step's span over
     * all stages (pipe_span_ms) minus the stage's busy time */
    for (int32_t s = 0; s < pp; s++) {
        char name[32];
        snprintf(name, sizeof name, "idle_ms_stage%d", (int)s);
        plait_metrics_column(m, name);
    }
}

/* Memory of every rank: the table at start-up (rank 0 prints it) and
 * memory.csv at the end (activations, peak RSS and the last step's bytes
 * per axis are known then).
 * Collective over the world. */
static plait_status report_memory(plait_run *run, const char *out_dir, int at_end) {
    double *rows = malloc(sizeof(double) * (size_t)run->world.mesh.world_size * PLAIT_RUN_MEM_FIELDS);
    if (!rows) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_run_gather_memory(run, rows);
    if (st == PLAIT_OK && run->world.mesh.world_rank == 0) {
        if (at_end) {
            /* memory.csv is a path under out_dir: never written through a
             * process the gather's calls changed */
            st = plait_run_check_process(run, "the run's end: the calls of its memory report");
            char path[4200];
            snprintf(path, sizeof path, "%s/memory.csv", out_dir);
            if (st == PLAIT_OK) st = plait_run_write_memory_csv(run, rows, path);
        } else {
            plait_run_print_memory_table(run, rows);
        }
    }
    free(rows);
    return st;
}

/* Rank 0: the peak MFU is measured against (see train/mfu_peak.h), while
 * the other ranks wait in the next collective (so they do not compete for
 * the cores). A run that shows no progress measures nothing (its metrics
 * have no MFU unless [run] mfu_peak gives the peak). */
static double job_peak(const plait_run *run, const plait_progress *progress) {
    if (progress->mode == PLAIT_PROGRESS_OFF && !(plait_config_float(run->cfg, "run", "mfu_peak") > 0)) return 0;
    plait_mfu_peak peak;
    plait_mfu_peak_get(run->cfg, plait_job_math_threads(run->world.job), plait_job_local_size(run->world.job),
                       run->world.mesh.world_size, &peak);
    printf("plait: MFU against %.1f GFLOP/s: %d rank%s x %s\n", peak.flops / 1e9, peak.ranks,
           peak.ranks == 1 ? "" : "s", peak.source);
    fflush(stdout);
    return peak.flops;
}

/* Rank 0's step executor hook: where a long step is (train/progress.h). */
typedef struct layer_watch {
    plait_progress *progress;
    const plait_run *run;
} layer_watch;

static void on_layer(void *ctx, int backward, int32_t layer, int32_t mb) {
    layer_watch *w = ctx;
    plait_progress_layer(w->progress, backward, layer, w->run->model.spec->n_layers, mb,
                         w->run->work.plan.micro_batches);
}

/* [run] progress (or the command's choice). "auto" draws in place on a
 * terminal, but mpirun gives rank 0 a pseudo-terminal even when the job's
 * output is redirected to a file, and srun and torchrun-style launchers
 * collect output into logs: under them "auto" means plain lines ("tty"
 * still draws in place). */
static const char *progress_mode(const plait_config *cfg, const char *given) {
    const char *mode = given ? given : plait_config_str(cfg, "run", "progress");
    plait_job_env env;
    if (strcmp(mode, "auto") == 0 &&
        plait_job_env_detect(NULL, plait_config_str(cfg, "comm", "rendezvous"), &env) == PLAIT_OK &&
        (env.launcher == PLAIT_LAUNCHER_MPI || env.launcher == PLAIT_LAUNCHER_SLURM ||
         env.launcher == PLAIT_LAUNCHER_TORCHRUN))
        return "plain";
    return mode;
}

/* Log to <out_dir>/rank-<rank>.log. Returns 0, or -1 (warned) if it cannot. */
static int open_rank_log(const char *out_dir, int rank) {
    char log_path[4200];
    snprintf(log_path, sizeof log_path, "%s/rank-%d.log", out_dir, rank);
    if (plait_log_set_file(log_path) == 0) return 0;
    PLAIT_WARN("train", "the rank's log is not written: %s", plait_last_error());
    return -1;
}

static plait_status train_in(plait_config *cfg, const plait_train_options *opts, const char *out_dir,
                             int log_rank, int lock_fd);

/* The longest [run] out_dir whose files fit PATH_MAX (4096): 128 bytes are
 * left for "/ckpt-<step>/optim.safetensors.<pid>-<8 hex>.tmp" and the like. */
#define OUT_DIR_MAX 3968
/* How long a rank other than 0 gives its rank 0 to write its name into a
 * lock it holds before taking the holder for another run: writing it takes
 * microseconds; a refused job's launcher stops its ranks after its grace
 * (3 s) anyway. */
#define OUT_DIR_HOLDER_WAIT_S 2.0

plait_status plait_train(plait_config *cfg, const plait_train_options *opts) {
    char out_dir[4096];
    plait_train_out_dir(cfg, out_dir, sizeof out_dir);
    size_t given = strlen(plait_config_str(cfg, "run", "out_dir"));
    if (given > OUT_DIR_MAX) {
        /* refused now: found at the first checkpoint, the steps before it would be lost */
        const char *where = "?";
        plait_config_origin(cfg, "run", "out_dir", &where);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [run] out_dir is %zu characters long; at most %d leave room for the paths of "
                               "its checkpoint files (PATH_MAX 4096): choose a shorter path",
                               where, given, OUT_DIR_MAX);
    }
    /* One process has no launcher to check its layout first: the same
     * preflight here (its model, batch, plan and what the optimizer refuses
     * beside them), before the run's directory; a rank of several keeps
     * the rules between the core's keys and its optimizer's check (the
     * run's device among what it is told), its launcher having checked the
     * rest, or its plugins checking their own as they are made */
    const int alone = plait_mesh_world_size(cfg) == 1;
    plait_status st = alone ? plait_layout_preflight(cfg) : plait_check_key_rules(cfg);
    if (st == PLAIT_OK && !alone) st = plait_check_run_optimizer(cfg);
    if (st == PLAIT_OK && !alone) st = plait_check_residual(cfg);
    if (st == PLAIT_OK) st = plait_train_check_trace(cfg);
    if (st == PLAIT_OK) st = plait_train_check_inputs(cfg);
    struct stat sb;
    if (st == PLAIT_OK && (opts->resume == PLAIT_RESUME_REQUIRED || strcmp(plait_config_str(cfg, "run", "resume"), "yes") == 0) &&
        stat(out_dir, &sb) != 0 && errno == ENOENT)
        /* refused without creating it: a mistyped out_dir is not left behind */
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "--resume: %s does not exist (nothing to resume from; is [run] "
                                                       "out_dir right?)", out_dir);
    if (st == PLAIT_OK) st = make_dirs(out_dir);
    if (st != PLAIT_OK) return st;
    plait_job_env env;
    int detected = plait_job_env_detect(NULL, plait_config_str(cfg, "comm", "rendezvous"), &env) == PLAIT_OK;
    /* Rank 0 (the writer of metrics and checkpoints) holds the run directory
     * for the run's life, before it writes anything there; the other ranks
     * write their logs there only if it is not another run's. */
    char job[PLAIT_JOB_IDENTITY_CHARS + 1] = "";
    if (detected) plait_job_env_identity(&env, job);
    int lock_fd = -1;
    if (!detected || env.rank == 0) {
        st = plait_out_dir_lock(out_dir, job, &lock_fd);
        if (st != PLAIT_OK) return st;
        /* a metrics.csv rewrite killed half-way left its temporary file */
        (void)plait_out_remove_stale_temps(out_dir);
    } else if ((st = plait_out_dir_enter(out_dir, job, OUT_DIR_HOLDER_WAIT_S)) != PLAIT_OK) {
        return st;
    }
    /* The rank's log from the start, so that a failure while the run is
     * built (keys that differ across ranks, a peer that never joins) is in
     * it too: the launcher's environment names the rank before the join. */
    int log_rank = -1;
    if (detected) {
        plait_log_set_rank(env.size > 1 ? env.rank : -1);
        if (open_rank_log(out_dir, env.rank) == 0) log_rank = env.rank;
    }
    st = train_in(cfg, opts, out_dir, log_rank, lock_fd);
    plait_out_dir_unlock(lock_fd);
    return st;
}

plait_status plait_train_check_trace(const plait_config *cfg) {
    int64_t first, last;
    return plait_run_trace_range(cfg, 1, plait_config_int(cfg, "run", "steps"), &first, &last);
}

plait_status plait_train_check_inputs(const plait_config *cfg) {
    plait_status st = plait_data_check_files(cfg);
    const char *init_from = plait_config_str(cfg, "run", "init_from");
    if (st != PLAIT_OK || !init_from || !*init_from) return st;
    char out_dir[4096];
    plait_train_out_dir(cfg, out_dir, sizeof out_dir);
    /* a restart may start from the replicas in its launchers' memory */
    struct stat sb;
    const int fresh = plait_restart_count() == 0 && stat(out_dir, &sb) != 0 && errno == ENOENT;
    if (!fresh || stat(init_from, &sb) == 0) return PLAIT_OK;
    const int err = errno;
    const char *where = "?";
    plait_config_origin(cfg, "run", "init_from", &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: [run] init_from = %s: %s; name a safetensors file, a directory holding "
                           "model.safetensors, a run directory (its newest checkpoint) or a Hugging Face Llama "
                           "directory",
                           where, init_from, strerror(err));
}

/* One run's loop: the run, where it writes, rank 0's reports, and what the
 * step just done asked for. */
typedef struct train_loop {
    plait_config *cfg;
    const plait_train_options *opts;
    plait_run *run;
    const char *out_dir;
    int lock_fd;             /* rank 0's hold on out_dir (train/out_dir_lock.h), -1 on the others */
    int rank;                /* world rank */
    plait_metrics metrics;   /* rank 0 */
    plait_tfevents tb;       /* rank 0, [run] tensorboard (file NULL without) */
    plait_progress progress; /* rank 0 */
    layer_watch watch;       /* rank 0's step executor hook */
    int64_t tokens_per_step;
    int64_t eval_every, ckpt_every, replica_every, first_snapshot;
    int has_val;           /* validation data, evaluated every eval_every steps and at the end */
    double started;        /* when the loop began (runtime/clock.h) */
    int64_t first_step;    /* the steps done when the loop began */
    int64_t at_step;       /* the step being worked on, numbered as metrics.csv numbers it (from 1) */
    double loss, val_loss; /* the last step's; val_loss -1 when it was not evaluated */
    double set_loss[PLAIT_VAL_SETS_MAX]; /* [data] val_sets' losses at the last evaluation */
    int boundary;          /* the last step saved a checkpoint or a replica */
    int evaluated;         /* the last step was evaluated */
    int sets_scored;       /* ... and set_loss holds [data] val_sets' losses of it */
    int stop;              /* stopping early so that a waiting host joins the next round, or at
                            * [run] exit_interval, exit_after_minutes or exit_signal */
    char stop_why[96];     /* which of those three stops the run after this step, which saves; "" none */
    int stop_signal;       /* [run] exit_signal's number, caught; 0 for none */
} train_loop;

/* The run opened: from the replicas in the launchers' memory on an elastic
 * restart that keeps them (the disk only looked at: what it holds is read
 * only if the memory does not serve), else from the newest complete
 * checkpoint in out_dir, else fresh. */
static plait_status open_run(plait_config *cfg, const plait_train_options *opts, const char *out_dir, plait_run **run) {
    char *resume_dir = NULL;
    plait_run_origin from = {.disk_step = -1, .out_dir = out_dir, .resume_mode = opts->resume};
    from.try_replicas = plait_agent_present() && plait_restart_count() > 0 &&
                        plait_config_int(cfg, "run", "replica_every") > 0 &&
                        strcmp(plait_config_str(cfg, "run", "resume"), "no") != 0;
    plait_status st = from.try_replicas ? plait_run_find_resume_quick(out_dir, &resume_dir, &from.disk_step)
                                        : plait_run_find_resume(cfg, out_dir, opts->resume, &resume_dir);
    if (st != PLAIT_OK) return st;
    from.resume_dir = resume_dir;
    st = plait_run_open_from(cfg, &from, run);
    free(resume_dir);
    return st;
}

/* Rank 0: why a restarted run restarted, in the log and on the console. */
static void warn_restart(const plait_run *run, const char *resumed) {
    if (plait_restart_count() > 0 && plait_restart_hosts() > 0) {
        /* an elastic job's new round: who trains now, and why */
        PLAIT_WARN("train",
                   "restart %d (membership changes so far: %d) after: %s; now %d host%s, dp %d x tp %d x "
                   "pp %d, accumulation %lld; resuming at step %lld from %s",
                   plait_restart_count(), plait_restart_changes(), plait_restart_reason(), plait_restart_hosts(),
                   plait_restart_hosts() == 1 ? "" : "s", run->world.mesh.dp, run->world.mesh.tp, run->world.mesh.pp,
                   (long long)run->work.batch.accumulation, (long long)run->step,
                   resumed ? resumed : "the start (no complete checkpoint yet)");
    } else if (plait_restart_count() > 0) {
        /* the launcher relaunched the job (--max-restarts), with the
         * failure that caused it */
        PLAIT_WARN("train", "restart %d of at most %d after: %s; resuming at step %lld from %s", plait_restart_count(),
                   plait_restart_max(), plait_restart_reason(), (long long)run->step,
                   resumed ? resumed : "the start (no complete checkpoint yet)");
    }
}

/* Rank 0's reports opened: metrics.csv and, with [run] tensorboard, an
 * event file; the files the run writes later (memory.csv at its end, its
 * checkpoints) checked now, not after the whole run; the progress line,
 * the run's summary, why it restarted, and the peak its MFU is measured
 * against. */
static plait_status open_reports(train_loop *t) {
    plait_run *run = t->run;
    const char *resumed = run->resumed_from[0] ? run->resumed_from : NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.csv", t->out_dir);
    /* the event folder first: one in the way stops the run before it
     * writes anything */
    plait_status st = PLAIT_OK;
    if (plait_config_bool(t->cfg, "run", "tensorboard")) st = plait_tfevents_open(&t->tb, t->out_dir);
    if (st == PLAIT_OK) st = plait_metrics_open(&t->metrics, path, resumed != NULL, run->step);
    /* memory.csv is written when the run ends: a file in its place that
     * plait would refuse to write over is refused now, not after the
     * whole run (and after every restart of it) */
    snprintf(path, sizeof path, "%s/memory.csv", t->out_dir);
    plait_status own = st == PLAIT_OK ? plait_out_check_own(path, "rank,", "the run's memory report") : st;
    if (own != st) st = plait_wrap_error(own, "cannot write the memory report at the run's end");
    /* so is whatever stands where a checkpoint of this run goes */
    if (st == PLAIT_OK) st = plait_run_check_ckpt_names(t->out_dir, run->step, run->steps, t->ckpt_every);
    if (st == PLAIT_OK) plait_run_warn_ckpt_room(run, t->out_dir, t->ckpt_every);
    add_columns(&t->metrics, run);
    plait_run_moe_columns(run, &t->metrics);
    plait_progress_init(&t->progress, progress_mode(t->cfg, t->opts->progress), stdout, run->steps,
                        plait_run_flops_per_token(run), 0);
    plait_run_print_summary(run, t->out_dir, resumed);
    warn_restart(run, resumed);
    t->progress.peak_flops = job_peak(run, &t->progress);
    return st;
}

/* The loop's start, once the run is open: rank 0's reports, every rank's
 * memory table, the room the first replica needs, and the settings the
 * after-step actions follow. */
static plait_status start(train_loop *t) {
    plait_run *run = t->run;
    plait_config *cfg = t->cfg;
    plait_status st = PLAIT_OK;
    t->tokens_per_step = run->work.batch.global_batch * run->model.block_size;
    t->ckpt_every = plait_config_int(cfg, "run", "ckpt_every");
    /* the traced steps against those this run trains, before the start's
     * reports and measurements */
    st = plait_run_trace_range(cfg, run->step + 1, run->steps, &run->trace_first, &run->trace_last);
    /* before anything is trained: a sharded save needs every rank to see
     * the run directory */
    if (st == PLAIT_OK && !strcmp(plait_config_str(cfg, "run", "ckpt_format"), "sharded"))
        st = plait_run_check_shared_dir(run, t->out_dir);
    if (st == PLAIT_OK && t->rank == 0) st = open_reports(t);
    if (st == PLAIT_OK) st = report_memory(run, t->out_dir, 0);
    /* the memory table's gather and the peak's measurement called plugins
     * too: a change there is theirs, not step 1's */
    if (st == PLAIT_OK) st = plait_run_check_process(run, "the run's start: the calls of its memory table and peak");
    t->eval_every = plait_config_int(cfg, "run", "eval_every");
    t->replica_every = plait_run_replicas_on(run) ? plait_config_int(cfg, "run", "replica_every") : 0;
    t->first_snapshot = plait_run_first_snapshot(run, t->replica_every);
    if (st == PLAIT_OK) st = plait_run_check_replica_room(run, t->first_snapshot);
    if (st == PLAIT_OK) st = plait_run_trace_start(run, t->out_dir);
    /* No validation data (no val_path and val_fraction = 0, which preflight
     * allows only with eval_every = 0): the run trains on all the data and
     * skips the final evaluation. A val_path is validation data whatever
     * val_fraction says (it is not used then). */
    const char *val_path = plait_config_str(cfg, "data", "val_path");
    t->has_val = plait_config_float(cfg, "data", "val_fraction") > 0 || (val_path && *val_path);
    t->stop_signal = plait_stop_signal_number(plait_config_str(cfg, "run", "exit_signal"));
    if (st == PLAIT_OK && plait_stop_signal_catch(t->stop_signal) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "[run] exit_signal = %s: sigaction: %s",
                             plait_stop_signal_name(t->stop_signal), strerror(errno));
    if (st == PLAIT_OK && t->stop_signal) plait_launch_report_handles(t->stop_signal);
    t->started = plait_clock_now();
    t->first_step = run->step;
    t->loss = NAN;
    t->val_loss = -1;
    t->watch = (layer_watch){.progress = &t->progress, .run = run};
    if (t->rank == 0) {
        run->exec.on_layer = on_layer;
        run->exec.on_layer_ctx = &t->watch;
    }
    t->at_step = run->step + 1;
    return st;
}

/* One optimizer step. */
static plait_status take_step(train_loop *t, plait_step_result *res) {
    t->at_step = t->run->step + 1;
    if (t->rank == 0) plait_progress_step_begin(&t->progress, t->run->step + 1);
    plait_run_trace_step_begin(t->run, t->at_step);
    return plait_run_step(t->run, res);
}

/* After a step, check: before the step writes anything (its metrics row, its
 * progress line, a checkpoint under a relative out_dir), the process its
 * calls left is the one they were given (a plugin that changed the working
 * directory or a PLAIT_* variable stops the rank); rank 0 takes the row's
 * measurements (memory included) as the step left them, before a
 * checkpoint adds its buffers, and finds the run directory still this
 * run's (removed or replaced under the run, nothing more is written there:
 * a checkpoint would recreate it half); the last snapshot's copies on
 * other hosts are complete once this step is (run_replica.h). */
static plait_status check(train_loop *t, const plait_step_result *res) {
    plait_run *run = t->run;
    char when[128];
    snprintf(when, sizeof when, "step %lld: the step's calls", (long long)run->step);
    plait_status st = plait_run_check_process(run, when);
    if (st != PLAIT_OK) return st;
    t->loss = res->loss;
    t->val_loss = -1;
    t->boundary = t->evaluated = t->sets_scored = 0;
    if (t->rank == 0) plait_run_fill_metrics(run, &t->metrics, res, -1);
    if (t->rank == 0 && (st = plait_out_dir_check(t->out_dir, t->lock_fd)) != PLAIT_OK) return st;
    return plait_run_replica_settle(run);
}

/* A save that failed because the directory went in the meantime says so
 * (and that no restart can mend it), not which file it could not create or
 * find: rank 0 looks at the run directory's lock after a failed save. */
static plait_status said_as_the_run_dir(const train_loop *t, plait_status st) {
    if (st != PLAIT_OK && t->rank == 0 && plait_out_dir_check(t->out_dir, t->lock_fd) != PLAIT_OK)
        st = PLAIT_ERR_SYSTEM;
    return st;
}

/* A background save (ckpt_async) that every rank has written ends here
 * (`wait`: at the run's end, once written), or reports its failure. */
static plait_status settle(const train_loop *t, int wait, int ok) {
    return said_as_the_run_dir(t, plait_run_save_settle(t->run, wait, ok));
}

/* After a step and its metrics row, save: a checkpoint every ckpt_every
 * steps and at the last. */
static plait_status save(train_loop *t) {
    int64_t done = t->run->step;
    if (!((t->ckpt_every > 0 && done % t->ckpt_every == 0) || done == t->run->steps || t->stop_why[0])) return PLAIT_OK;
    uint64_t span0 = plait_trace_begin();
    int nvtx = plait_trace_range_push("checkpoint");
    plait_status st = said_as_the_run_dir(t, plait_run_save(t->run, t->out_dir));
    plait_trace_range_pop(nvtx);
    plait_trace_end(PLAIT_TRACE_CKPT, "checkpoint", span0, NULL);
    if (st == PLAIT_OK) t->boundary = 1;
    return st;
}

/* After a step, before its checkpoint: does the run stop here? At [run]
 * exit_interval by the step's number, the same on every rank; at
 * exit_after_minutes by rank 0's clock, at exit_signal once any rank has
 * received it (a scheduler may signal some ranks before the others): one
 * all-reduce (max) a step, only with either of those two set, so that
 * every rank saves this step and stops. */
static plait_status check_stop(train_loop *t) {
    const int64_t step = t->run->step, interval = plait_config_int(t->cfg, "run", "exit_interval");
    const double limit = plait_config_float(t->cfg, "run", "exit_after_minutes");
    if (step >= t->run->steps) return PLAIT_OK;
    int32_t why[2] = {0, 0};
    if (limit > 0 || t->stop_signal) {
        why[0] = t->rank == 0 && limit > 0 && plait_clock_now() - t->started >= 60.0 * limit;
        why[1] = plait_stop_signal_seen() != 0;
        plait_status st = plait_comm_allreduce(t->run->world.comm, why, why, 2, PLAIT_I32, PLAIT_MAX, NULL, NULL);
        if (st != PLAIT_OK) return st;
    }
    if (why[1])
        snprintf(t->stop_why, sizeof t->stop_why, "%s received ([run] exit_signal)",
                 plait_stop_signal_name(t->stop_signal));
    else if (why[0]) snprintf(t->stop_why, sizeof t->stop_why, "[run] exit_after_minutes = %g passed", limit);
    else if (interval > 0 && step % interval == 0)
        snprintf(t->stop_why, sizeof t->stop_why, "[run] exit_interval = %lld reached", (long long)interval);
    if (t->stop_why[0]) t->stop = 1;
    return PLAIT_OK;
}

/* After a step, replicate: an elastic job's snapshot into the launchers'
 * memory every replica_every steps (none at the last: its checkpoint is
 * saved). */
static plait_status replicate(train_loop *t) {
    int64_t done = t->run->step;
    if (!(t->replica_every > 0 && done % t->replica_every == 0 && done < t->run->steps)) return PLAIT_OK;
    plait_status st = PLAIT_OK;
    /* the room checked again now that the steps have touched their activations */
    if (done == t->first_snapshot) st = plait_run_check_replica_room(t->run, done);
    if (st == PLAIT_OK) st = plait_run_replicate(t->run);
    if (st == PLAIT_OK) t->boundary = 1;
    return st;
}

/* After a step, evaluate: the validation loss every eval_every steps and at
 * the last, when there is validation data. */
static plait_status evaluate(train_loop *t) {
    int64_t done = t->run->step;
    const int some = t->has_val || t->run->n_val_sets > 0;
    if (!(some && ((t->eval_every > 0 && done % t->eval_every == 0) || done == t->run->steps))) return PLAIT_OK;
    if (t->rank == 0) plait_progress_eval_begin(&t->progress, done);
    plait_status st = t->has_val ? plait_run_eval(t->run, &t->val_loss, NULL) : PLAIT_OK;
    for (int k = 0; st == PLAIT_OK && k < t->run->n_val_sets; k++) st = plait_run_eval_set(t->run, k, &t->set_loss[k]);
    if (st == PLAIT_OK) t->evaluated = 1;
    t->sets_scored = st == PLAIT_OK && t->run->n_val_sets > 0;
    return st;
}

/* After a step, check again: the calls of its evaluation left the process
 * as it was, before the step's metrics row and progress line are written;
 * then those of its checkpoint or replica, before the next step. */
static plait_status check_calls(train_loop *t) {
    if (!t->boundary && !t->evaluated) return PLAIT_OK;
    char when[128];
    snprintf(when, sizeof when, "step %lld: the calls of its %s", (long long)t->run->step,
             t->boundary ? "checkpoint or replica" : "evaluation");
    t->evaluated = 0; /* checked: the second call is the boundary's */
    return plait_run_check_process(t->run, when);
}

/* After a step, report (rank 0): the progress line and the metrics row. */
static plait_status report(train_loop *t, const plait_step_result *res) {
    if (t->rank != 0) return PLAIT_OK;
    plait_run *run = t->run;
    int64_t done = run->step;
    double elapsed = plait_clock_now() - t->started;
    double tps = (double)t->tokens_per_step / res->t.step_s;
    double eta = (double)(run->steps - done) * elapsed / (double)(done - t->first_step);
    plait_progress_step(&t->progress, done, res->loss, t->val_loss, res->lr, tps, eta);
    if (t->val_loss >= 0) plait_metrics_set_named(&t->metrics, "val_loss", t->val_loss);
    for (int k = 0; t->sets_scored && k < run->n_val_sets; k++) {
        char name[64];
        snprintf(name, sizeof name, "val_loss_%s", run->val_names[k]);
        plait_metrics_set_named(&t->metrics, name, t->set_loss[k]);
    }
    char mfu_text[64];
    plait_metrics_set_named(&t->metrics, "time_s", elapsed);
    plait_metrics_set_named(&t->metrics, "tokens_seen", (double)done * (double)t->tokens_per_step);
    plait_metrics_set_named(&t->metrics, "mfu",
                            plait_mfu_text(tps * plait_run_flops_per_token(run), t->progress.peak_flops, mfu_text,
                                           sizeof mfu_text));
    /* the row's values before the row clears them */
    plait_status st = plait_tfevents_scalars(&t->tb, done, 0, t->metrics.n, t->metrics.names, t->metrics.values);
    return st == PLAIT_OK ? plait_metrics_row(&t->metrics) : st;
}

/* After a step, regroup: an elastic job with a host waiting to join stops
 * at a checkpoint or replica (not the last step), so that the next round
 * trains with it. */
static plait_status regroup(train_loop *t) {
    plait_run *run = t->run;
    int64_t done = run->step;
    if (!(t->boundary && done < run->steps && plait_agent_present())) return PLAIT_OK;
    int waits = 0;
    plait_status st = plait_run_replica_settle(run); /* both copies in place before anyone stops */
    if (st != PLAIT_OK) return st;
    if (t->rank == 0 && plait_agent_regroup(&waits) != PLAIT_OK) waits = 0;
    st = plait_comm_broadcast(run->world.comm, &waits, 1, PLAIT_I32, 0, NULL, NULL);
    if (st == PLAIT_OK && waits) {
        if (t->rank == 0)
            PLAIT_WARN("train",
                       "a host waits to join the job: stopping after step %lld (its checkpoint "
                       "saved) so that the next round trains with it",
                       (long long)done);
        if (t->opts->regrouped) *t->opts->regrouped = 1;
        t->stop = 1;
    }
    return st;
}

/* The loop's end: the replicas settled, every rank's memory.csv row, and
 * rank 0's last line (regrouped, done, or nothing to do). */
static plait_status finish(train_loop *t, plait_status st) {
    plait_run *run = t->run;
    if (st == PLAIT_OK) st = plait_run_replica_settle(run);
    int trained = run->step > t->first_step;
    if (st == PLAIT_OK) st = report_memory(run, t->out_dir, 1);
    if (t->rank != 0) return st;
    plait_progress_finish(&t->progress);
    plait_metrics_close(&t->metrics);
    plait_tfevents_close(&t->tb);
    if (st == PLAIT_OK && t->opts->regrouped && *t->opts->regrouped) {
        printf("stopped at step %lld of %lld to regroup with a host that joins\n", (long long)run->step,
               (long long)run->steps);
    } else if (st == PLAIT_OK && t->stop_why[0]) {
        printf("stopped at step %lld of %lld: %s; checkpoint: %s/ckpt-%08lld (continue with --resume)\n",
               (long long)run->step, (long long)run->steps, t->stop_why, t->out_dir, (long long)run->step);
    } else if (t->opts->eval_only) {
        /* said by eval_only */
    } else if (st == PLAIT_OK && trained) {
        plait_run_print_bubble(run);
        printf("done: %lld steps, final loss %.4f; metrics: %s/metrics.csv; checkpoint: %s/ckpt-%08lld\n",
               (long long)run->step, t->loss, t->out_dir, t->out_dir, (long long)run->step);
    } else if (st == PLAIT_OK) {
        printf("nothing to do: the run is already at step %lld of [run] steps = %lld (raise run.steps to "
               "train further)\n",
               (long long)run->step, (long long)run->steps);
    }
    return st;
}

/* --eval-only: the validation loss of the state the run started from, said
 * by rank 0 with its perplexity and what it covered. */
static plait_status eval_only(train_loop *t) {
    plait_run *run = t->run;
    if (!t->has_val && run->n_val_sets == 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "plait train --eval-only: the data has no validation split ([data] val_path and "
                               "val_sets are empty and val_fraction = 0); name the data to evaluate in [data] "
                               "val_path or val_sets, or hold out a share of path with val_fraction > 0");
    double loss = 0;
    int64_t sequences = 0;
    plait_status st = t->has_val ? plait_run_eval(run, &loss, &sequences) : PLAIT_OK;
    const int64_t batches = plait_config_int(t->cfg, "run", "eval_batches");
    if (st == PLAIT_OK && t->rank == 0 && t->has_val)
        printf("eval: step %lld: validation loss %.4f, perplexity %.2f, over %lld sequences of %d tokens "
               "([run] eval_batches = %lld micro-batches)\n",
               (long long)run->step, loss, exp(loss), (long long)sequences, run->model.block_size, (long long)batches);
    for (int k = 0; st == PLAIT_OK && k < run->n_val_sets; k++) {
        st = plait_run_eval_set(run, k, &loss);
        if (st == PLAIT_OK && t->rank == 0)
            printf("eval: step %lld: validation set %s: loss %.4f, perplexity %.2f\n", (long long)run->step,
                   run->val_names[k], loss, exp(loss));
    }
    return st;
}

/* The run itself, in `out_dir` (created; locked by rank 0): each step, then
 * its after-step actions in order, until the last step or a regroup; or,
 * with --eval-only, one evaluation. */
static plait_status train_in(plait_config *cfg, const plait_train_options *opts, const char *out_dir, int log_rank,
                             int lock_fd) {
    train_loop t = {.cfg = cfg, .opts = opts, .out_dir = out_dir, .lock_fd = lock_fd};
    plait_status st = open_run(cfg, opts, out_dir, &t.run);
    if (st != PLAIT_OK) return st;
    plait_run *run = t.run;
    t.rank = run->world.mesh.world_rank;
    if (t.rank != log_rank) (void)open_rank_log(out_dir, t.rank);
    st = start(&t);
    if (st == PLAIT_OK && opts->eval_only) {
        st = eval_only(&t);
        t.stop = 1;
    }
    while (st == PLAIT_OK && !t.stop && run->step < run->steps) {
        plait_step_result res;
        st = take_step(&t, &res);
        /* a background save that every rank has written ends here, or
         * reports its failure at this step */
        if (st == PLAIT_OK) st = settle(&t, 0, 1);
        if (st == PLAIT_OK) st = check(&t, &res);
        if (st == PLAIT_OK) st = evaluate(&t);
        if (st == PLAIT_OK) st = check_calls(&t);
        /* the step's row before its checkpoint or replica: a state a
         * resume can start from has the rows of every step it holds (the
         * resume drops those of later steps, which it trains again) */
        if (st == PLAIT_OK) st = report(&t, &res);
        if (st == PLAIT_OK) st = check_stop(&t);
        if (st == PLAIT_OK) st = save(&t);
        if (st == PLAIT_OK) st = replicate(&t);
        if (st == PLAIT_OK) st = check_calls(&t);
        /* the traced steps' files once the last one is done, its
         * checkpoint and evaluation included */
        if (st == PLAIT_OK) st = plait_run_trace_step_end(run, run->step, out_dir);
        if (st == PLAIT_OK) st = regroup(&t);
    }
    plait_status sst = settle(&t, 1, st == PLAIT_OK);
    if (st == PLAIT_OK) st = sst;
    st = finish(&t, st);
    plait_stop_signal_release();
    if (st != PLAIT_OK) {
        char at[32];
        snprintf(at, sizeof at, "step %lld", (long long)t.at_step);
        return plait_run_fail(run, st, at, "train");
    }
    plait_run_trace_flush(); /* a run that stopped inside its traced steps (to regroup) */
    plait_run_close(run);
    return PLAIT_OK;
}
