/* `plait <command> -n N` and layouts that need several ranks: the CLI side
 * of the local launcher, on one host or one launcher per host (--nnodes),
 * with automatic restarts of `plait train` (--max-restarts). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/cli_elastic.h"
#include "cli/masters_check.h"
#include "cli/optim_check.h"
#include "cli/memory_check.h"
#include "launch/bind.h"
#include "launch/bootstrap.h"
#include "launch/launch.h"
#include "launch/math_threads.h"
#include "launch/net.h"
#include "launch/restart.h"
#include "launch/slurm_env.h"
#include "layout/mesh.h"
#include "layout/mesh_map.h"
#include "runtime/error.h"
#include "checkpoint/checkpoint.h"
#include "device/device.h"
#include "train/data.h"
#include "train/preflight.h"
#include "train/train_loop.h"

/* "--name V" or "--name=V" at argv[i]: the value (NULL if absent) and how
 * many arguments it took; 0 if argv[i] is not that option. */
static int option_value(char **argv, int argc, int i, const char *name, const char **value) {
    size_t n = strlen(name);
    if (strncmp(argv[i], name, n) != 0) return 0;
    if (argv[i][n] == '=') {
        *value = argv[i] + n + 1;
        return 1;
    }
    if (argv[i][n] != '\0') return 0;
    *value = i + 1 < argc ? argv[i + 1] : NULL;
    return 2;
}

int plait_cli_parse_nnodes(const char *text, int *min, int *max, const char **err) {
    const char *colon = text ? strchr(text, ':') : NULL;
    *min = 0;
    if (!colon) {
        if (plait_cli_parse_int(text, 1, 65536, max) == 0) return 0;
        *err = "--nnodes needs a number of hosts in 1..65536, or MIN:MAX for an elastic job";
        return -1;
    }
    char lo[16];
    size_t n = (size_t)(colon - text);
    if (n == 0 || n >= sizeof lo) {
        *err = "--nnodes MIN:MAX needs MIN, a number of hosts in 1..256";
        return -1;
    }
    memcpy(lo, text, n);
    lo[n] = '\0';
    if (plait_cli_parse_int(lo, 1, 256, min) != 0) {
        *err = "--nnodes MIN:MAX needs MIN, a number of hosts in 1..256";
        return -1;
    }
    *max = 0;
    if (colon[1] && plait_cli_parse_int(colon + 1, 1, 256, max) != 0) {
        *err = "--nnodes MIN:MAX needs MAX, a number of hosts in 1..256 (or nothing: Slurm's SLURM_NNODES)";
        return -1;
    }
    if (*max && *min > *max) {
        *err = "--nnodes MIN:MAX: MIN is larger than MAX (at least MIN hosts, at most MAX)";
        return -1;
    }
    return 0;
}

int plait_cli_take_job_options(int *argc, char **argv, plait_cli_job_opts *o, const char **err) {
    static const struct {
        const char *name;
        int lo, hi;
        const char *msg;
    } opts[] = {{"--nnodes", 1, 65536, NULL},
                {"--node-rank", 0, 65535, "--node-rank needs this host's index in 0..65535"},
                {"--max-restarts", 0, 1000, "--max-restarts needs a number in 0..1000"}};
    *o = (plait_cli_job_opts){.nnodes = 0, .node_rank = -1, .max_restarts = -1};
    int *field[] = {&o->nnodes, &o->node_rank, &o->max_restarts};
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--") == 0) break;
        for (size_t k = 0; k < sizeof opts / sizeof opts[0]; k++) {
            const char *v = NULL;
            int used = option_value(argv, *argc, i, opts[k].name, &v);
            if (!used) continue;
            if (k == 0 ? plait_cli_parse_nnodes(v, &o->nnodes_min, &o->nnodes, err) != 0
                       : plait_cli_parse_int(v, opts[k].lo, opts[k].hi, field[k]) != 0) {
                if (k != 0) *err = opts[k].msg;
                return -1;
            }
            for (int j = i; j + used <= *argc; j++) argv[j] = argv[j + used];
            *argc -= used;
            i--;
            break;
        }
    }
    if (o->nnodes_min > 0 && o->node_rank >= 0) {
        *err = "--node-rank has no place in an elastic job (--nnodes MIN:MAX): each host gets its index when it "
               "joins";
        return -1;
    }
    if (o->nnodes > 0 && o->node_rank >= o->nnodes) {
        *err = "--node-rank must be below --nnodes";
        return -1;
    }
    return 0;
}

