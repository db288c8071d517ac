/*
 * The NCCL comm plugin: descriptor, [comm.nccl] keys, probe, and the
 * communicator life cycle (init over the world bootstrap, derive through a
 * child bootstrap, destroy, abort). The data path is nccl_ops.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvidia_gpus.h"
#include "pnccl.h"

const plait_host *pnccl_host;

#define P(k, type, def, lo, hi, flags, doc) {sizeof(plait_key_decl), (flags), (k), (type), (def), (lo), (hi), NULL, (doc)}

static const plait_key_decl g_keys[] = {
    P("device", PLAIT_KEY_INT, "-1", -1, 1023, 0,
      "CUDA device this rank drives; -1 = the local rank modulo the number of visible devices (choose which "
      "devices are visible with CUDA_VISIBLE_DEVICES)"),
    P("nonblocking", PLAIT_KEY_BOOL, "true", 1, 0, 0,
      "create NCCL communicators in nonblocking mode, so initialisation and launches honour [comm] timeout and "
      "can be aborted; false = NCCL's blocking mode (a stuck peer can then block a launch indefinitely)"),
    P("net", PLAIT_KEY_STRING, "", 1, 0, PLAIT_KEY_SAME_ON_ALL,
      "network NCCL uses between hosts (ncclConfig_t.netName, like NCCL_NET): IB, Socket, or a network plugin's "
      "name; empty = NCCL's choice"),
    P("spin_us", PLAIT_KEY_INT, "50", 0, 100000, 0,
      "how long, in microseconds, wait() checks a pending operation without sleeping before its first sleep (a "
      "sleep lasts at least the kernel's timer slack, 50 us by default); 0 = sleep at once"),
    P("poll_us", PLAIT_KEY_INT, "200", 1, 100000, 0,
      "longest sleep, in microseconds, between two checks of a pending operation in wait() (the sleep starts "
      "short and doubles); lower = less latency, more CPU"),
};

/* ---- probe -------------------------------------------------------------- */

static const char *cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorInsufficientDriver:
        return "; no NVIDIA driver is loaded, or it is older than this CUDA runtime";
    case cudaErrorNoDevice: return "; the driver sees no GPU (check CUDA_VISIBLE_DEVICES)";
    default: return "";
    }
}

/* The number of devices the CUDA runtime sees, or a PLAIT_ERR_UNSUPPORTED
 * naming why there is none (init(), in a rank about to use CUDA anyway).
 * Leaves no CUDA error behind. */
static plait_status count_devices(const plait_host *h, int *count) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *count = 0;
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (cudaGetDeviceCount: %s: %s%s)",
                            cudaGetErrorName(e), cudaGetErrorString(e), cuda_hint(e));
    }
    *count = n;
    if (n < 1) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (the CUDA runtime sees none%s%s%s)",
                            vis ? "; CUDA_VISIBLE_DEVICES=\"" : "", vis ? vis : "", vis ? "\"" : "");
    }
    return PLAIT_OK;
}

/* Whether NCCL could run here, without touching CUDA: the loader probes in
 * `plait plugins` and before a rank uses the plugin, and a process that
 * has initialised the CUDA runtime must not fork ranks (CUDA does not
 * survive fork), nor should a listing keep the runtime's descriptors open.
 * So the GPUs are counted from the driver's files, as the cuda device
 * counts them (plugins/common/nvidia); ncclGetVersion only reports the
 * version linked in. What only CUDA itself can tell (a driver older than
 * the runtime) is reported by init(), in the rank, where CUDA is used. */
static plait_status nccl_probe(const plait_host *h) {
    char why[512];
    if (nvidia_visible_gpus(why, sizeof why) < 1)
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "no CUDA device found (%s)", why);
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess || v < NCCL_VERSION(2, 14, 0))
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "the NCCL library loaded (version code %d) is older than 2.14",
                            v);
    return PLAIT_OK;
}

/* ---- settings ----------------------------------------------------------- */

static plait_status read_settings(const plait_host *h, const plait_config *cfg, double timeout_s,
                                  pnccl_settings *s) {
    memset(s, 0, sizeof *s);
    plait_value v;
    if (h->config_get(cfg, "comm.nccl", "device", &v) != PLAIT_OK)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "[comm.nccl] settings could not be read (%s); was the plugin's section declared?",
                            h->last_error());
    s->device = (int)v.i;
    s->nonblocking = (int)plait_cfg_int(h, cfg, "comm.nccl", "nonblocking");
    s->poll_us = (int)plait_cfg_int(h, cfg, "comm.nccl", "poll_us");
    s->spin_us = (int)plait_cfg_int(h, cfg, "comm.nccl", "spin_us");
    snprintf(s->net, sizeof s->net, "%s", plait_cfg_str(h, cfg, "comm.nccl", "net"));
    if (s->poll_us < 1) s->poll_us = 1;
    s->timeout_s = timeout_s > 0 ? timeout_s : 300.0;
    return PLAIT_OK;
}

