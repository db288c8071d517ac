/*
 * `plait train CONFIG --nnodes MIN:MAX`: one elastic launcher per host.
 *
 * The config's dp x tp x pp is the job at MAX hosts; each host runs
 * R = dp x tp x pp / MAX ranks whatever the number of hosts. With H hosts
 * the layout is dp_H = H x R / (tp x pp), tp and pp kept, and the global
 * batch kept through gradient accumulation: the micro-batch is the MAX
 * layout's and accumulation = global / (dp_H x micro), so in deterministic
 * mode every size trains the same micro-batches, bit for bit. Every H in
 * MIN..MAX is checked before anything starts.
 *
 * Each round (elastic/membership.h) this launcher learns its node index and
 * the number of hosts, checks that the round's layout fits its host's
 * memory (every member's verdict is shared: a refusal ends the job before
 * any rank starts, naming what would fit), and starts its R ranks with the
 * round's layout, resuming (run.resume=auto, or the replicas in memory:
 * docs/multi-node.md) on every round after the first. Its replica keeper
 * (elastic/agent.h) outlives the ranks.
 */
#include "cli/cli_elastic.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "cli/cli.h"
#include "cli/memory_check.h"
#include "elastic/agent.h"
#include "elastic/membership.h"
#include "launch/launch.h"
#include "launch/net.h"
#include "launch/restart.h"
#include "layout/batch.h"
#include "runtime/error.h"
#include "train/train_loop.h"

/* The layout of an elastic job with some number of hosts. */
typedef struct shape {
    int ranks;        /* per host (R) */
    int64_t tp, pp;
    int64_t global, micro;
} shape;

static int64_t dp_for(const shape *s, int hosts) { return (int64_t)hosts * s->ranks / (s->tp * s->pp); }

/* Every host count in min..max must give a layout: ranks divisible by
 * tp x pp, the global batch by dp x micro-batch. */
static plait_status check_shapes(const plait_config *cfg, int min, int max, shape *s) {
    int64_t dp = plait_config_int(cfg, "parallel", "dp");
    if (plait_config_int(cfg, "parallel", "cp") > 1 || plait_config_int(cfg, "parallel", "ep") > 1)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "--nnodes %d:%d: an elastic job regroups dp x tp x pp only; [parallel] cp = %lld and "
                               "ep = %lld must be 1 (or give a fixed --nnodes)",
                               min, max, (long long)plait_config_int(cfg, "parallel", "cp"),
                               (long long)plait_config_int(cfg, "parallel", "ep"));
    s->tp = plait_config_int(cfg, "parallel", "tp");
    s->pp = plait_config_int(cfg, "parallel", "pp");
    int64_t world = dp * s->tp * s->pp;
    if (world % max)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "--nnodes %d:%d: the layout's %lld ranks (dp %lld x tp %lld x pp %lld, the job at its "
                               "%d hosts) do not split evenly over %d hosts", min, max, (long long)world,
                               (long long)dp, (long long)s->tp, (long long)s->pp, max, max);
    s->ranks = (int)(world / max);
    plait_batch b;
    plait_status st = plait_batch_solve(plait_config_int(cfg, "data", "global_batch"),
                                        plait_config_int(cfg, "data", "micro_batch"),
                                        plait_config_int(cfg, "data", "accumulation_steps"), dp, &b);
    if (st != PLAIT_OK) return st;
    s->global = b.global_batch;
    s->micro = b.micro_batch;
    for (int h = min; h <= max; h++) {
        if (((int64_t)h * s->ranks) % (s->tp * s->pp))
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "--nnodes %d:%d: with %d hosts the job has %lld ranks (%d per host), not a "
                                   "multiple of tp %lld x pp %lld, which every size keeps", min, max, h,
                                   (long long)h * s->ranks, s->ranks, (long long)s->tp, (long long)s->pp);
        plait_batch hb;
        if (plait_batch_solve(s->global, s->micro, 0, dp_for(s, h), &hb) != PLAIT_OK)
            return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG,
                                    "--nnodes %d:%d: with %d hosts (dp %lld) the global batch of %lld cannot be "
                                    "kept with micro-batches of %lld; choose a global batch that every dp in "
                                    "%lld..%lld x %lld divides", min, max, h, (long long)dp_for(s, h),
                                    (long long)s->global, (long long)s->micro, (long long)dp_for(s, min),
                                    (long long)dp_for(s, max), (long long)s->micro);
        /* the dp plugin's rule in deterministic mode (each rank a whole
         * subtree of the canonical summation tree), checked here for every
         * size rather than when a restart meets it */
        if (plait_config_bool(cfg, "run", "deterministic") && hb.dp > 1 && (hb.accumulation & (hb.accumulation - 1)))
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "--nnodes %d:%d: with %d hosts (dp %lld) each rank would accumulate %lld "
                                   "micro-batches, and [run] deterministic = true with dp > 1 needs a power of "
                                   "two; choose MIN:MAX so that every size gives one (dp 3 and dp 2 never both "
                                   "do), or train without deterministic mode", min, max, h, (long long)hb.dp,
                                   (long long)hb.accumulation);
    }
    return PLAIT_OK;
}