/* Fill the multi-host part of `lo` from the options and the environment:
 * this host's index (--node-rank, else SLURM_NODEID under Slurm), rank 0's
 * host and port (`rendezvous`, else MASTER_ADDR/MASTER_PORT, else the first
 * node of a Slurm allocation) and the job's token (PLAIT_JOB_TOKEN). */
static plait_status multi_host(plait_launch_opts *lo, const plait_cli_job_opts *job, const char *rendezvous,
                               char *host, size_t cap) {
    lo->nnodes = job->nnodes;
    lo->node_rank = job->node_rank;
    if (lo->node_rank < 0 && getenv("SLURM_NODEID") && plait_cli_parse_int(getenv("SLURM_NODEID"), 0, 65535, &lo->node_rank))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "SLURM_NODEID='%s' is not a node index", getenv("SLURM_NODEID"));
    if (lo->node_rank < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "--nnodes %d needs --node-rank (this host's index, 0 on the "
                                                         "host of rank 0)", lo->nnodes);
    if (lo->node_rank >= lo->nnodes)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "this host's index %d is not below --nnodes %d",
                               lo->node_rank, lo->nnodes);
    char what[64];
    snprintf(what, sizeof what, "--nnodes %d", lo->nnodes);
    plait_status st = plait_cli_job_address(rendezvous, what, host, cap, &lo->store_port, &lo->token);
    if (st == PLAIT_OK) lo->store_host = host;
    return st;
}

/* Whether the run directory went while the ranks ran: each rank makes it
 * before anything a restart could mend fails, so after a failed attempt it
 * is missing only where it was removed or moved away (rm -rf racing a
 * save can fail the job before its rank 0 sees the directory gone). A
 * restart would make it again and train from step 0 into it. */
static int out_dir_gone(const char *out_dir) {
    struct stat sb;
    return out_dir && out_dir[0] && lstat(out_dir, &sb) != 0 && errno == ENOENT;
}

/* Launch `nranks` local ranks of argv (per host with --nnodes); with
 * max_restarts > 0, relaunch a failed job from its latest complete
 * checkpoint (argv gains run.resume=auto) up to that many times, unless
 * its run directory `out_dir` went (out_dir_gone). `new_dir`: the run
 * directory holds no checkpoint before the first attempt
 * (launch/restart.h). */
static int launch(int nranks, int argc, char **argv, const plait_cli_job_opts *job, const char *rendezvous,
                  int max_restarts, int new_dir, const char *out_dir) {
    if (getenv("PLAIT_RANK")) {
        fprintf(stderr, "plait: -n is for the outer command: this process is already rank %s of a "
                        "plait job\n", getenv("PLAIT_RANK"));
        return 2;
    }
    plait_launch_opts o = {0};
    o.nranks = nranks;
    o.stdout_fd = o.stderr_fd = -1;
    o.expect_finished = 1; /* the ranks are this program, which marks each command's end (cli/main.c) */
    const char *g = getenv("PLAIT_LAUNCH_GRACE");
    o.grace_s = g ? atof(g) : 0;
    char host[256];
    if (job->nnodes > 1 && multi_host(&o, job, rendezvous, host, sizeof host) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 2;
    }
    /* argv plus room for "run.resume=auto" */
    char **args = calloc((size_t)argc + 2, sizeof *args);
    if (!args) {
        fprintf(stderr, "plait: out of memory\n");
        return 1;
    }
    memcpy(args, argv, sizeof *args * (size_t)argc);
    o.argv = args; /* args[0] stays "plait"; the binary is /proc/self/exe */
    int code = 1;
    char reason[sizeof ((plait_launch_result *)0)->message] = "";
    for (int attempt = 0;; attempt++) {
        char *env[PLAIT_RESTART_ENV_MAX];
        plait_restart_facts facts = {.attempt = attempt, .max_restarts = max_restarts, .reason = reason,
                                     .new_dir = new_dir};
        plait_restart_env(&facts, env);
        o.extra_env = env;
        plait_launch_result res;
        plait_status st = plait_launch_local(&o, &res);
        plait_restart_env_free(env);
        if (st != PLAIT_OK) {
            plait_cli_print_error("launch");
            break;
        }
        code = res.exit_code;
        if (code == PLAIT_RESTART_FINAL_EXIT) {
            if (attempt < max_restarts)
                fprintf(stderr, "plait: not restarting: a restart cannot mend this failure (the same configuration "
                                "and run directory would fail again)\n");
            code = 1;
            break;
        }
        if (code == 0 || res.interrupted || attempt >= max_restarts) break;
        if (out_dir_gone(out_dir)) {
            fprintf(stderr,
                    "plait: not restarting: the run directory %s is gone (removed or moved away while the "
                    "job ran); a restart would make it again and train from step 0\n",
                    out_dir);
            break;
        }
        snprintf(reason, sizeof reason, "%s", res.message);
        fprintf(stderr, "plait: restart %d of %d: relaunching %d rank%s from the latest complete checkpoint\n",
                attempt + 1, max_restarts, nranks, nranks == 1 ? "" : "s");
        args[argc] = "run.resume=auto";
    }
    free(args);
    return code;
}

