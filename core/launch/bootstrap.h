/*
 * Joining the job: who am I (rank, world size, rank on this host), where is
 * the job's rendezvous store, and the plait_bootstrap (SDK, comm.h) that comm
 * plugins use to exchange addresses while building a communicator.
 *
 * Where rank, size and the store come from, in this order:
 *   1. plait's own launcher (`plait <command> -n N`): PLAIT_RANK,
 *      PLAIT_WORLD_SIZE, PLAIT_LOCAL_RANK, PLAIT_LOCAL_SIZE, PLAIT_STORE_ADDR
 *      (host:port), PLAIT_JOB_TOKEN; rank 0 also inherits the store's
 *      listening socket (PLAIT_STORE_FD), so no port can be taken in between.
 *      PLAIT_NNODES > 1: one such launcher per host (`--nnodes`), so the
 *      ranks do not all run here.
 *   2. Open MPI's mpirun: OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE.
 *   3. Slurm's srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NNODES
 *      (only inside a job step, i.e. with SLURM_STEP_ID set; a batch script
 *      itself is not a rank).
 *   4. torchrun-style: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
 *      MASTER_ADDR, MASTER_PORT.
 *   5. none of these: a single process (rank 0 of 1).
 *
 * The store (hosted by rank 0, which binds the address below) is found at:
 *   PLAIT_STORE_ADDR (plait launcher), else `[comm] rendezvous` = host:port,
 *   else MASTER_ADDR:MASTER_PORT, else for srun over several nodes the
 *   first node of SLURM_STEP_NODELIST (launch/slurm_env.h), else — only when the launcher says every
 *   rank runs on this host (mpirun/srun on one node) — through a private
 *   rendezvous file: rank 0 binds 127.0.0.1 on a free port and publishes the
 *   port and a fresh random token in
 *   $XDG_RUNTIME_DIR/plait/ (or /tmp/plait-<uid>/, mode 0700) as
 *   job-<launcher>-<job id>.rdv (mode 0600); the others wait for that file.
 *   Rank 0 deletes it as soon as every rank has joined.
 * The token is PLAIT_JOB_TOKEN when set (multi-host jobs must set the same
 * secret on every rank); otherwise the private file provides it; a
 * multi-host job without one is refused with a message saying what to set.
 *
 * Local rank and size are computed from what every rank reports at join
 * (hostname + kernel boot id), so they are right for every launcher.
 */
#ifndef PLAIT_CORE_BOOTSTRAP_H
#define PLAIT_CORE_BOOTSTRAP_H

#include <plait/comm.h>
#include "launch/bind.h"
#include "launch/store.h"

typedef struct plait_config plait_config;

typedef enum plait_job_launcher {
    PLAIT_LAUNCHER_NONE = 0,    /* one process, no launcher */
    PLAIT_LAUNCHER_PLAIT = 1,   /* plait -n N */
    PLAIT_LAUNCHER_MPI = 2,     /* Open MPI mpirun */
    PLAIT_LAUNCHER_SLURM = 3,   /* Slurm srun */
    PLAIT_LAUNCHER_TORCHRUN = 4 /* RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT */
} plait_job_launcher;

/* What the environment says, before any network activity. */
typedef struct plait_job_env {
    plait_job_launcher launcher;
    int rank, size;
    int local_rank, local_size;  /* as the launcher says; -1 if it does not */
    int all_local;               /* 1 if the launcher says every rank runs on this host */
    int nodes;                   /* plait's launchers: hosts of the job (PLAIT_NNODES; 1 for -n), else 0 */
    char store_host[256];        /* "" = not given */
    int store_port;
    const char *store_source;    /* "PLAIT_STORE_ADDR", "[comm] rendezvous", "MASTER_ADDR/MASTER_PORT",
                                    "SLURM_STEP_NODELIST (first node)",
                                    "private rendezvous file", or "in-process" (single process) */
    int store_fd;                /* inherited listening socket for rank 0, else -1 */
    char token[PLAIT_STORE_MAX_TOKEN + 1]; /* "" = not given */
    char job_id[160];            /* names the private rendezvous file; "" if unknown */
    int math_threads;            /* PLAIT_MATH_THREADS, 0 if unset */
} plait_job_env;

/* Read the environment (`envp`, NULL = the process environment) and the
 * `[comm] rendezvous` value (NULL or "" = unset). Pure: no I/O, no side
 * effects. Fails with PLAIT_ERR_INVALID_CONFIG naming the variable when a
 * value is malformed or contradictory (rank >= size, ...). */
plait_status plait_job_env_detect(char *const *envp, const char *rendezvous, plait_job_env *out);

/* A name every rank of one job derives alike from the environment alone,
 * before any rank has met another: a digest of the launcher, its job id
 * and the job's token (so the token itself never shows). Two live jobs
 * differ unless they share a launcher's job id and PLAIT_JOB_TOKEN (one
 * token exported for several multi-host jobs). A single process (no
 * launcher) has none: "". Pure. */
#define PLAIT_JOB_IDENTITY_CHARS 24
void plait_job_env_identity(const plait_job_env *env, char out[PLAIT_JOB_IDENTITY_CHARS + 1]);

