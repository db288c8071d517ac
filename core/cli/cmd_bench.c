/* plait bench: benchmarks. `plait bench comm` measures the collectives. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_comm.h"
#include "cli/cli.h"
#include "comm/comm.h"
#include "comm/comm_job.h"
#include "comm/comm_threads.h"
#include "coll/reduce.h"
#include "config/config_value.h"
#include "device/device.h"
#include "launch/bootstrap.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

int plait_cli_bench_train(int argc, char **argv, int full_argc, char **full_argv, const plait_cli_job_opts *job);
int plait_cli_bench_sweep(int argc, char **argv);

static const char bench_usage[] =
    "usage: plait bench train CONFIG [--steps S] [--warmup W] [--csv FILE] [section.key=value ...]\n"
    "       plait bench comm [-n N] --op OP [options] [section.key=value ...]\n"
    "       plait bench sweep CONFIG -n N [--axes LIST] [--AXIS VALUES] [--steps S] [--warmup W]\n"
    "                         [--repeat R] [--max-minutes M] [--csv FILE] [--report DIR] [section.key=value ...]\n"
    "\n"
    "bench sweep: every valid layout of N ranks along the axes (default dp,tp,pp,schedule,cp; all:\n"
    "dp,tp,pp,schedule,chunks,optim,micro_batch,recompute,cp, and ep for a model with experts; also\n"
    "bucket_mb, comm; not sp: the config's [parallel.tp] sequence_parallel is measured; --dp 1,2 bound an\n"
    "axis; cp, context parallelism, varies by itself only for a gpt or llama whose sequence leaves a\n"
    "cp rank 4,096 tokens or more: --cp 1,2 names sizes), each measured R times (default 3, in\n"
    "rounds over all layouts) by 'plait bench train' (S timed steps, default 6, after W warm-up,\n"
    "default 2), ranked by the median run's tokens/s with the\n"
    "spread of the runs and 'plait plan's prediction beside; layouts whose spreads overlap are marked\n"
    "as indistinguishable; invalid layouts are listed with why. A row per run is\n"
    "appended to --csv (default DIR/sweep.csv with --report) as each run ends, each layout's\n"
    "output to CSV.logs/; the same command again continues from it. With neither, nothing is kept:\n"
    "the table is the result (a failed layout's output stays in $TMPDIR and is named).\n"
    "--report DIR writes report.md and PNG plots\n"
    "(gnuplot). --max-minutes starts no layout after M minutes. --cluster, --comm-csv and\n"
    "--mem-limit are plan's (plait help plan). Exit 1 when no layout is valid\n"
    "or one fails.\n"
    "\n"
    "bench train: steady-state training throughput of CONFIG's layout (dp x tp x pp local ranks, as\n"
    "'plait train' starts them): median step time of the slowest rank over S timed steps (default\n"
    "10) after W warm-up steps (default 3), tokens/s, MFU against this machine's measured SGEMM\n"
    "peak, that step's split into compute / communication / idle (adding up to it), bytes each\n"
    "rank sent per step (DP, TP, PP, optimizer) and peak RSS. No checkpoints, no evaluation.\n"
    "--csv appends a row.\n"
    "\n"
    "bench comm:\n"
    "\n"
    "Collective bandwidth and latency in the nccl-tests style: size, count, type, redop, time,\n"
    "algbw, busbw, #wrong (elements differing from the expected result, checked on every\n"
    "iteration) and algo (the algorithm that ran: --algo or [comm] algorithm, auto resolved by\n"
    "size). busbw = algbw x 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce_scatter\n"
    "and alltoall, 1 for broadcast and sendrecv. time is the median of iterations timed alone\n"
    "after a barrier; loop runs the same iterations back to back (nccl-tests' time) and\n"
    "reports total / iters of the slowest rank.\n"
    "\n"
    "  -n N              ranks (processes started by plait's launcher)\n"
    "  --op OP           allreduce | reduce_scatter | allgather | broadcast | alltoall | sendrecv\n"
    "  --min SIZE        smallest size in bytes, e.g. 4K (default 4K)\n"
    "  --max SIZE        largest size (default 256M)\n"
    "  --factor F        size multiplier between rows (default 2)\n"
    "  --warmup W        untimed iterations per size (default 5)\n"
    "  --iters I         timed iterations per size (default 20)\n"
    "  --dtype T         f32 | f64 | f16 | bf16 | i32 | i64 | u8 (default f32)\n"
    "  --redop OP        sum | prod | min | max | avg (default sum)\n"
    "  --algo A          auto | ring | rhd | tree | direct | ordered | hier (default: [comm] algorithm)\n"
    "  --root R          broadcast root (default 0)\n"
    "  --comm NAME       comm plugin (default: [comm] plugin), or 'threads': every rank a thread\n"
    "                    of this process over the in-process transport (with --threads N)\n"
    "  --threads N       ranks of an in-process ('--comm threads') run (default 1)\n"
    "  --mem M           host | cuda | device (default host): where the buffers live. cuda = the\n"
    "                    rank's GPU (device.plugin=cuda; local rank -> ordinal, [device] ordinal);\n"
    "                    device = the [device] plugin's memory (cuda, or sim: the test device);\n"
    "                    results are copied back to be checked. A transport that moves the device's\n"
    "                    memory (nccl) gets the buffers, a host transport (tcp, threads) has them\n"
    "                    staged through pinned host memory ([comm] staging_chunk)\n"
    "  --csv FILE        also write the rows as CSV\n"
    "  --corrupt         flip one element of rank 0's result in every iteration, to see #wrong and\n"
    "                    the exit status catch a wrong result\n"
    "  section.key=value configuration overrides, e.g. comm.timeout=30\n"
    "\n"
    "Exit status: 0 when every row has #wrong 0, 1 otherwise or on error, 2 for usage errors.\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "plait bench comm: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n'plait help bench' lists the options\n");
    return 2;
}

static int dtype_parse(const char *s) {
    for (int i = 0; i < PLAIT_DTYPE_COUNT_V1; i++)
        if (strcmp(s, plait_dtype_name((plait_dtype)i)) == 0) return i;
    return -1;
}

static int redop_parse(const char *s) {
    for (int i = 0; i < PLAIT_REDOP_COUNT_V1; i++)
        if (strcmp(s, plait_redop_name((plait_redop)i)) == 0) return i;
    return -1;
}

/* The open device's buffers for the bench (--mem device). */
static plait_bench_mem device_mem(void) {
    const plait_plugin_desc *d = plait_device_desc_open();
    return (plait_bench_mem){plait_device_mem_kind(), d ? d->name : "device", plait_device_alloc,
                             plait_device_free, plait_device_copy};
}