/* ---- what ranks tell each other before creating a communicator ---------- */

#define PNCCL_INFO_MAGIC 0x434e4c50u /* "PLNC" */
#define PNCCL_INFO_VERSION 1

typedef struct pnccl_info {
    uint32_t magic, version;
    int32_t ok;             /* 0: this rank cannot take part; `reason` says why */
    int32_t device;
    int32_t nccl_version;
    int32_t reserved;
    char bus_id[32];        /* PCI bus id of the device */
    char host[64];
    char reason[256];
    ncclUniqueId uid;       /* rank 0's is the communicator's */
} pnccl_info;

static void describe_self(pnccl_info *in) {
    memset(in, 0, sizeof *in);
    in->magic = PNCCL_INFO_MAGIC;
    in->version = PNCCL_INFO_VERSION;
    in->ok = 1;
    int v = 0;
    ncclGetVersion(&v);
    in->nccl_version = v;
    if (gethostname(in->host, sizeof in->host - 1) != 0) snprintf(in->host, sizeof in->host, "?");
}

static void mark_failed(pnccl_info *in, const char *fmt, const char *detail) {
    in->ok = 0;
    snprintf(in->reason, sizeof in->reason, fmt, detail);
}

/* Every member contributes its pnccl_info (rank 0's carries the unique id);
 * fails on every member if any member failed, naming it, and refuses
 * mismatched NCCL versions and two members on one GPU (NCCL does not
 * support that and may hang). On success *uid is rank 0's id. */
static plait_status agree(const plait_host *h, const plait_bootstrap *bs, const pnccl_info *mine, const int *world_of,
                          ncclUniqueId *uid) {
    pnccl_info *all = calloc((size_t)bs->size, sizeof *all);
    if (!all) return h->set_error(PLAIT_ERR_NO_MEMORY, "nccl: out of memory");
    plait_status st = bs->allgather(bs->ctx, mine, all, sizeof *mine);
    if (st != PLAIT_OK) {
        st = h->set_error(st, "nccl: exchanging device facts with the other ranks: %s", h->last_error());
        free(all);
        return st;
    }
    for (int p = 0; p < bs->size && st == PLAIT_OK; p++) {
        const pnccl_info *in = &all[p];
        int wp = world_of ? world_of[p] : p;
        if (in->magic != PNCCL_INFO_MAGIC || in->version != PNCCL_INFO_VERSION)
            st = h->set_error(PLAIT_ERR_ABI, "nccl: world rank %d runs a different nccl plugin (info version %u, ours %u)",
                              wp, in->version, PNCCL_INFO_VERSION);
        else if (!in->ok)
            st = h->set_error(PLAIT_ERR_UNSUPPORTED, "nccl: world rank %d (host %.64s) cannot take part: %.256s", wp,
                              in->host, in->reason);
        else if (in->nccl_version != all[0].nccl_version)
            st = h->set_error(PLAIT_ERR_INVALID_CONFIG,
                              "nccl: world rank %d loads NCCL version code %d but world rank %d loads %d; every rank "
                              "must use the same NCCL", wp, in->nccl_version, world_of ? world_of[0] : 0,
                              all[0].nccl_version);
    }
    for (int p = 0; p < bs->size && st == PLAIT_OK; p++)
        for (int q = p + 1; q < bs->size && st == PLAIT_OK; q++)
            if (strcmp(all[p].host, all[q].host) == 0 && strcmp(all[p].bus_id, all[q].bus_id) == 0)
                st = h->set_error(PLAIT_ERR_INVALID_CONFIG,
                                  "nccl: world ranks %d and %d would both drive GPU %d (%s) on host %s; NCCL does not "
                                  "support two ranks on one GPU and may hang, so it was not started: start at most as "
                                  "many ranks per host as it has GPUs (one rank per GPU is the default), give each "
                                  "rank its own GPU ([device] ordinal or [comm.nccl] device), or share a GPU over a "
                                  "host transport ([comm] plugin = tcp stages device buffers)",
                                  world_of ? world_of[p] : p, world_of ? world_of[q] : q, all[p].device,
                                  all[p].bus_id, all[p].host);
    if (st == PLAIT_OK) *uid = all[0].uid;
    free(all);
    return st;
}