/* The command line's config path and overrides (argv[0] "plait", argv[1]
 * the command), for rebuilding the config of one round. */
typedef struct cmdline {
    const char *path;
    char **over;
    int n_over;
} cmdline;

static int read_cmdline(int argc, char **argv, cmdline *c) {
    c->path = NULL;
    c->n_over = 0;
    c->over = calloc((size_t)argc + 8, sizeof *c->over);
    if (!c->over) return -1;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--progress") == 0) i++;
        else if (argv[i][0] != '-') plait_cli_take_positional(argv[i], &c->path, c->over, &c->n_over);
    }
    return c->path ? 0 : -1;
}

/* The settings that make the config the job with `hosts` hosts. */
typedef struct round_over {
    char dp[48], micro[48], global[48];
    const char *v[4];
} round_over;

static void round_settings(const shape *s, int hosts, round_over *o) {
    snprintf(o->dp, sizeof o->dp, "parallel.dp=%lld", (long long)dp_for(s, hosts));
    snprintf(o->micro, sizeof o->micro, "data.micro_batch=%lld", (long long)s->micro);
    snprintf(o->global, sizeof o->global, "data.global_batch=%lld", (long long)s->global);
    o->v[0] = o->dp;
    o->v[1] = o->micro;
    o->v[2] = o->global;
    o->v[3] = "data.accumulation_steps=0";
}

/* The memory check of the layout with `hosts` hosts on this host:
 * PLAIT_OK, or the refusal (the error set). */
static plait_status fits(const cmdline *c, const shape *s, int hosts) {
    round_over ro;
    round_settings(s, hosts, &ro);
    char **all = calloc((size_t)c->n_over + 5, sizeof *all);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < c->n_over; i++) all[i] = c->over[i];
    for (int i = 0; i < 4; i++) all[c->n_over + i] = (char *)ro.v[i];
    plait_config *cfg = NULL;
    plait_status st = plait_cli_load_config(c->path, c->n_over + 4, all, &cfg);
    if (st == PLAIT_OK) st = plait_cli_memory_check(cfg, c->path, c->n_over + 4, all, s->ranks);
    plait_config_free(cfg);
    free(all);
    return st;
}

/* This host's verdict for a round of `hosts`: NULL when it fits, else the
 * refusal with the number of hosts that would fit (malloc'd). */
static char *verdict(const cmdline *c, const shape *s, int hosts, int max) {
    if (fits(c, s, hosts) == PLAIT_OK) return NULL;
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    size_t cap = 8192;
    char *why = malloc(cap);
    if (!why) return NULL;
    snprintf(why, cap, "on %d host%s (dp %lld), host %s: %s", hosts, hosts == 1 ? "" : "s",
             (long long)dp_for(s, hosts), host, plait_last_error());
    for (int h = hosts + 1; h <= max; h++)
        if (fits(c, s, h) == PLAIT_OK) {
            size_t n = strlen(why);
            snprintf(why + n, cap - n, "; with %d hosts (dp %lld) it fits", h, (long long)dp_for(s, h));
            break;
        }
    plait_clear_error();
    return why;
}

