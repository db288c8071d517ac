/* Joining the job and the plait_bootstrap implementations (see bootstrap.h). */
#include "launch/bootstrap.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "launch/bind.h"
#include "launch/math_threads.h"
#include "launch/net.h"
#include "launch/rendezvous_file.h"
#include "config/config.h"
#include "runtime/error.h"
#include "runtime/host_identity.h"
#include "runtime/log.h"

#define COMPONENT "job"

/* What every rank tells the others at join. */
struct join_info {
    char host[64];   /* for messages */
    uint64_t host_key; /* runtime/host_identity.h: name, boot id, network namespace */
    int32_t pid;
    int32_t rank;
    plait_cpuset mask; /* the affinity it started with: every rank places its host's ranks from the same masks */
};

struct plait_job {
    plait_job_env env;
    double timeout;
    int rank, size, local_rank, local_size;
    int math_threads;           /* this rank's share of the host's cores */
    plait_store_server *server; /* rank 0 */
    plait_store *store;
    char store_addr[300];
    char rdv_path[600];         /* rank 0's private rendezvous file, "" if none */
    int *host_of;               /* world rank -> host index */
    plait_cpuset *local_masks;  /* this host's ranks' start masks, by local rank */
    plait_bind_result bound;    /* what its place asks of the device and comm plugin */
    plait_bootstrap *world;
};

/* ---- bootstrap over a set of members ------------------------------------ */

typedef struct bs_impl {
    plait_bootstrap pub; /* first: a plait_bootstrap* is a bs_impl* */
    plait_job *job;
    int *members;        /* world ranks; NULL = identity (world) */
    int *host_of;        /* member -> the job's host number (plait_bootstrap.host_of) */
    pthread_mutex_t lock;
    uint32_t ag_seq, bar_seq;
    char ns[32];
} bs_impl;

static int world_of(const bs_impl *b, int r) { return b->members ? b->members[r] : r; }

/* "member 2 (world rank 5)" lists for messages. */
static void describe_members(const bs_impl *b, const int *idx, int n, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && off + 32 < cap; i++) {
        if (b->pub.comm_id == 0)
            off += (size_t)snprintf(buf + off, cap - off, "%s%d", i ? ", " : "", idx[i]);
        else
            off += (size_t)snprintf(buf + off, cap - off, "%s%d (world rank %d)", i ? ", " : "", idx[i],
                                    world_of(b, idx[i]));
    }
}

static plait_status bs_set(void *ctx, const char *key, const void *value, size_t len) {
    bs_impl *b = ctx;
    char k[PLAIT_STORE_MAX_KEY + 1];
    if ((size_t)snprintf(k, sizeof k, "%sk/%s", b->ns, key) >= sizeof k)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap key '%s' is too long", key);
    return plait_store_set(b->job->store, k, value, len);
}

static plait_status bs_get(void *ctx, const char *key, void *value, size_t cap, size_t *len) {
    bs_impl *b = ctx;
    char k[PLAIT_STORE_MAX_KEY + 1];
    if ((size_t)snprintf(k, sizeof k, "%sk/%s", b->ns, key) >= sizeof k)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap key '%s' is too long", key);
    plait_status st = plait_store_get(b->job->store, k, value, cap, len, b->pub.timeout_s);
    if (st == PLAIT_ERR_TIMEOUT)
        return plait_set_error(st, "communicator %u: no member published '%s' within %.3g s", b->pub.comm_id,
                               key, b->pub.timeout_s);
    return st;
}

static plait_status gather(bs_impl *b, const char *what, uint32_t seq, const void *mine, void *all,
                           size_t bytes) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s%s%u/", b->ns, what, seq);
    int *missing = malloc(sizeof(int) * (size_t)b->pub.size);
    int nm = 0;
    plait_status st = plait_store_gather(b->job->store, prefix, b->pub.size, b->pub.rank, mine, all, bytes,
                                         b->pub.timeout_s, missing, &nm);
    if (st == PLAIT_ERR_TIMEOUT && missing && nm > 0) {
        char list[512];
        describe_members(b, missing, nm, list, sizeof list);
        st = plait_set_error(st, "%s #%u of %s: member%s %s did not arrive within %.3g s", what, seq,
                             b->pub.comm_id ? "a communicator" : "the world", nm == 1 ? "" : "s", list,
                             b->pub.timeout_s);
    }
    free(missing);
    return st;
}