/* `plait train CONFIG -n N`: the restarts the job is given (--max-restarts,
 * else [run] max_restarts), with the run directory and whether it holds a
 * checkpoint yet, as for a layout's launcher (plait_cli_launch_layout). The
 * config was checked by the command's before_launch; one that does not load
 * here is the ranks' to report, and the job gets no restart. */
static int train_restarts(int argc, char **argv, const plait_cli_job_opts *job, int *new_dir, char *out_dir,
                          size_t cap) {
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0, restarts = job->max_restarts;
    if (!over) return restarts > 0 ? restarts : 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--progress") == 0) i++;
        else if (argv[i][0] != '-') plait_cli_take_positional(argv[i], &path, over, &n_over);
    }
    plait_config *cfg = NULL;
    if (path && plait_cli_load_config(path, n_over, over, &cfg) == PLAIT_OK) {
        if (restarts < 0) restarts = (int)plait_config_int(cfg, "run", "max_restarts");
        if (restarts > 0) {
            plait_train_out_dir(cfg, out_dir, cap);
            *new_dir = plait_ckpt_list(out_dir, NULL, 0) == 0;
        }
    }
    plait_clear_error();
    plait_config_free(cfg);
    free(over);
    return restarts > 0 ? restarts : 0;
}

int plait_cli_launch(int nranks, int argc, char **argv, const plait_cli_job_opts *job) {
    if (argc > 1 && strcmp(argv[1], "train") == 0) {
        int new_dir = 0;
        char out_dir[4096] = "";
        int restarts = train_restarts(argc, argv, job, &new_dir, out_dir, sizeof out_dir);
        return launch(nranks, argc, argv, job, NULL, restarts, new_dir, out_dir);
    }
    if (job->max_restarts > 0) {
        fprintf(stderr, "plait: --max-restarts is for `plait train` (a restart resumes from a checkpoint)\n");
        return 2;
    }
    return launch(nranks, argc, argv, job, NULL, 0, 0, NULL);
}

/* NCCL drives one GPU per rank: ranks of one host sharing a device under
 * [comm] plugin = nccl are refused before any rank starts (NCCL does not
 * support it and may hang), as the nccl plugin refuses them before NCCL's
 * init where plait's launcher did not start the ranks. Each rank's device
 * is [device] ordinal, or local rank modulo the `devices` visible. */
static int nccl_would_share_a_gpu(const plait_config *cfg, const char *context, int per_host, int32_t devices) {
    const char *dev = plait_config_str(cfg, "device", "plugin");
    if (strcmp(plait_config_str(cfg, "comm", "plugin"), "nccl") != 0 || strcmp(dev, "cpu") == 0 || per_host < 2)
        return 0;
    int64_t ordinal = plait_config_int(cfg, "device", "ordinal");
    if (ordinal < 0 && per_host <= devices) return 0;
    if (ordinal >= 0)
        fprintf(stderr, "plait: %s: %d ranks on this host would all drive %s device %lld ([device] ordinal)",
                context, per_host, dev, (long long)ordinal);
    else
        fprintf(stderr, "plait: %s: %d ranks on this host would share %d %s device%s", context, per_host, (int)devices,
                dev, devices == 1 ? "" : "s");
    fprintf(stderr, " under [comm] plugin = nccl: NCCL does not support two ranks on one GPU and may hang, so no rank "
                    "was started; start at most one rank per GPU (%d here; [device] ordinal = -1 gives each local rank "
                    "its own), or share GPUs over [comm] plugin = tcp, which stages device buffers through host "
                    "memory\n", (int)devices);
    return 1;
}

/* The launcher options with [run] nnodes for a --nnodes not given (the
 * option wins): 0, or -1 with the error set naming the key. */
static int job_nnodes(const plait_config *cfg, const plait_cli_job_opts *given, plait_cli_job_opts *j) {
    *j = *given;
    const char *text = plait_config_str(cfg, "run", "nnodes");
    if (j->nnodes > 0 || j->nnodes_min > 0 || !text || !*text) return 0;
    const char *err = NULL;
    if (plait_cli_parse_nnodes(text, &j->nnodes_min, &j->nnodes, &err) != 0) {
        const char *where = "";
        plait_config_origin(cfg, "run", "nnodes", &where);
        plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[run] nnodes = '%s' (%s): %s", text, where, err + strlen("--nnodes "));
        return -1;
    }
    return 0;
}