/* What happened to this host's ranks, collected by the launcher's hook. */
typedef struct ends {
    int n, regroup, failed_self;
    plait_attempt_end end;
} ends;

static void rank_ended(void *ctx, int local, int world, int status, int by_launcher, const char *last) {
    ends *e = ctx;
    (void)local;
    e->n++;
    if (WIFEXITED(status) && WEXITSTATUS(status) == PLAIT_RESTART_REGROUP_EXIT) {
        e->regroup++;
        return;
    }
    int failed = (WIFEXITED(status) && WEXITSTATUS(status) != 0) || (WIFSIGNALED(status) && !by_launcher);
    if (!failed) return;
    if (e->end.n_failed < 32) e->end.failed[e->end.n_failed++] = world;
    int waited = plait_error_waited_for(last);
    if (waited >= 0 && e->end.n_blamed < 32) e->end.blamed[e->end.n_blamed++] = waited;
}

/* The rank store of a round: node 0 listens on the store host's address,
 * an ephemeral port (-1 with the error set). */
static int rank_store_socket(const char *host, int *port) {
    struct sockaddr_storage ss;
    socklen_t len = 0;
    if (plait_net_resolve(host, 0, &ss, &len) != PLAIT_OK) return -1;
    int fd = plait_net_listen((struct sockaddr *)&ss, len, 1024);
    if (fd < 0) return -1;
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    getsockname(fd, (struct sockaddr *)&bound, &bl);
    *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                             : ((struct sockaddr_in *)&bound)->sin_port);
    return fd;
}

static int grow_wanted(void *ctx) { return plait_membership_grow_wanted(ctx); }

/* What this host's launcher keeps from round to round. */
typedef struct launcher {
    int min, max, max_restarts;
    int argc;
    char **argv;
    shape s;
    cmdline cl;
    char host[256], what[64]; /* the job's store: host, and the --nnodes it is for */
    int port;
    const char *token;
    int new_dir;              /* the run directory held no checkpoint when the job started */
    plait_membership *m;
    plait_agent *agent;
    char **args;
    int *child;               /* the fds the ranks inherit from the replica keeper */
    const char *grace;        /* PLAIT_LAUNCH_GRACE */
    int code;                 /* the exit code */
} launcher;

/* MAX from Slurm: 0, or the exit code after a message. */
static int max_from_slurm(int min, int *max) {
    const char *n = getenv("SLURM_NNODES") ? getenv("SLURM_NNODES") : getenv("SLURM_JOB_NUM_NODES");
    *max = n ? atoi(n) : 0;
    if (*max < 1) {
        fprintf(stderr, "plait: --nnodes %d: leaves MAX to Slurm, but SLURM_NNODES is not set (give MIN:MAX)\n",
                min);
        return 2;
    }
    if (*max > 256) *max = 256;
    if (min > *max) {
        fprintf(stderr, "plait: --nnodes %d: (MAX from SLURM_NNODES = %d): MIN is larger than MAX\n", min, *max);
        return 2;
    }
    return 0;
}

/* The layout of every size, the command line's config and the job's
 * address: 0, or the exit code after a message (nothing left to free). */
static int read_job(launcher *l, plait_config *cfg) {
    if (check_shapes(cfg, l->min, l->max, &l->s) != PLAIT_OK) {
        plait_cli_print_error("train");
        return 2;
    }
    if (read_cmdline(l->argc, l->argv, &l->cl) != 0) {
        free(l->cl.over);
        fprintf(stderr, "plait: train: no config file on the command line\n");
        return 2;
    }
    l->port = 0;
    l->token = NULL;
    snprintf(l->what, sizeof l->what, "--nnodes %d:%d", l->min, l->max);
    if (plait_cli_job_address(plait_config_str(cfg, "comm", "rendezvous"), l->what, l->host, sizeof l->host,
                              &l->port, &l->token) != PLAIT_OK) {
        plait_cli_print_error("launch");
        free(l->cl.over);
        return 2;
    }
    char out_dir[4096];
    plait_train_out_dir(cfg, out_dir, sizeof out_dir);
    l->new_dir = plait_ckpt_list(out_dir, NULL, 0) == 0;
    return 0;
}