static plait_status bs_allgather(void *ctx, const void *mine, void *all, size_t bytes) {
    bs_impl *b = ctx;
    pthread_mutex_lock(&b->lock);
    uint32_t seq = b->ag_seq++;
    pthread_mutex_unlock(&b->lock);
    return gather(b, "allgather", seq, mine, all, bytes);
}

static plait_status bs_barrier(void *ctx) {
    bs_impl *b = ctx;
    pthread_mutex_lock(&b->lock);
    uint32_t seq = b->bar_seq++;
    pthread_mutex_unlock(&b->lock);
    return gather(b, "barrier", seq, NULL, NULL, 0);
}

static bs_impl *bs_new(plait_job *job, uint32_t comm_id, int n, const int *members, int rank) {
    bs_impl *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->host_of = malloc(sizeof(int) * (size_t)n);
    if (!b->host_of) {
        free(b);
        return NULL;
    }
    for (int i = 0; i < n; i++) b->host_of[i] = job->host_of[members ? members[i] : i];
    b->pub.host_of = b->host_of;
    if (members) {
        b->members = malloc(sizeof(int) * (size_t)n);
        if (!b->members) {
            free(b->host_of);
            free(b);
            return NULL;
        }
        memcpy(b->members, members, sizeof(int) * (size_t)n);
    }
    pthread_mutex_init(&b->lock, NULL);
    b->job = job;
    snprintf(b->ns, sizeof b->ns, "c%u/", comm_id);
    b->pub.struct_size = sizeof(plait_bootstrap);
    b->pub.rank = rank;
    b->pub.size = n;
    b->pub.comm_id = comm_id;
    b->pub.timeout_s = job->timeout;
    b->pub.ctx = b;
    b->pub.set = bs_set;
    b->pub.get = bs_get;
    b->pub.allgather = bs_allgather;
    b->pub.barrier = bs_barrier;
    /* members on this host, and my index among them */
    int mine = job->host_of[job->rank], lr = 0, ls = 0;
    for (int i = 0; i < n; i++) {
        int w = members ? members[i] : i;
        if (job->host_of[w] != mine) continue;
        if (i < rank) lr++;
        ls++;
    }
    b->pub.local_rank = lr;
    b->pub.local_size = ls;
    return b;
}

void plait_bootstrap_free(plait_bootstrap *bs) {
    if (!bs) return;
    bs_impl *b = (bs_impl *)bs;
    pthread_mutex_destroy(&b->lock);
    free(b->host_of);
    free(b->members);
    free(b);
}

plait_status plait_job_bootstrap_for(plait_job *job, uint32_t comm_id, int n, const int *members,
                                     plait_bootstrap **out) {
    if (n < 1 || n > job->size || !members)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap for communicator %u: %d members of a world of %d",
                               comm_id, n, job->size);
    int me = -1;
    for (int i = 0; i < n; i++) {
        if (members[i] < 0 || members[i] >= job->size)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap for communicator %u: member %d is world "
                                                          "rank %d, outside 0..%d", comm_id, i, members[i],
                                   job->size - 1);
        for (int j = 0; j < i; j++)
            if (members[j] == members[i])
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap for communicator %u: world rank %d "
                                                              "listed twice", comm_id, members[i]);
        if (members[i] == job->rank) me = i;
    }
    if (me < 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "bootstrap for communicator %u: world rank %d is not a "
                                                      "member", comm_id, job->rank);
    bs_impl *b = bs_new(job, comm_id, n, members, me);
    if (!b) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    *out = &b->pub;
    return PLAIT_OK;
}

plait_status plait_job_new_comm_id(plait_job *job, const char *group_key, int leader, uint32_t *comm_id) {
    char key[PLAIT_STORE_MAX_KEY + 1];
    if ((size_t)snprintf(key, sizeof key, "job/cid/%s", group_key) >= sizeof key)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "communicator group key '%s' is too long", group_key);
    uint32_t id = 0;
    if (leader) {
        int64_t v = 0;
        plait_status st = plait_store_add(job->store, "job/next_comm_id", 1, &v);
        if (st != PLAIT_OK) return st;
        if (v <= 0 || v > 0xfffffffell)
            return plait_set_error(PLAIT_ERR_INTERNAL, "communicator ids exhausted (%lld)", (long long)v);
        id = (uint32_t)v;
        st = plait_store_set(job->store, key, &id, sizeof id);
        if (st != PLAIT_OK) return st;
    } else {
        size_t len = 0;
        plait_status st = plait_store_get(job->store, key, &id, sizeof id, &len, job->timeout);
        if (st == PLAIT_ERR_TIMEOUT)
            return plait_set_error(st, "the leader of communicator group '%s' did not publish its id within "
                                       "%.3g s", group_key, job->timeout);
        if (st != PLAIT_OK) return st;
        if (len != sizeof id || id == 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "communicator group '%s': malformed id", group_key);
    }
    *comm_id = id;
    return PLAIT_OK;
}