plait_status plait_cli_check_ranks(const plait_config *cfg, const plait_cli_job_opts *job) {
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    if (job->local_ranks < 1 || job->nnodes_min > 0 || plait_mesh_shape(cfg, sizes, axes) != PLAIT_OK) {
        plait_clear_error(); /* a bad layout is the ranks' to report, with the rest of the config */
        return PLAIT_OK;
    }
    int nodes = job->nnodes > 1 ? job->nnodes : 1, want = sizes[0] * sizes[1] * sizes[2] * sizes[3];
    char text[96];
    if ((int64_t)job->local_ranks * nodes == want) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "[parallel] %s = %d ranks, but -n %d%s starts %lld; set the sizes so their product is "
                           "the ranks started (or give -n %d); no rank was started",
                           plait_mesh_sizes_text(sizes, text, sizeof text), want, job->local_ranks,
                           nodes > 1 ? " on each host" : "", (long long)job->local_ranks * nodes,
                           want % nodes ? want : want / nodes);
}

plait_status plait_cli_check_memory(plait_config *cfg, const char *path, int n_over, char *const *over,
                                    const plait_cli_job_opts *given) {
    if (getenv("PLAIT_RANK")) return PLAIT_OK; /* its launcher checked */
    plait_cli_job_opts merged;
    if (job_nnodes(cfg, given, &merged) != 0) return PLAIT_ERR_INVALID_CONFIG;
    const plait_cli_job_opts *job = &merged;
    if (job->nnodes_min > 0) return PLAIT_OK; /* each round checks its own layout (cli_elastic.c) */
    int64_t world = plait_mesh_world_size(cfg);
    int local = (int)world;
    plait_job_env env;
    if (job->nnodes > 1)
        local = (int)(world / job->nnodes);
    else if (job->nnodes < 1 &&
             plait_job_env_detect(NULL, plait_config_str(cfg, "comm", "rendezvous"), &env) == PLAIT_OK &&
             env.launcher != PLAIT_LAUNCHER_NONE && env.local_size > 0)
        local = env.local_size;
    plait_clear_error();
    return plait_cli_memory_check(cfg, path, n_over, over, local);
}

/* Which ranks share this host's NUMA nodes and NVLink islands, and how the
 * layout's groups fall on hosts, NUMA nodes and islands (every host taken
 * to be like this one: the launcher sees its own). */
static void print_mesh_map(const plait_config *cfg, int local, const plait_topology *t, const plait_rank_place *p) {
    int sizes[PLAIT_MESH_AXES], axes[PLAIT_MESH_AXES];
    int64_t world = plait_mesh_world_size(cfg);
    if (plait_mesh_shape(cfg, sizes, axes) != PLAIT_OK || world < 2 || world % local || world > 4096) {
        plait_clear_error();
        return;
    }
    char text[2048];
    plait_mesh_map_node_text(sizes, axes, t, p, local, NULL, text, sizeof text);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) fprintf(stderr, "plait:   %s\n", line);
}

int plait_cli_print_placement(const plait_config *cfg, int local, const char *context) {
    const char *mt = getenv("PLAIT_MATH_THREADS");
    int given = (int)plait_config_int(cfg, "run", "threads");
    plait_bind_request req = {.mode = plait_config_str(cfg, "run", "bind"),
                              .use_gpus = strcmp(plait_config_str(cfg, "device", "plugin"), "cpu") != 0,
                              .ordinal = (int)plait_config_int(cfg, "device", "ordinal"),
                              .local_ranks = local,
                              .threads = plait_math_threads_rule(given > 0 ? given
                                                                 : mt      ? atoi(mt)
                                                                           : 0,
                                                                 local)};
    plait_topology *topo = NULL;
    plait_rank_place *places = NULL;
    plait_status st = plait_bind_print_plan(&req, stderr, &topo, &places);
    if (st != PLAIT_OK) {
        const char *where = NULL;
        plait_config_origin(cfg, "run", "bind", &where);
        plait_wrap_error(st, "%s", where ? where : "[run] bind");
        plait_cli_print_error(context);
        return 1;
    }
    print_mesh_map(cfg, local, topo, places);
    free(places);
    plait_topology_free(topo);
    return 0;
}