/* Join the job's membership and start the replica keeper: 0, or the exit
 * code after a message (nothing left to free). */
static int join_job(launcher *l, plait_config *cfg) {
    plait_membership_opts mo = {.store_host = l->host,
                                .store_port = l->port,
                                .token = l->token,
                                .min_hosts = l->min,
                                .max_hosts = l->max,
                                .ranks_per_host = l->s.ranks,
                                .join_wait = plait_config_float(cfg, "run", "join_wait"),
                                .join_timeout = plait_config_float(cfg, "run", "join_timeout"),
                                .host_timeout = plait_config_float(cfg, "run", "host_timeout"),
                                .max_restarts = l->max_restarts};
    l->m = NULL;
    l->agent = NULL;
    fprintf(stderr, "plait: elastic: joining the job's membership store at %s:%d\n", l->host, l->port);
    char *fingerprint = plait_config_fingerprint(cfg);
    mo.config_text = fingerprint;
    plait_status opened = plait_membership_open(&mo, &l->m);
    free(fingerprint);
    if (opened != PLAIT_OK) {
        plait_cli_print_error("launch");
        free(l->cl.over);
        return 1;
    }
    if (plait_agent_start(grow_wanted, l->m, &l->agent) != PLAIT_OK) {
        plait_cli_print_error("launch");
        plait_membership_close(l->m);
        free(l->cl.over);
        return 1;
    }
    fprintf(stderr, "plait: elastic: %s, %d..%d hosts of %d rank%s each%s\n", l->what, l->min, l->max, l->s.ranks,
            l->s.ranks == 1 ? "" : "s",
            plait_membership_is_store_host(l->m) ? "; this host serves the job's store" : "");
    return 0;
}

/* Every member's verdict on whether the round's layout fits: 0 all fit,
 * 2 the round was stopped; 1 (a host refused, reported) or -1 (an error)
 * after a message. */
static int share_verdict(launcher *l, const plait_round *r) {
    char *refusal = verdict(&l->cl, &l->s, r->hosts, l->max);
    char why[8192] = "";
    int v = plait_membership_verdicts(l->m, refusal, why, sizeof why);
    free(refusal);
    plait_attempt_end end = {.kind = PLAIT_ATTEMPT_STOPPED};
    if (v == 1) {
        fprintf(stderr, "plait: error: train: the job cannot continue: %s; no rank was started\n", why);
        end.kind = PLAIT_ATTEMPT_REFUSED;
        snprintf(end.message, sizeof end.message, "the layout does not fit: %s", why);
        (void)plait_membership_report(l->m, &end);
        return 1;
    }
    if (v < 0) {
        plait_cli_print_error("launch");
        return -1;
    }
    return v;
}

/* Where the round's ranks meet: 1 with *store_fd (node 0 of several
 * hosts) or *store_port (the others) set, 0 when the round was stopped
 * (`v` 2, or no port was published), -1 after a message. */
static int round_store(launcher *l, const plait_round *r, int v, int *store_fd, int *store_port) {
    int got = 1;
    if (v == 2) {
        got = 0;
    } else if (r->hosts == 1) {
        /* one host: its ranks meet on loopback, as `plait -n` */
    } else if (r->node == 0) {
        *store_fd = rank_store_socket(l->host, store_port);
        if (*store_fd < 0 || plait_membership_set_store_port(l->m, *store_port) != PLAIT_OK) {
            plait_cli_print_error("launch");
            if (*store_fd >= 0) close(*store_fd);
            return -1;
        }
    } else {
        got = plait_membership_store_port(l->m, store_port);
        if (got < 0) {
            plait_cli_print_error("launch");
            return -1;
        }
    }
    return got;
}

