/* Launcher detection: rank, size and the store's location from the
 * environment (see bootstrap.h for the precedence). Pure functions. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/bootstrap.h"
#include "launch/hmac_sha256.h"
#include "launch/net.h"
#include "launch/slurm_env.h"
#include "runtime/error.h"

extern char **environ;


/* Parse an integer variable; -1 if absent; -2 (error set) if malformed. */
static int env_int(char *const *envp, const char *name, int lo, int hi) {
    const char *v = plait_env_lookup(envp, name);
    if (!v) return -1;
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        plait_set_error(PLAIT_ERR_INVALID_CONFIG, "environment variable %s='%s' is not an integer in %d..%d",
                        name, v, lo, hi);
        return -2;
    }
    return (int)x;
}

const char *plait_job_launcher_name(plait_job_launcher launcher) {
    switch (launcher) {
    case PLAIT_LAUNCHER_NONE: return "single process";
    case PLAIT_LAUNCHER_PLAIT: return "plait -n";
    case PLAIT_LAUNCHER_MPI: return "mpirun";
    case PLAIT_LAUNCHER_SLURM: return "srun";
    case PLAIT_LAUNCHER_TORCHRUN: return "torchrun-style environment";
    }
    return "?";
}

const char *plait_job_env_launcher(const plait_job_env *env, char *buf, size_t cap) {
    if (env->launcher == PLAIT_LAUNCHER_PLAIT && env->nodes > 1)
        snprintf(buf, cap, "plait --nnodes (%d hosts)", env->nodes);
    else
        snprintf(buf, cap, "%s", plait_job_launcher_name(env->launcher));
    return buf;
}

void plait_job_env_identity(const plait_job_env *env, char out[PLAIT_JOB_IDENTITY_CHARS + 1]) {
    out[0] = '\0';
    if (env->launcher == PLAIT_LAUNCHER_NONE) return;
    /* keyed by the token: a lock file or a log may show the digest, which
     * tells nothing of the secret */
    const char *name = plait_job_launcher_name(env->launcher);
    const void *parts[] = {"plait job identity", name, env->job_id};
    const size_t lens[] = {sizeof "plait job identity", strlen(name) + 1, strlen(env->job_id)};
    unsigned char mac[PLAIT_SHA256_BYTES];
    plait_hmac_sha256(env->token, strlen(env->token), parts, lens, 3, mac);
    plait_net_hex(mac, PLAIT_JOB_IDENTITY_CHARS / 2, out);
}

#define BIG 1000000

/* Fill rank/size/local facts for one launcher's variable names. */
static plait_status read_ranks(char *const *envp, plait_job_env *e, const char *rank_var,
                               const char *size_var, const char *lrank_var, const char *lsize_var) {
    int rank = env_int(envp, rank_var, 0, BIG);
    int size = env_int(envp, size_var, 1, BIG);
    if (rank == -2 || size == -2) return PLAIT_ERR_INVALID_CONFIG;
    if (size < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s is set but %s is not; the %s launch is incomplete",
                               rank_var, size_var, plait_job_launcher_name(e->launcher));
    if (rank >= size)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s=%d is not below %s=%d", rank_var, rank,
                               size_var, size);
    e->rank = rank;
    e->size = size;
    e->local_rank = lrank_var ? env_int(envp, lrank_var, 0, BIG) : -1;
    e->local_size = lsize_var ? env_int(envp, lsize_var, 1, BIG) : -1;
    if (e->local_rank == -2 || e->local_size == -2) return PLAIT_ERR_INVALID_CONFIG;
    return PLAIT_OK;
}

static void set_job_id(plait_job_env *e, const char *kind, const char *a, const char *b) {
    if (!a || !*a) return;
    char id[160];
    snprintf(id, sizeof id, "%s-%s%s%s", kind, a, b ? "." : "", b ? b : "");
    /* file-name safe */
    for (char *p = id; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '.' || *p == '_'))
            *p = '_';
    snprintf(e->job_id, sizeof e->job_id, "%s", id);
}

/* The ranks as the launcher that started this process gives them (none:
 * one process alone), and its job id. */