/* --mem cuda is --mem device with [device] plugin = cuda (a second spelling
 * of it, accepted for the scripts that use it). */
static const char *g_mem_name = "device";

/* A device for --mem: none found is a benchmark that cannot run here.
 * Under --mem cuda the key's origin is --mem itself, already named. */
static void device_advice(const char *after) {
    char why[2048];
    const char *own = "command line 'device.plugin=cuda': ";
    const char *text = plait_last_error();
    if (!strcmp(g_mem_name, "cuda") && !strncmp(text, own, strlen(own))) text += strlen(own);
    snprintf(why, sizeof why, "%s", text);
    plait_set_error(PLAIT_ERR_UNSUPPORTED, "--mem %s: %s; --mem %s measures collectives on that device's memory and "
                                           "needs one (--mem host measures host buffers)%s",
                    g_mem_name, why, g_mem_name, after);
}

/* Open [device] plugin in this process for --mem device/cuda; a device
 * whose memory is host memory (cpu) is refused: there is nothing to stage. */
static plait_status open_device(const plait_config *cfg, int local_rank, plait_bench_mem *mem) {
    plait_status st = plait_device_open(plait_plugin_host(), cfg, local_rank, 1);
    if (st == PLAIT_ERR_UNSUPPORTED) device_advice("");
    else if (st != PLAIT_OK) plait_wrap_error(st, "--mem %s", g_mem_name);
    if (st != PLAIT_OK) return st;
    *mem = device_mem();
    if (mem->kind == PLAIT_MEM_HOST) {
        plait_device_close();
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "--mem device: [device] plugin = %s keeps its memory in host "
                                                         "memory; name a device with its own memory ([device] plugin = "
                                                         "cuda)", mem->name);
    }
    return PLAIT_OK;
}