/* Run this host's ranks for the round with its layout, the replica keeper
 * attached to them; store_fd goes to the launcher, or is closed here when
 * the keeper cannot attach. */
static plait_status launch_round(launcher *l, const plait_round *r, const round_over *ro, int store_fd,
                                 int store_port, ends *e, plait_launch_result *res) {
    int n = 0;
    for (; n < l->argc; n++) l->args[n] = l->argv[n];
    for (int i = 0; i < 4; i++) l->args[n++] = (char *)ro->v[i];
    if (r->restarts > 0) l->args[n++] = "run.resume=auto";
    l->args[n] = NULL;
    char *env[PLAIT_RESTART_ENV_MAX];
    plait_restart_facts facts = {.attempt = r->restarts, .max_restarts = l->max_restarts, .reason = r->reason,
                                 .new_dir = l->new_dir, .hosts = r->hosts, .changes = r->changes};
    plait_restart_env(&facts, env);
    plait_launch_hooks hk = {.stop_fd = plait_membership_stop_fd(l->m),
                             .store_fd = store_fd,
                             .rank_fds = l->child,
                             .rank_ended = rank_ended,
                             .clean_exit = PLAIT_RESTART_REGROUP_EXIT,
                             .ctx = e};
    plait_launch_opts o = {.nranks = l->s.ranks,
                           .argv = l->args,
                           .extra_env = env,
                           .grace_s = l->grace ? atof(l->grace) : 0,
                           .stdout_fd = -1,
                           .stderr_fd = -1,
                           .nnodes = r->hosts,
                           .node_rank = r->node,
                           .store_host = l->host,
                           .store_port = store_port,
                           .token = l->token,
                           .expect_finished = 1, /* ranks of this program (cli/main.c) */
                           .hooks = &hk};
    plait_status st = plait_agent_attach(l->agent, l->s.ranks, l->child);
    if (st == PLAIT_OK) {
        st = plait_launch_local(&o, res);
        for (int i = 0; i < l->s.ranks; i++) close(l->child[i]);
    } else if (store_fd >= 0) {
        close(store_fd);
    }
    plait_restart_env_free(env);
    return st;
}

/* Tell the membership how this host's ranks ended: 1 when another round
 * follows. */
static int finish_round(launcher *l, const ends *e, const plait_launch_result *res) {
    plait_attempt_end end = e->end;
    if (res->interrupted) {
        l->code = res->exit_code;
        end.kind = PLAIT_ATTEMPT_FAILED;
        snprintf(end.message, sizeof end.message, "host's launcher interrupted: %s", res->message);
        (void)plait_membership_report(l->m, &end);
        return 0;
    }
    if (res->exit_code == 0 && !res->stopped && e->n == l->s.ranks && e->regroup == 0) {
        end.kind = PLAIT_ATTEMPT_OK;
    } else if (e->regroup == e->n && e->n > 0 && !res->stopped) {
        end.kind = PLAIT_ATTEMPT_REGROUP;
    } else if (res->exit_code == PLAIT_RESTART_FINAL_EXIT) { /* no round can mend it: the job ends */
        end.kind = PLAIT_ATTEMPT_REFUSED;
        snprintf(end.message, sizeof end.message, "%s (a restart cannot mend it)",
                 res->message[0] ? res->message : "a rank failed");
        l->code = 1;
    } else if (res->stopped && end.n_failed == 0) {
        end.kind = PLAIT_ATTEMPT_STOPPED;
        snprintf(end.message, sizeof end.message, "%s", plait_membership_stop_reason(l->m));
    } else {
        end.kind = PLAIT_ATTEMPT_FAILED;
        snprintf(end.message, sizeof end.message, "%s", res->message[0] ? res->message : "a rank failed");
    }
    if (plait_membership_report(l->m, &end) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 0;
    }
    if (end.kind == PLAIT_ATTEMPT_OK) {
        l->code = 0;
        return 0;
    }
    if (end.kind == PLAIT_ATTEMPT_REFUSED) {
        fprintf(stderr, "plait: error: the job ends: %s\n", end.message);
        return 0;
    }
    return 1;
}