plait_status plait_cli_check_job(plait_config *cfg, const char *context, int inputs) {
    plait_status st = plait_layout_preflight(cfg);
    if (st == PLAIT_OK) st = plait_cli_check_masters(cfg);
    if (st == PLAIT_OK) st = plait_cli_check_optim(cfg);
    if (st != PLAIT_OK || !inputs) return st;
    if (strcmp(context, "train") != 0) return plait_data_check_files(cfg);
    st = plait_train_check_trace(cfg);
    return st == PLAIT_OK ? plait_train_check_inputs(cfg) : st;
}

int plait_cli_launch_layout(plait_config *cfg, const char *context, int argc, char **argv,
                            const plait_cli_job_opts *given, int *exit_code) {
    plait_cli_job_opts merged;
    if (job_nnodes(cfg, given, &merged) != 0) {
        plait_cli_print_error(context);
        *exit_code = 2;
        plait_config_free(cfg);
        return 1;
    }
    const plait_cli_job_opts *job = &merged;
    int64_t world = plait_mesh_world_size(cfg);
    int restarts = strcmp(context, "train") == 0 ? (int)plait_config_int(cfg, "run", "max_restarts") : 0;
    if (job->max_restarts >= 0) restarts = job->max_restarts;
    if (job->nnodes_min > 0 && strcmp(context, "train") != 0) {
        fprintf(stderr, "plait: --nnodes MIN:MAX is for `plait train` (an elastic job resumes from checkpoints)\n");
        *exit_code = 2;
        plait_config_free(cfg);
        return 1;
    }
    if (job->max_restarts > 0 && strcmp(context, "train") != 0) {
        fprintf(stderr, "plait: --max-restarts is for `plait train` (a restart resumes from a checkpoint)\n");
        *exit_code = 2;
        plait_config_free(cfg);
        return 1;
    }
    /* no device of [device] plugin's kind: stop before any rank starts (the
     * count never creates a driver context here, so forking stays safe) */
    int32_t devices = 0;
    plait_status dst = plait_device_preflight_count(cfg, &devices);
    if (dst != PLAIT_OK) {
        if (dst != PLAIT_ERR_INVALID_CONFIG) {
            char why[2048];
            snprintf(why, sizeof why, "%s", plait_last_error());
            plait_set_error(dst, "%s; no rank was started (use [device] plugin = cpu to train on the CPU)", why);
        }
        plait_cli_print_error(context);
        *exit_code = 1;
        plait_config_free(cfg);
        return 1;
    }
    plait_job_env env;
    /* --nnodes (even 1) makes this process one host's launcher whatever the
     * environment says (under `srun --ntasks-per-node=1` it is a Slurm task) */
    if (job->nnodes < 1 && job->nnodes_min < 1 &&
        ((world <= 1 && restarts <= 0) || plait_job_env_detect(NULL, plait_config_str(cfg, "comm", "rendezvous"), &env) != PLAIT_OK ||
         env.launcher != PLAIT_LAUNCHER_NONE))
        return 0;
    int nodes = job->nnodes > 1 ? job->nnodes : 1;
    if ((job->nnodes >= 1 || job->nnodes_min > 0) && getenv("PLAIT_RANK")) {
        fprintf(stderr, "plait: --nnodes is for each host's launcher: this process is already rank %s of a plait "
                        "job\n", getenv("PLAIT_RANK"));
        *exit_code = 2;
        plait_config_free(cfg);
        return 1;
    }
    /* a layout mistake is reported once, here, not by every rank */
    if (plait_cli_check_job(cfg, context, 1) != PLAIT_OK) {
        plait_cli_print_error(context);
        *exit_code = 1;
    } else if (job->nnodes_min > 0) {
        *exit_code = plait_cli_launch_elastic(cfg, job->nnodes_min, job->nnodes, restarts, argc, argv);
    } else if (nccl_would_share_a_gpu(cfg, context, (int)(world / nodes), devices)) {
        *exit_code = 1;
    } else if (world % nodes) {
        fprintf(stderr, "plait: %s: the layout's %lld ranks (dp x tp x pp) do not split evenly over --nnodes %d\n",
                context, (long long)world, nodes);
        *exit_code = 2;
    } else {
        char rdv[300];
        snprintf(rdv, sizeof rdv, "%s", plait_config_str(cfg, "comm", "rendezvous"));
        int new_dir = 0;
        char out_dir[4096] = "";
        if (restarts > 0) {
            plait_train_out_dir(cfg, out_dir, sizeof out_dir);
            new_dir = plait_ckpt_list(out_dir, NULL, 0) == 0;
        }
        *exit_code = plait_cli_print_placement(cfg, (int)(world / nodes), context)
                         ? 2
                         : launch((int)(world / nodes), argc, argv, job, rdv, restarts, new_dir, out_dir);
    }
    plait_config_free(cfg);
    return 1;
}