typedef struct threads_run {
    plait_threads_world *w;
    plait_comm_settings settings;
    plait_bench_comm_opts opts;
    plait_status st[4096];
    char msg[2048];
    uint64_t wrong;
} threads_run;

static void bench_rank(int rank, void *arg) {
    threads_run *t = arg;
    plait_comm *comm = NULL;
    plait_status st = plait_threads_comm_world(t->w, rank, &t->settings, &comm);
    uint64_t wrong = 0;
    if (st == PLAIT_OK) st = plait_bench_comm_run(comm, &t->opts, rank == 0 ? stdout : NULL, &wrong, NULL);
    if (st != PLAIT_OK && !t->msg[0]) snprintf(t->msg, sizeof t->msg, "rank %d: %s", rank, plait_last_error());
    if (rank == 0) t->wrong = wrong;
    t->st[rank] = st;
    plait_comm_free(comm);
}

/* A run over a comm plugin: this process is one rank of the job (started
 * by `plait ... -n N`, mpirun, srun, torchrun, or alone). */
static int bench_job(const plait_config *cfg, const char *plugin, const plait_comm_settings *settings,
                     const plait_bench_comm_opts *opts, int on_device) {
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, plugin);
    /* host buffers need a host transport; device buffers take either (a host
     * transport stages them), checked once the device is open */
    if (!d || (!on_device && plait_comm_plugin_usable(d, PLAIT_MEM_HOST) != PLAIT_OK)) {
        plait_cli_print_error("bench comm");
        return 1;
    }
    plait_job *job = NULL;
    plait_comm *comm = NULL;
    uint64_t wrong = 0;
    plait_bench_comm_opts o = *opts;
    plait_bench_mem mem;
    plait_status st = plait_job_join(cfg, &job);
    if (st == PLAIT_OK && on_device) {
        st = open_device(cfg, plait_job_device_slot(job), &mem);
        o.mem = &mem;
        if (st == PLAIT_OK && plait_comm_plugin_usable(d, PLAIT_MEM_HOST) != PLAIT_OK)
            st = plait_comm_plugin_usable(d, mem.kind);
    }
    if (st == PLAIT_OK) st = plait_comm_create_job_world(job, d->ops, cfg, settings, &comm);
    if (st == PLAIT_OK) st = plait_bench_comm_run(comm, &o, plait_job_rank(job) == 0 ? stdout : NULL, &wrong, NULL);
    if (st != PLAIT_OK) plait_cli_print_error("bench comm");
    plait_comm_free(comm);
    plait_device_close();
    int rank0 = !job || plait_job_rank(job) == 0; /* the job is gone after leave */
    plait_job_leave(job, st != PLAIT_OK);
    if (st == PLAIT_OK && wrong && rank0)
        fprintf(stderr, "plait bench comm: %llu wrong elements\n", (unsigned long long)wrong);
    return st != PLAIT_OK || wrong ? 1 : 0;
}

/* bench comm's command line. */
typedef struct comm_args {
    plait_bench_comm_opts o;
    const char *comm_name, *csv_path;
    int threads, on_device;
    char **over; /* section.key=value, n_over of them (owned) */
    int n_over;
} comm_args;