/* ---- join --------------------------------------------------------------- */

static int is_any_or_loopback(const char *host) {
    return strcmp(host, "127.0.0.1") == 0 || strcmp(host, "localhost") == 0 || strcmp(host, "::1") == 0;
}

/* Rank 0: start the store according to the environment. */
static plait_status start_server(plait_job *job, char *token, int *port) {
    plait_job_env *e = &job->env;
    int private_file = strcmp(e->store_source, "private rendezvous file") == 0;
    int in_process = strcmp(e->store_source, "in-process") == 0;
    if (!e->token[0]) {
        unsigned char raw[24];
        plait_status st = plait_net_random(raw, sizeof raw);
        if (st != PLAIT_OK) return st;
        plait_net_hex(raw, sizeof raw, token);
    } else {
        snprintf(token, PLAIT_STORE_MAX_TOKEN + 1, "%s", e->token);
    }
    const char *host = e->store_host[0] ? e->store_host : "127.0.0.1";
    int want_port = e->store_host[0] ? e->store_port : 0;
    int inherited = e->store_fd;
    e->store_fd = -1; /* the server owns it now, whatever happens */
    plait_status st = plait_store_server_start(inherited, host, want_port, token, PLAIT_STORE_HANDSHAKE_S,
                                               &job->server);
    if (st != PLAIT_OK && inherited < 0 && strstr(plait_last_error(), strerror(EADDRNOTAVAIL)) &&
        !is_any_or_loopback(host)) {
        /* The name resolves to an address this host does not have (NAT,
         * /etc/hosts mapping the own name to 127.0.1.1): listen everywhere. */
        PLAIT_WARN(COMPONENT, "cannot bind the store to %s here (%s); listening on all addresses, port %d",
                   host, plait_last_error(), want_port);
        st = plait_store_server_start(-1, "0.0.0.0", want_port, token, PLAIT_STORE_HANDSHAKE_S,
                                      &job->server);
    }
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "rank 0 cannot host the job's store (address from %s)", e->store_source);
    *port = plait_store_server_port(job->server);
    if (private_file) {
        st = plait_rdv_file_path(e->job_id, job->rdv_path, sizeof job->rdv_path);
        if (st == PLAIT_OK) {
            plait_rdv_file_remove(job->rdv_path); /* a stale one from an earlier job */
            st = plait_rdv_file_publish(job->rdv_path, *port, token);
        }
        if (st != PLAIT_OK) {
            job->rdv_path[0] = '\0';
            return st;
        }
    }
    (void)in_process;
    return PLAIT_OK;
}

static plait_status connect_store(plait_job *job, const char *host, int port, const char *token,
                                  double deadline) {
    plait_job_env *e = &job->env;
    if (strchr(host, ':')) snprintf(job->store_addr, sizeof job->store_addr, "[%s]:%d", host, port);
    else snprintf(job->store_addr, sizeof job->store_addr, "%s:%d", host, port);
    char what[400];
    snprintf(what, sizeof what, "the job's store (hosted by rank 0) at %s", job->store_addr);
    double left = deadline - plait_clock_now();
    plait_status st = plait_store_connect(host, port, token, job->rank, left > 0.01 ? left : 0.01, what,
                                          &job->store);
    char launcher[96];
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "rank %d joining the %s job (store address from %s)", job->rank,
                                plait_job_env_launcher(e, launcher, sizeof launcher), e->store_source);
    return PLAIT_OK;
}

/* Compute local rank/size from everyone's join_info. */
static plait_status place_ranks(plait_job *job, const struct join_info *all) {
    job->host_of = malloc(sizeof(int) * (size_t)job->size);
    if (!job->host_of) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    int n_hosts = 0;
    for (int r = 0; r < job->size; r++) {
        job->host_of[r] = -1;
        for (int q = 0; q < r; q++)
            if (all[q].host_key == all[r].host_key) {
                job->host_of[r] = job->host_of[q];
                break;
            }
        if (job->host_of[r] < 0) job->host_of[r] = n_hosts++;
    }
    int mine = job->host_of[job->rank];
    job->local_rank = job->local_size = 0;
    for (int r = 0; r < job->size; r++) {
        if (job->host_of[r] != mine) continue;
        if (r < job->rank) job->local_rank++;
        job->local_size++;
    }
    job->local_masks = calloc((size_t)job->local_size, sizeof *job->local_masks);
    if (!job->local_masks) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int r = 0, k = 0; r < job->size; r++)
        if (job->host_of[r] == mine) job->local_masks[k++] = all[r].mask;
    return PLAIT_OK;
}