/* ---- life cycle --------------------------------------------------------- */

static pnccl_comm *comm_new(const plait_host *h, int rank, int size) {
    pnccl_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->world_of = calloc((size_t)size, sizeof(int));
    if (!c->world_of) {
        free(c);
        return NULL;
    }
    c->host = h;
    c->rank = rank;
    c->size = size;
    c->device = -1;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void comm_free(pnccl_comm *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    free(c->world_of);
    free(c);
}

static void world_add(pnccl_world *w, pnccl_comm *c) {
    pthread_mutex_lock(&w->mu);
    c->world = w;
    c->wnext = w->comms;
    w->comms = c;
    w->refs++;
    pthread_mutex_unlock(&w->mu);
}

/* Unlist `c`; returns 1 when it was the world's last communicator. */
static int world_remove(pnccl_world *w, pnccl_comm *c) {
    pthread_mutex_lock(&w->mu);
    for (pnccl_comm **pp = &w->comms; *pp; pp = &(*pp)->wnext)
        if (*pp == c) {
            *pp = c->wnext;
            break;
        }
    int last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    return last;
}

/* Create the NCCL communicator of `c` (rank c->rank of c->size) once every
 * member agreed: nonblocking init, settled within the timeout. */
static plait_status create_nccl(pnccl_comm *c, const ncclUniqueId *uid) {
    const plait_host *h = c->host;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = c->cfg.nonblocking ? 0 : 1;
    if (c->cfg.net[0]) config.netName = c->cfg.net;
    pthread_mutex_lock(&c->mu);
    cudaSetDevice(c->device);
    ncclComm_t nc = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&nc, c->size, *uid, c->rank, &config);
    c->nc = nc;
    int res = r == ncclSuccess || r == ncclInProgress ? pnccl_settle(c, r, h->now() + c->cfg.timeout_s) : (int)r;
    plait_status st = PLAIT_OK;
    if (res != ncclSuccess) {
        char last[256];
        snprintf(last, sizeof last, "%s", c->nc ? ncclGetLastError(c->nc) : ncclGetLastError(NULL));
        if (c->nc) {
            ncclCommAbort(c->nc);
            c->nc = NULL;
        }
        if (res == ncclInProgress)
            st = h->set_error(PLAIT_ERR_TIMEOUT,
                              "nccl: creating communicator %u (rank %d of %d, GPU %d) did not finish within %g s; a "
                              "rank may have died, or the hosts cannot reach each other (NCCL: %s)",
                              c->id, c->rank, c->size, c->device, c->cfg.timeout_s, last);
        else
            st = h->set_error(res < 0 ? PLAIT_ERR_PEER_LOST : pnccl_status((ncclResult_t)res),
                              "nccl: ncclCommInitRankConfig for communicator %u (rank %d of %d, GPU %d) failed: %s "
                              "(%s; %s)", c->id, c->rank, c->size, c->device,
                              res < 0 ? "aborted" : ncclGetErrorString((ncclResult_t)res), last,
                              res < 0 ? "" : pnccl_result_hint((ncclResult_t)res));
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}

static plait_status make_stream(pnccl_comm *c, pnccl_info *mine) {
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess) e = cudaDeviceGetPCIBusId(mine->bus_id, (int)sizeof mine->bus_id, c->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    int pools = 0;
    if (e == cudaSuccess && cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, c->device) != cudaSuccess) {
        (void)cudaGetLastError();
        pools = 0;
    }
    c->async_alloc = pools != 0;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        char d[200];
        snprintf(d, sizeof d, "GPU %d: %s: %s", c->device, cudaGetErrorName(e), cudaGetErrorString(e));
        mark_failed(mine, "cannot use %s", d);
        c->stream = NULL;
        return c->host->set_error(PLAIT_ERR_SYSTEM, "nccl: rank %d cannot use %s", c->rank, d);
    }
    return PLAIT_OK;
}