/* Parse argv into *a; 0, or the usage error's exit code (printed). */
static int parse_comm_args(int argc, char **argv, comm_args *a) {
    *a = (comm_args){.o = {.op = PLAIT_BENCH_OP_COUNT, .min_bytes = 4096, .max_bytes = 256ull << 20, .factor = 2.0,
                           .warmup = 5, .iters = 20, .dtype = PLAIT_F32, .redop = PLAIT_SUM, .algo = PLAIT_ALGO_AUTO}};
    plait_bench_comm_opts *o = &a->o;
    a->over = calloc((size_t)argc + 1, sizeof *a->over);
    if (!a->over) return usage_error("%s", "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(arg, "--corrupt")) { /* the only option without a value */
            o->fault = PLAIT_BENCH_FAULT_FLIP;
            continue;
        }
        int takes = arg[0] == '-' && strcmp(arg, "--") != 0;
        if (takes && !v) return usage_error("%s needs a value", arg);
        if (!strcmp(arg, "--op")) {
            int x = plait_bench_op_parse(v);
            if (x < 0) return usage_error("unknown --op '%s'", v);
            o->op = (plait_bench_op)x;
        } else if (!strcmp(arg, "--min") || !strcmp(arg, "--max")) {
            uint64_t b;
            if (plait_parse_bytes(v, &b) != 0 || b == 0) return usage_error("bad size '%s'", v);
            if (arg[3] == 'i') o->min_bytes = b; else o->max_bytes = b;
        } else if (!strcmp(arg, "--factor")) {
            char *end = NULL;
            o->factor = strtod(v, &end);
            if (!end || *end || !(o->factor > 1.0)) return usage_error("--factor must be > 1, not '%s'", v);
        } else if (!strcmp(arg, "--warmup")) {
            if (plait_cli_parse_int(v, 0, 1000000, &o->warmup)) return usage_error("bad --warmup '%s'", v);
        } else if (!strcmp(arg, "--iters")) {
            if (plait_cli_parse_int(v, 1, 1000000, &o->iters)) return usage_error("bad --iters '%s'", v);
        } else if (!strcmp(arg, "--dtype")) {
            int x = dtype_parse(v);
            if (x < 0) return usage_error("unknown --dtype '%s'", v);
            o->dtype = (plait_dtype)x;
        } else if (!strcmp(arg, "--redop")) {
            int x = redop_parse(v);
            if (x < 0) return usage_error("unknown --redop '%s'", v);
            o->redop = (plait_redop)x;
        } else if (!strcmp(arg, "--algo")) {
            int x = plait_coll_algo_parse(v);
            if (x < 0) return usage_error("unknown --algo '%s'", v);
            o->algo = (plait_coll_algo)x;
        } else if (!strcmp(arg, "--root")) {
            if (plait_cli_parse_int(v, 0, 1 << 30, &o->root)) return usage_error("bad --root '%s'", v);
        } else if (!strcmp(arg, "--comm")) {
            a->comm_name = v;
        } else if (!strcmp(arg, "--threads")) {
            if (plait_cli_parse_int(v, 1, 4096, &a->threads)) return usage_error("bad --threads '%s'", v);
        } else if (!strcmp(arg, "--csv")) {
            a->csv_path = v;
        } else if (!strcmp(arg, "--mem")) {
            if (strcmp(v, "host") && strcmp(v, "device") && strcmp(v, "cuda"))
                return usage_error("--mem is host, cuda or device, not '%s'", v);
            a->on_device = strcmp(v, "host") != 0;
            g_mem_name = a->on_device ? v : "device";
        } else if (!takes && strchr(arg, '=')) {
            a->over[a->n_over++] = argv[i];
            continue;
        } else {
            return usage_error("unknown argument '%s'", arg);
        }
        i++;
    }
    if (o->op == PLAIT_BENCH_OP_COUNT) return usage_error("%s", "--op is required");
    return 0;
}

/* The configuration of the run: the comm plugin's, [device] plugin = cuda
 * for --mem cuda; 0, or the exit code (the error printed). */
static int load_comm_config(const comm_args *a, plait_config **cfg) {
    int cuda = !strcmp(g_mem_name, "cuda");
    static const char *const cuda_first[] = {"device.plugin=cuda", NULL};
    if (plait_cli_load_plugin_config(PLAIT_KIND_COMM, a->comm_name, cuda ? cuda_first : NULL, a->n_over, a->over,
                                     cfg) != PLAIT_OK) {
        plait_cli_print_error("configuration");
        return 2;
    }
    if (cuda && strcmp(plait_config_str(*cfg, "device", "plugin"), "cuda") != 0) {
        const char *where = NULL;
        plait_config_origin(*cfg, "device", "plugin", &where);
        fprintf(stderr, "plait bench comm: --mem cuda puts the buffers on the GPU ([device] plugin = cuda), but %s "
                        "names [device] plugin = %s; use --mem device for that device's memory\n",
                where ? where : "the configuration", plait_config_str(*cfg, "device", "plugin"));
        plait_config_free(*cfg);
        *cfg = NULL;
        return 2;
    }
    return 0;
}