/* [run] bind, once the rank knows its local rank and threads. */
static plait_status bind_rank(plait_job *job, const plait_job_options *opts) {
    if (!opts->bind || !*opts->bind) return PLAIT_OK;
    int hosts = 0;
    for (int r = 0; r < job->size; r++) hosts = job->host_of[r] + 1 > hosts ? job->host_of[r] + 1 : hosts;
    plait_bind_request req = {.mode = opts->bind,
                              .use_gpus = opts->use_gpus,
                              .ordinal = opts->device_ordinal,
                              .local_ranks = job->local_size,
                              .threads = job->math_threads};
    return plait_bind_self(&req, job->local_rank, job->rank, hosts > 1, job->local_masks, &job->bound);
}

plait_status plait_job_join_with(const plait_job_options *opts, plait_job **out) {
    plait_job *job = calloc(1, sizeof *job);
    if (!job) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    job->bound.gpu_ordinal = -1;
    plait_status st = plait_job_env_detect(opts->envp, opts->rendezvous, &job->env);
    if (st != PLAIT_OK) {
        free(job);
        return st;
    }
    plait_job_env *e = &job->env;
    job->timeout = opts->timeout_s > 0 ? opts->timeout_s : 300;
    job->rank = e->rank;
    job->size = e->size;
    double t0 = plait_clock_now(), deadline = t0 + job->timeout;
    int private_file = strcmp(e->store_source, "private rendezvous file") == 0;

    char token[PLAIT_STORE_MAX_TOKEN + 1];
    snprintf(token, sizeof token, "%s", e->token);
    int port = e->store_port;
    const char *host = e->store_host[0] ? e->store_host : "127.0.0.1";
    if (job->rank == 0) {
        st = start_server(job, token, &port);
        if (st != PLAIT_OK) goto fail;
        if (!e->store_host[0] || strcmp(e->store_host, "0.0.0.0") == 0) host = "127.0.0.1";
        st = connect_store(job, host, port, token, deadline);
    } else if (private_file) {
        /* A file left by a crashed earlier job is skipped (its writer is
         * dead); one replaced under us is retried until the deadline. */
        char path[600];
        st = plait_rdv_file_path(e->job_id, path, sizeof path);
        while (st == PLAIT_OK) {
            int file_port = 0;
            st = plait_rdv_file_wait(path, deadline, &file_port, token, sizeof token);
            if (st != PLAIT_OK) break;
            if (!e->store_host[0]) port = file_port;
            double left = deadline - plait_clock_now();
            st = connect_store(job, host, port, token, plait_clock_now() + (left < 2 ? left : 2));
            if (st == PLAIT_OK || plait_clock_now() >= deadline) break;
            st = PLAIT_OK; /* retry with a fresh look at the file */
        }
    } else {
        st = connect_store(job, host, port, token, deadline);
    }
    if (st != PLAIT_OK) goto fail;

    /* Everyone registers; the gather's timeout names who never came. */
    struct join_info mine;
    memset(&mine, 0, sizeof mine);
    gethostname(mine.host, sizeof mine.host - 1);
    mine.host_key = plait_host_key();
    mine.pid = (int32_t)getpid();
    mine.rank = job->rank;
    plait_bind_current_mask(&mine.mask);
    struct join_info *all = calloc((size_t)job->size, sizeof *all);
    int *missing = calloc((size_t)job->size, sizeof *missing);
    if (!all || !missing) {
        free(all);
        free(missing);
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    int nm = 0;
    double left = deadline - plait_clock_now();
    st = plait_store_gather(job->store, "job/join/", job->size, job->rank, &mine, all, sizeof mine,
                            left > 0.01 ? left : 0.01, missing, &nm);
    if (st == PLAIT_ERR_TIMEOUT && nm > 0) {
        char list[512];
        size_t off = 0;
        list[0] = '\0';
        for (int i = 0; i < nm && off + 16 < sizeof list; i++)
            off += (size_t)snprintf(list + off, sizeof list - off, "%s%d", i ? ", " : "", missing[i]);
        char launcher[96];
        st = plait_set_error(PLAIT_ERR_TIMEOUT,
                             "rank%s %s never joined the job within %.3g s (%d of %d ranks joined; store at "
                             "%s, %s; launcher: %s)",
                             nm == 1 ? "" : "s", list, job->timeout, job->size - nm, job->size,
                             job->store_addr, e->store_source, plait_job_env_launcher(e, launcher, sizeof launcher));
    }
    free(missing);
    if (st == PLAIT_OK) {
        for (int r = 0; r < job->size && st == PLAIT_OK; r++)
            if (all[r].rank != r)
                st = plait_set_error(PLAIT_ERR_PROTOCOL, "join record %d claims rank %d", r, all[r].rank);
        if (st == PLAIT_OK) st = place_ranks(job, all);
    }
    free(all);
    if (st != PLAIT_OK) goto fail;
    /* Everyone has read the rendezvous file by now. */
    if (job->rdv_path[0]) {
        plait_rdv_file_remove(job->rdv_path);
        job->rdv_path[0] = '\0';
    }

    job->math_threads =
        plait_math_threads_rule(opts->math_threads > 0 ? opts->math_threads : e->math_threads, job->local_size);
    st = bind_rank(job, opts);
    if (st != PLAIT_OK) goto fail;

    bs_impl *w = bs_new(job, 0, job->size, NULL, job->rank);
    if (!w) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    job->world = &w->pub;
    if (job->size > 1) plait_log_set_rank(job->rank);
    char launcher[96];
    PLAIT_DEBUG(COMPONENT, "joined as rank %d of %d (local %d of %d) via %s; store %s (%s); %d math threads; %.3f s",
                job->rank, job->size, job->local_rank, job->local_size, plait_job_env_launcher(e, launcher, sizeof launcher),
                job->store_addr, e->store_source, job->math_threads, plait_clock_now() - t0);
    *out = job;
    return PLAIT_OK;
fail:
    plait_job_leave(job, 1);
    return st;
}

plait_status plait_job_join(const plait_config *cfg, plait_job **out) {
    plait_job_options o = {0};
    o.timeout_s = plait_config_float(cfg, "comm", "timeout");
    o.rendezvous = plait_config_str(cfg, "comm", "rendezvous");
    o.math_threads = (int)plait_config_int(cfg, "run", "threads");
    o.bind = plait_config_str(cfg, "run", "bind");
    o.use_gpus = strcmp(plait_config_str(cfg, "device", "plugin"), "cpu") != 0;
    o.device_ordinal = (int)plait_config_int(cfg, "device", "ordinal");
    return plait_job_join_with(&o, out);
}

void plait_job_leave(plait_job *job, int failed) {
    if (!job) return;
    plait_bootstrap_free(job->world);
    plait_store_close(job->store);
    if (job->rdv_path[0]) plait_rdv_file_remove(job->rdv_path);
    if (job->server) plait_store_server_stop(job->server, failed ? 0 : job->timeout);
    else if (job->env.store_fd >= 0) close(job->env.store_fd);
    free(job->host_of);
    free(job->local_masks);
    plait_bind_result_free(&job->bound);
    free(job);
}

int plait_job_rank(const plait_job *job) { return job->rank; }
int plait_job_size(const plait_job *job) { return job->size; }
int plait_job_local_rank(const plait_job *job) { return job->local_rank; }
int plait_job_local_size(const plait_job *job) { return job->local_size; }
int plait_job_math_threads(const plait_job *job) { return job->math_threads; }
double plait_job_timeout(const plait_job *job) { return job->timeout; }
const plait_bind_result *plait_job_bind_result(const plait_job *job) { return &job->bound; }
const int *plait_job_host_of(const plait_job *job) { return job->host_of; }
int plait_job_device_slot(const plait_job *job) {
    return job->bound.gpu_ordinal >= 0 ? job->bound.gpu_ordinal : job->local_rank;
}
plait_job_launcher plait_job_launcher_kind(const plait_job *job) { return job->env.launcher; }
const char *plait_job_store_address(const plait_job *job) { return job->store_addr; }
const char *plait_job_store_source(const plait_job *job) { return job->env.store_source; }
plait_store *plait_job_store(plait_job *job) { return job->store; }
const plait_bootstrap *plait_job_world(plait_job *job) { return job->world; }