static plait_status nccl_init(const plait_comm_init *args, void **out) {
    const plait_host *h = args->host ? args->host : pnccl_host;
    const plait_bootstrap *bs = args->bootstrap;
    *out = NULL;
    pnccl_comm *c = comm_new(h, bs->rank, bs->size);
    pnccl_world *w = calloc(1, sizeof *w);
    if (!c || !w) {
        comm_free(c);
        free(w);
        return h->set_error(PLAIT_ERR_NO_MEMORY, "nccl: out of memory");
    }
    pthread_mutex_init(&w->mu, NULL);
    for (int i = 0; i < c->size; i++) c->world_of[i] = i;
    c->id = bs->comm_id;
    c->is_world = 1;
    plait_status st = read_settings(h, args->config, bs->timeout_s, &c->cfg);

    /* Local failures are told to the others before giving up, so every rank
     * fails at once with the reason instead of waiting for the timeout. */
    pnccl_info mine;
    describe_self(&mine);
    char local_err[512] = "";
    int count = 0;
    if (st == PLAIT_OK) st = count_devices(h, &count);
    if (st == PLAIT_OK) {
        /* NCCL must drive the GPU the rank's tensors live on: with a CUDA
         * device open ([device] plugin = cuda) and no [comm.nccl] device,
         * that device's ordinal */
        int configured = c->cfg.device, from_device = 0;
        if (configured < 0 && PLAIT_HOST_HAS(h, device_info) && h->device_info &&
            h->device_info->mem_kind == PLAIT_MEM_CUDA && h->device_info->ordinal >= 0)
            configured = h->device_info->ordinal, from_device = 1;
        c->device = pnccl_pick_device(configured, bs->local_rank, count);
        if (c->device < 0)
            st = h->set_error(PLAIT_ERR_INVALID_CONFIG, "%s = %d, but rank %d sees only %d CUDA device%s (0..%d)",
                              from_device ? "the open device's ordinal" : "[comm.nccl] device", configured, c->rank,
                              count, count == 1 ? "" : "s", count - 1);
    }
    mine.device = c->device;
    if (st == PLAIT_OK) st = make_stream(c, &mine);
    if (st == PLAIT_OK && c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&mine.uid);
        if (r != ncclSuccess)
            st = h->set_error(pnccl_status(r), "nccl: ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r),
                              ncclGetLastError(NULL));
    }
    if (st != PLAIT_OK) {
        snprintf(local_err, sizeof local_err, "%s", h->last_error());
        if (mine.ok) mark_failed(&mine, "%s", local_err);
    }
    ncclUniqueId uid;
    plait_status agreed = agree(h, bs, &mine, NULL, &uid);
    if (st != PLAIT_OK) {
        st = h->set_error(st, "%s", local_err); /* our own reason beats the echo of it */
    } else if (agreed != PLAIT_OK) {
        st = agreed;
    } else {
        world_add(w, c);
        st = create_nccl(c, &uid);
        if (st != PLAIT_OK) world_remove(w, c);
    }
    if (st != PLAIT_OK) {
        if (c->stream) cudaStreamDestroy(c->stream);
        comm_free(c);
        pthread_mutex_destroy(&w->mu);
        free(w);
        return st;
    }
    h->log(bs->local_rank == 0 ? PLAIT_LOG_INFO : PLAIT_LOG_DEBUG, PNCCL_COMPONENT,
           "rank %d of %d drives GPU %d (%s) on %s; NCCL version code %d, %s communicators", c->rank, c->size,
           c->device, mine.bus_id, mine.host, mine.nccl_version, c->cfg.nonblocking ? "nonblocking" : "blocking");
    *out = c;
    return PLAIT_OK;
}