/* `plait bench train CONFIG ... -n N`: a layout that does not fit the ranks
 * -n starts, and what every rank would refuse alone (plait_cli_check_job),
 * are said once, by the launcher (a config error: by the ranks). */
static int bench_train_before_launch(int argc, char **argv, const plait_cli_job_opts *job) {
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0, rc = 0;
    if (!over) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--steps") || !strcmp(argv[i], "--warmup") || !strcmp(argv[i], "--csv")) i++;
        else if (argv[i][0] != '-') plait_cli_take_positional(argv[i], &path, over, &n_over);
    }
    plait_config *cfg = NULL;
    if (path && plait_cli_load_config(path, n_over, over, &cfg) == PLAIT_OK && plait_cli_check_ranks(cfg, job) != PLAIT_OK) {
        plait_cli_print_error("bench train");
        rc = 2;
    }
    if (rc == 0 && cfg && plait_cli_check_job(cfg, "bench train", job->local_ranks > 0) != PLAIT_OK) {
        plait_cli_print_error("bench train");
        rc = 1;
    }
    plait_clear_error();
    plait_config_free(cfg);
    free(over);
    return rc;
}

/* `plait bench comm ... -n N`: options, the configuration and no device for
 * --mem are said once, by the launcher, before any rank starts. */
static int bench_before_launch(int argc, char **argv, const plait_cli_job_opts *job) {
    if (argc >= 2 && strcmp(argv[1], "train") == 0) return bench_train_before_launch(argc - 1, argv + 1, job);
    if (argc < 2 || strcmp(argv[1], "comm") != 0) return 0;
    comm_args a;
    int rc = parse_comm_args(argc - 1, argv + 1, &a);
    int world = job->local_ranks * (job->nnodes > 0 ? job->nnodes : 1);
    if (rc == 0 && a.comm_name && strcmp(a.comm_name, "threads") == 0) {
        fprintf(stderr, "plait bench comm: the in-process transport runs its ranks as threads of one process: use "
                        "--threads N instead of -n\n");
        rc = 2;
    }
    if (rc == 0 && plait_bench_comm_check(&a.o, world) != PLAIT_OK) {
        fprintf(stderr, "plait bench comm: %s; no rank was started\n", plait_last_error());
        rc = 2;
    }
    if (rc == 0 && plait_bench_comm_check_memory(&a.o, world, job->local_ranks, 0) != PLAIT_OK) {
        fprintf(stderr, "plait bench comm: %s; no rank was started\n", plait_last_error());
        rc = 1;
    }
    plait_config *cfg = NULL;
    if (rc == 0) rc = load_comm_config(&a, &cfg);
    int32_t devices = 0;
    plait_status st = rc == 0 && cfg ? plait_device_preflight_count(cfg, &devices) : PLAIT_OK;
    if (st != PLAIT_OK) {
        if (st == PLAIT_ERR_INVALID_CONFIG) plait_wrap_error(st, "--mem %s", g_mem_name);
        else device_advice("; no rank was started");
        plait_cli_print_error("bench comm");
        rc = 1;
    }
    plait_config_free(cfg);
    free(a.over);
    return rc;
}