/* A round stopped before its ranks started: say so, 1 when another round
 * follows. */
static int sit_out_round(launcher *l) {
    plait_attempt_end end = {.kind = PLAIT_ATTEMPT_STOPPED};
    snprintf(end.message, sizeof end.message, "%s", plait_membership_stop_reason(l->m));
    if (plait_membership_report(l->m, &end) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 0;
    }
    return 1;
}

/* One round on this host: join it, agree that its layout fits everywhere,
 * run its ranks (or sit it out) and report how it ended. 1 when another
 * round follows. */
static int run_round(launcher *l, int attempt) {
    plait_round r;
    if (plait_membership_join(l->m, &r) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 0;
    }
    if (r.status == PLAIT_ROUND_FINISHED) {
        fprintf(stderr, "plait: elastic: the job is over (%s)%s\n", r.reason,
                attempt ? "" : "; this host did not train in it");
        l->code = 0;
        return 0;
    }
    if (r.status != PLAIT_ROUND_TRAIN) {
        fprintf(stderr, "plait: error: %s: %s\n",
                r.status == PLAIT_ROUND_DROPPED ? "this host was dropped from the job" : "the job ends", r.reason);
        return 0;
    }
    round_over ro;
    round_settings(&l->s, r.hosts, &ro);
    fprintf(stderr, "plait: elastic: round %d: node %d of %d (%s), dp %lld, accumulation %lld%s%s\n", r.round,
            r.node, r.hosts, r.names, (long long)dp_for(&l->s, r.hosts),
            (long long)(l->s.global / (dp_for(&l->s, r.hosts) * l->s.micro)), r.reason[0] ? "; " : "", r.reason);
    int v = share_verdict(l, &r);
    if (v == 1 || v < 0) return 0;
    int store_fd = -1, store_port = 0;
    int got = round_store(l, &r, v, &store_fd, &store_port);
    if (got < 0) return 0;
    if (got != 1) return sit_out_round(l);
    ends e = {0};
    plait_launch_result res;
    if (launch_round(l, &r, &ro, store_fd, store_port, &e, &res) != PLAIT_OK) {
        plait_cli_print_error("launch");
        return 0;
    }
    return finish_round(l, &e, &res);
}

int plait_cli_launch_elastic(plait_config *cfg, int min, int max, int max_restarts, int argc, char **argv) {
    if (getenv("PLAIT_RANK")) {
        fprintf(stderr, "plait: --nnodes is for each host's launcher: this process is already rank %s of a plait "
                        "job\n", getenv("PLAIT_RANK"));
        return 2;
    }
    if (max == 0 && max_from_slurm(min, &max) != 0) /* "MIN:": the allocation's size */
        return 2;
    launcher l = {.min = min, .max = max, .max_restarts = max_restarts, .argc = argc, .argv = argv};
    int code = read_job(&l, cfg);
    if (code == 0) code = join_job(&l, cfg);
    if (code != 0) return code;
    /* the ranks' command line: argv, the round's layout, a resume */
    l.args = calloc((size_t)argc + 8, sizeof *l.args);
    l.child = calloc((size_t)l.s.ranks, sizeof *l.child);
    l.code = 1;
    l.grace = getenv("PLAIT_LAUNCH_GRACE");
    for (int attempt = 0; l.args && l.child; attempt++)
        if (!run_round(&l, attempt)) break;
    free(l.args);
    free(l.child);
    plait_agent_stop(l.agent);
    if (plait_membership_close(l.m))
        fprintf(stderr, "plait: elastic: every other host's launcher has left or is lost: the store closes\n");
    free(l.cl.over);
    return l.code;
}