static plait_status nccl_derive(void *parent_v, const plait_comm_derive *args, void **out) {
    pnccl_comm *parent = parent_v;
    const plait_host *h = parent->host;
    const plait_bootstrap *bs = args->bootstrap;
    *out = NULL;
    if (args->size < 1 || args->rank < 0 || args->rank >= args->size || !args->members || bs->size != args->size ||
        bs->rank != args->rank)
        return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: derive: bad arguments (size %d, rank %d, bootstrap %d of %d)",
                            args->size, args->rank, bs->rank, bs->size);
    pnccl_comm *c = comm_new(h, args->rank, args->size);
    if (!c) return h->set_error(PLAIT_ERR_NO_MEMORY, "nccl: out of memory");
    for (int i = 0; i < args->size; i++) {
        int pr = args->members[i];
        if (pr < 0 || pr >= parent->size) {
            comm_free(c);
            return h->set_error(PLAIT_ERR_INVALID_ARG, "nccl: derive: member %d is parent rank %d of %d", i, pr,
                                parent->size);
        }
        c->world_of[i] = parent->world_of[pr];
    }
    c->cfg = parent->cfg;
    c->device = parent->device;
    c->id = bs->comm_id;

    pnccl_info mine;
    describe_self(&mine);
    mine.device = c->device;
    plait_status st = make_stream(c, &mine);
    pthread_mutex_lock(&parent->mu);
    if (st == PLAIT_OK && parent->aborted) {
        st = h->set_error(parent->fail_status, "nccl: deriving from communicator %u after it failed: %s", parent->id,
                          parent->why);
        mark_failed(&mine, "%s", h->last_error());
    }
    pthread_mutex_unlock(&parent->mu);
    if (st == PLAIT_OK && c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&mine.uid);
        if (r != ncclSuccess) {
            st = h->set_error(pnccl_status(r), "nccl: ncclGetUniqueId failed: %s (%s)", ncclGetErrorString(r),
                              ncclGetLastError(NULL));
            mark_failed(&mine, "%s", h->last_error());
        }
    }
    char local_err[512] = "";
    if (st != PLAIT_OK) snprintf(local_err, sizeof local_err, "%s", h->last_error());
    ncclUniqueId uid;
    plait_status agreed = agree(h, bs, &mine, c->world_of, &uid);
    if (st != PLAIT_OK) st = h->set_error(st, "%s", local_err);
    else st = agreed;
    if (st == PLAIT_OK) {
        world_add(parent->world, c);
        st = create_nccl(c, &uid);
        if (st != PLAIT_OK) world_remove(parent->world, c);
    }
    if (st != PLAIT_OK) {
        if (c->stream) {
            cudaSetDevice(c->device);
            cudaStreamDestroy(c->stream);
        }
        comm_free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

static void nccl_destroy(void *v) {
    pnccl_comm *c = v;
    if (!c) return;
    pnccl_release(c);
    pnccl_world *w = c->world;
    if (w && world_remove(w, c)) {
        pthread_mutex_destroy(&w->mu);
        free(w);
    }
    comm_free(c);
}

/* Aborting the world aborts every communicator derived from it (the job is
 * going down: a rank blocked on a child must not wait for its timeout). */
static void nccl_abort(void *v, const char *reason) {
    pnccl_comm *c = v;
    char why[512];
    snprintf(why, sizeof why, "communicator %u aborted: %s", c->id, reason ? reason : "aborted");
    if (!c->is_world || !c->world) {
        pnccl_abort_comm(c, PLAIT_ERR_PEER_LOST, why);
        return;
    }
    pthread_mutex_lock(&c->world->mu);
    for (pnccl_comm *x = c->world->comms; x; x = x->wnext) pnccl_abort_comm(x, PLAIT_ERR_PEER_LOST, why);
    pthread_mutex_unlock(&c->world->mu);
}

/* ---- data path glue ------------------------------------------------------ */

static plait_status op_isend(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    (void)mr;
    return pnccl_isend(comm, buf, peer, tag, (pnccl_req **)req);
}

static plait_status op_irecv(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    (void)mr;
    return pnccl_irecv(comm, buf, peer, tag, (pnccl_req **)req);
}

static plait_status op_test(void *comm, void *req, int *done, size_t *bytes) {
    return pnccl_test(comm, req, done, bytes);
}

static plait_status op_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    return pnccl_wait(comm, req, timeout_s, bytes);
}

static const plait_comm_ops g_ops = {
    .struct_size = sizeof(plait_comm_ops),
    /* collectives run on the GPU by themselves; queued sends and receives
     * are launched by test/wait, so no PLAIT_COMM_ASYNC_PROGRESS */
    .flags = PLAIT_COMM_CUDA_STREAMS,
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_CUDA),
    .init = nccl_init,
    .derive = nccl_derive,
    .destroy = nccl_destroy,
    .abort = nccl_abort,
    .reg = NULL,
    .dereg = NULL,
    .isend = op_isend,
    .irecv = op_irecv,
    .test = op_test,
    .wait = op_wait,
    .native_coll = &pnccl_coll_ops,
    .stream_create = pnccl_stream_create,
    .stream_sync = pnccl_stream_sync,
    .stream_destroy = pnccl_stream_destroy,
    .wait_event = pnccl_wait_event,
    .record_event = pnccl_record_event,
};

static const plait_plugin_desc g_desc = {
    PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_COMM, "nccl", PLAIT_ABI_MINOR),
    .version = "0.1.0",
    .description = "NVIDIA NCCL on CUDA GPUs: native collectives on device memory, CUDA streams",
    .keys = g_keys,
    .n_keys = sizeof g_keys / sizeof g_keys[0],
    .key_size = sizeof(plait_key_decl),
    .probe = nccl_probe,
    .ops = &g_ops,
    .uses = NULL,
    .report = nccl_report,
};

PLAIT_PLUGIN_DEFINE_ENTRY("comm/nccl", 0, &pnccl_host, &g_desc)