static int bench_comm(int argc, char **argv) {
    comm_args a;
    int rc = parse_comm_args(argc, argv, &a);
    plait_config *cfg = NULL;
    if (rc == 0) rc = load_comm_config(&a, &cfg);
    free(a.over);
    if (rc != 0) return rc;
    plait_bench_comm_opts o = a.o;
    const char *comm_name = a.comm_name, *csv_path = a.csv_path;
    int threads = a.threads, on_device = a.on_device;
    if (!comm_name) comm_name = plait_config_str(cfg, "comm", "plugin");
    plait_comm_settings settings;
    if (plait_comm_settings_from_config(cfg, &settings) != PLAIT_OK) {
        plait_config_free(cfg);
        plait_cli_print_error("configuration");
        return 2;
    }
    o.transport = comm_name;
    /* a run the launcher started was checked there, for all its ranks */
    int in_process = strcmp(comm_name, "threads") == 0;
    int here = in_process && threads ? threads : 1;
    if (!getenv("PLAIT_RANK") && plait_bench_comm_check_memory(&o, here, here, in_process) != PLAIT_OK) {
        fprintf(stderr, "plait bench comm: %s\n", plait_last_error());
        plait_config_free(cfg);
        return 1;
    }
    FILE *csv = NULL;
    /* rank 0 alone writes the table: every rank checking and truncating
     * the one file would race (a rank could find rank 0's file half
     * written and refuse it as someone else's) */
    plait_job_env env;
    if (csv_path && plait_job_env_detect(NULL, NULL, &env) == PLAIT_OK && env.rank != 0) csv_path = NULL;
    if (csv_path) {
        static const char header[] = "op,ranks,transport,algo,dtype,redop,size_bytes,count,time_us,time_min_us,"
                                     "algbw_GBps,busbw_GBps,wrong,loop_us\n";
        if (plait_out_check_own(csv_path, header, "--csv") != PLAIT_OK ||
            plait_out_fopen(csv_path, "w", &csv) != PLAIT_OK) {
            fprintf(stderr, "plait bench comm: %s\n", plait_last_error());
            plait_config_free(cfg);
            return 1;
        }
        fputs(header, csv);
        o.csv = csv;
    }
    if (strcmp(comm_name, "threads") == 0) {
        if (getenv("PLAIT_RANK")) {
            fprintf(stderr, "plait bench comm: the in-process transport runs its ranks as threads of "
                            "one process: use --threads N instead of -n\n");
            rc = 2;
            goto done;
        }
        threads_run *t = calloc(1, sizeof *t);
        int n = threads ? threads : 1;
        t->w = t ? plait_threads_world_new(n, settings.timeout_s) : NULL;
        if (!t || !t->w) {
            fprintf(stderr, "plait bench comm: out of memory\n");
            free(t);
            rc = 1;
            goto done;
        }
        t->settings = settings;
        t->opts = o;
        plait_bench_mem mem;
        if (on_device) { /* one device for the process, shared by its thread ranks */
            if (open_device(cfg, 0, &mem) != PLAIT_OK) {
                plait_cli_print_error("bench comm");
                plait_threads_world_free(t->w);
                free(t);
                rc = 1;
                goto done;
            }
            t->opts.mem = &mem;
        }
        if (plait_threads_run(n, bench_rank, t) != PLAIT_OK) {
            plait_cli_print_error("bench comm");
            rc = 1;
        } else if (t->msg[0]) {
            fprintf(stderr, "plait: error: bench comm: %s\n", t->msg);
            rc = 1;
        } else if (t->wrong) {
            fprintf(stderr, "plait bench comm: %llu wrong elements\n", (unsigned long long)t->wrong);
            rc = 1;
        }
        plait_threads_world_free(t->w);
        free(t);
        plait_device_close();
    } else {
        rc = bench_job(cfg, comm_name, &settings, &o, on_device);
    }
done:
    if (csv) fclose(csv);
    plait_config_free(cfg);
    return rc;
}

static int cmd_bench(int argc, char **argv, const plait_cli_job_opts *job) {
    if (argc < 2) {
        fprintf(stderr, "%s", bench_usage);
        return 2;
    }
    if (strcmp(argv[1], "comm") == 0) return bench_comm(argc - 1, argv + 1);
    /* argv - 1 is the program's full command line (commands get it from index 1) */
    if (strcmp(argv[1], "train") == 0) return plait_cli_bench_train(argc - 1, argv + 1, argc + 1, argv - 1, job);
    if (strcmp(argv[1], "sweep") == 0) return plait_cli_bench_sweep(argc - 1, argv + 1);
    fprintf(stderr, "plait bench: no benchmark '%s' (available: comm, train, sweep)\n", argv[1]);
    return 2;
}

const plait_command plait_cmd_bench = {"bench", "benchmarks: 'plait bench train' (throughput), 'plait bench comm' (collectives), 'plait bench sweep' (layouts)",
                                       bench_usage, cmd_bench, bench_before_launch};