/* Name of a launcher for messages ("plait -n", "mpirun", "srun", ...). */
const char *plait_job_launcher_name(plait_job_launcher launcher);
/* What started this process's job, as messages name it: the launcher's
 * name, and for plait's launchers of several hosts (--nnodes) "plait
 * --nnodes (N hosts)", not the one-host "plait -n". `buf` (64 bytes or
 * more) holds it; returns it. */
const char *plait_job_env_launcher(const plait_job_env *env, char *buf, size_t cap);

typedef struct plait_job plait_job;

typedef struct plait_job_options {
    double timeout_s;        /* [comm] timeout: every wait of the join and of bootstraps */
    const char *rendezvous;  /* [comm] rendezvous ("" or NULL = unset) */
    int math_threads;        /* [run] threads (0 = PLAIT_MATH_THREADS, else cores / local ranks) */
    char *const *envp;       /* NULL = the process environment */
    const char *bind;        /* [run] bind: where the rank binds itself once joined (launch/bind.h);
                                NULL or "" = it does not */
    int use_gpus;            /* [device] plugin is not cpu */
    int device_ordinal;      /* [device] ordinal (-1 = local rank mod the GPUs) */
} plait_job_options;

/* Join the job: detect the launcher, start the store (rank 0), connect to
 * it, wait until every rank has joined, compute local rank/size, set the
 * rank's math threads (plait_job_math_threads) and bind it to its cores
 * ([run] bind, launch/bind.h). Collective over all ranks. Reads [comm]
 * timeout, [comm] rendezvous, [run] threads, [run] bind, [device] plugin and
 * [device] ordinal from `cfg`. A rank that does not join within the timeout makes the others fail
 * with "rank R never joined the job within T s". The caller owns *out and
 * releases it with plait_job_leave(). Not thread-safe with itself. */
plait_status plait_job_join(const plait_config *cfg, plait_job **out);
plait_status plait_job_join_with(const plait_job_options *opts, plait_job **out);

/* Leave the job and free `job`. Rank 0 keeps the store up until the other
 * ranks have left (at most the timeout; not at all when `failed`), so ranks
 * still finishing are not cut off. Every bootstrap made from `job` must be
 * freed before. NULL is ignored. */
void plait_job_leave(plait_job *job, int failed);

/* Facts of the joined job. Never fail; thread-safe. */
int plait_job_rank(const plait_job *job);
int plait_job_size(const plait_job *job);
int plait_job_local_rank(const plait_job *job);
int plait_job_local_size(const plait_job *job);
/* The math threads this rank should use: [run] threads, else PLAIT_MATH_THREADS,
 * else the host's cores / local ranks (at least 1). */
int plait_job_math_threads(const plait_job *job);
double plait_job_timeout(const plait_job *job);
/* What the rank's place ([run] bind, launch/bind.h) asks of the device and
 * the comm plugin: the GPU ordinal near its cores, the nearest card (-1 and
 * "" when it did not bind: bind unset, or a topology file of another
 * machine), and the host's places (NULL when bind is unset). Lives as long
 * as the job. */
const plait_bind_result *plait_job_bind_result(const plait_job *job);
/* The device ordinal for this rank where [device] ordinal is not set: the
 * GPU its place chose, else its local rank (plait_device_open takes it mod
 * the devices). */
int plait_job_device_slot(const plait_job *job);
plait_job_launcher plait_job_launcher_kind(const plait_job *job);
/* Host number of each world rank (size entries, hosts numbered by their
 * first rank). */
const int *plait_job_host_of(const plait_job *job);
/* "host:port" of the store; where it came from (plait_job_env.store_source). */
const char *plait_job_store_address(const plait_job *job);
const char *plait_job_store_source(const plait_job *job);
/* The store client (for core modules that need ad-hoc keys; namespace them). */
plait_store *plait_job_store(plait_job *job);

/* The world's bootstrap (comm_id 0, every rank, rank order = world order).
 * Owned by `job`; valid until plait_job_leave(). Its functions are
 * thread-safe and name the missing ranks when they time out. */
const plait_bootstrap *plait_job_world(plait_job *job);

/* A bootstrap over a subset of the world: `members[i]` is the world rank of
 * member i (n entries, distinct, including this rank). `comm_id` must be
 * equal on all members and unique within the job (see plait_job_new_comm_id);
 * keys are namespaced by it, so members of different communicators never
 * see each other's keys. local_rank/local_size count members on this host.
 * Not collective (no communication). The caller frees it with
 * plait_bootstrap_free(). Errors: PLAIT_ERR_INVALID_ARG (this rank not a
 * member, duplicates, out of range), PLAIT_ERR_NO_MEMORY. */
plait_status plait_job_bootstrap_for(plait_job *job, uint32_t comm_id, int n, const int *members,
                                     plait_bootstrap **out);
void plait_bootstrap_free(plait_bootstrap *bs);

/* Agree on a fresh communicator id (never 0, unique within the job) among
 * the ranks that call this with the same `group_key` (e.g.
 * "split/<parent id>/<split seq>/<color>"): exactly one of them passes
 * leader = 1 and allocates the id; the others wait (timeout) for it. */
plait_status plait_job_new_comm_id(plait_job *job, const char *group_key, int leader,
                                   uint32_t *comm_id);

#endif