static plait_status read_launcher(char *const *envp, plait_job_env *e) {
    plait_status st = PLAIT_OK;
    if (plait_env_lookup(envp, "PLAIT_RANK")) {
        e->launcher = PLAIT_LAUNCHER_PLAIT;
        st = read_ranks(envp, e, "PLAIT_RANK", "PLAIT_WORLD_SIZE", "PLAIT_LOCAL_RANK", "PLAIT_LOCAL_SIZE");
        int nodes = env_int(envp, "PLAIT_NNODES", 1, BIG); /* set by a launcher of a multi-host job */
        if (nodes == -2) return PLAIT_ERR_INVALID_CONFIG;
        e->all_local = nodes <= 1;
        e->nodes = nodes > 1 ? nodes : 1;
    } else if (plait_env_lookup(envp, "OMPI_COMM_WORLD_RANK")) {
        e->launcher = PLAIT_LAUNCHER_MPI;
        st = read_ranks(envp, e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                        "OMPI_COMM_WORLD_LOCAL_SIZE");
        const char *nodes = plait_env_lookup(envp, "OMPI_MCA_orte_num_nodes");
        e->all_local = (e->local_size > 0 && e->local_size == e->size) || (nodes && strcmp(nodes, "1") == 0);
        const char *jid = plait_env_lookup(envp, "OMPI_MCA_ess_base_jobid");
        if (!jid) jid = plait_env_lookup(envp, "PMIX_NAMESPACE");
        set_job_id(e, "mpi", jid, NULL);
    } else if (plait_env_lookup(envp, "SLURM_PROCID") && plait_env_lookup(envp, "SLURM_STEP_ID")) {
        e->launcher = PLAIT_LAUNCHER_SLURM;
        st = read_ranks(envp, e, "SLURM_PROCID",
                        plait_env_lookup(envp, "SLURM_NTASKS") ? "SLURM_NTASKS" : "SLURM_NPROCS", "SLURM_LOCALID",
                        NULL);
        const char *nodes = plait_env_lookup(envp, "SLURM_STEP_NUM_NODES");
        if (!nodes) nodes = plait_env_lookup(envp, "SLURM_NNODES");
        e->all_local = nodes && strcmp(nodes, "1") == 0;
        set_job_id(e, "slurm", plait_env_lookup(envp, "SLURM_JOB_ID"), plait_env_lookup(envp, "SLURM_STEP_ID"));
    } else if (plait_env_lookup(envp, "RANK") && plait_env_lookup(envp, "WORLD_SIZE")) {
        e->launcher = PLAIT_LAUNCHER_TORCHRUN;
        st = read_ranks(envp, e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
        e->all_local = e->local_size > 0 && e->local_size == e->size;
        const char *port = plait_env_lookup(envp, "MASTER_PORT");
        set_job_id(e, "torch", port ? port : plait_env_lookup(envp, "TORCHELASTIC_RUN_ID"),
                   port ? plait_env_lookup(envp, "TORCHELASTIC_RUN_ID") : NULL);
    } else {
        e->launcher = PLAIT_LAUNCHER_NONE;
        e->rank = 0;
        e->size = 1;
        e->local_rank = 0;
        e->local_size = 1;
        e->all_local = 1;
    }
    return st;
}

/* Where the job's store is: `plait -n`'s variables, [comm] rendezvous, MASTER_ADDR and
 * MASTER_PORT, or srun's first node; without a token or an address, only a job on
 * this one host may use the private rendezvous file. */
static plait_status find_store(char *const *envp, const char *rendezvous, const char *token, plait_job_env *e) {
    plait_status st = PLAIT_OK;
    const char *addr = NULL, *what = NULL;
    char joined[300];
    if (e->launcher == PLAIT_LAUNCHER_PLAIT) {
        addr = plait_env_lookup(envp, "PLAIT_STORE_ADDR");
        what = "PLAIT_STORE_ADDR";
        if (!addr)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "PLAIT_RANK is set but PLAIT_STORE_ADDR is not: "
                                                             "was this process started by `plait -n`?");
        if (!token)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "PLAIT_RANK is set but PLAIT_JOB_TOKEN is not: "
                                                             "was this process started by `plait -n`?");
        int fd = env_int(envp, "PLAIT_STORE_FD", 0, 1 << 20);
        if (fd == -2) return PLAIT_ERR_INVALID_CONFIG;
        e->store_fd = e->rank == 0 ? fd : -1;
    } else if (rendezvous && *rendezvous) {
        addr = rendezvous;
        what = "[comm] rendezvous";
    } else if (e->launcher != PLAIT_LAUNCHER_NONE && plait_env_lookup(envp, "MASTER_ADDR")) {
        if (!plait_env_lookup(envp, "MASTER_PORT"))
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "MASTER_ADDR is set but MASTER_PORT is not");
        snprintf(joined, sizeof joined, "%s%s%s:%s", strchr(plait_env_lookup(envp, "MASTER_ADDR"), ':') ? "[" : "",
                 plait_env_lookup(envp, "MASTER_ADDR"), strchr(plait_env_lookup(envp, "MASTER_ADDR"), ':') ? "]" : "",
                 plait_env_lookup(envp, "MASTER_PORT"));
        addr = joined;
        what = "MASTER_ADDR/MASTER_PORT";
    } else if (e->launcher == PLAIT_LAUNCHER_SLURM && !e->all_local) {
        /* srun over several nodes and nobody exported MASTER_ADDR: rank 0
         * runs on the step's first node */
        char host[256];
        int port = 0;
        st = plait_slurm_store_address(envp, host, sizeof host, &port);
        if (st != PLAIT_OK) return st;
        snprintf(joined, sizeof joined, "%s%s%s:%d", strchr(host, ':') ? "[" : "", host, strchr(host, ':') ? "]" : "",
                 port);
        addr = joined;
        what = "SLURM_STEP_NODELIST (first node)";
    }
    if (addr) {
        st = plait_net_split_hostport(addr, what, e->store_host, sizeof e->store_host, &e->store_port);
        if (st != PLAIT_OK) return st;
        e->store_source = what;
    }
    if (e->launcher == PLAIT_LAUNCHER_NONE && !addr) {
        e->store_source = "in-process";
    } else if (!e->token[0] || !addr) {
        /* Missing token or address: only a job on this one host may use the
         * private rendezvous file. */
        if (!e->all_local) {
            if (!addr)
                return plait_set_error(
                    PLAIT_ERR_INVALID_CONFIG,
                    "the ranks of this %s job run on several hosts and nothing says where rank 0's "
                    "store is: set [comm] rendezvous = <rank 0's host>:<free port> (or MASTER_ADDR and "
                    "MASTER_PORT) and the same secret PLAIT_JOB_TOKEN on every rank",
                    plait_job_launcher_name(e->launcher));
            return plait_set_error(
                PLAIT_ERR_INVALID_CONFIG,
                "PLAIT_JOB_TOKEN is not set: a job whose ranks run on several hosts needs the same "
                "secret on every rank, e.g. export PLAIT_JOB_TOKEN=$(head -c 24 /dev/urandom | base64) "
                "before starting it (store address from %s)", what);
        }
        if (!e->job_id[0])
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "cannot tell this %s job apart from others on this host (no job id "
                                   "in the environment): set PLAIT_JOB_TOKEN and [comm] rendezvous",
                                   plait_job_launcher_name(e->launcher));
        e->store_source = "private rendezvous file";
    }
    return PLAIT_OK;
}

plait_status plait_job_env_detect(char *const *envp, const char *rendezvous, plait_job_env *out) {
    if (!envp) envp = environ;
    plait_job_env e;
    memset(&e, 0, sizeof e);
    e.size = 1;
    e.local_rank = e.local_size = -1;
    e.store_fd = -1;
    plait_status st = read_launcher(envp, &e);
    if (st != PLAIT_OK) return st;
    if (e.local_rank >= 0 && e.local_size > 0 && e.local_rank >= e.local_size)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "the launcher's local rank %d is not below its local size %d",
                               e.local_rank, e.local_size);

    int mt = env_int(envp, "PLAIT_MATH_THREADS", 1, 4096);
    if (mt == -2) return PLAIT_ERR_INVALID_CONFIG;
    e.math_threads = mt > 0 ? mt : 0;

    const char *token = plait_env_lookup(envp, "PLAIT_JOB_TOKEN");
    if (token) {
        if (!*token || strlen(token) > PLAIT_STORE_MAX_TOKEN)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "PLAIT_JOB_TOKEN must be 1..%d bytes",
                                   PLAIT_STORE_MAX_TOKEN);
        snprintf(e.token, sizeof e.token, "%s", token);
    }

    st = find_store(envp, rendezvous, token, &e);
    if (st != PLAIT_OK) return st;
    *out = e;
    return PLAIT_OK;
}
