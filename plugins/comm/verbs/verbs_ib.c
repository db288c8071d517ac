/* The verbs plugin's fabric over libibverbs; see verbs_ib.h. */
#include "verbs_ib.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define MAX_INLINE 64
#define MAX_RD_ATOMIC 16

struct vb_ib {
    const plait_host *host;
    vb_settings cfg;
    int rank, size;
    char why[384];                  /* why opening failed */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_srq *srq;
    struct ibv_qp **qps;
    uint32_t *psn;
    int cq_size;
    uint8_t port;
    uint8_t link_layer;
    enum ibv_mtu mtu;
    uint16_t lid;
    int gid_index;
    union ibv_gid gid;
    int max_rd_atomic;
    uint32_t max_inline;
    char dev[32];
    char host_name[64];
    char where[160];
    vb_port_info *infos;            /* every rank's, after the exchange */
    uint32_t *credits;              /* infos[p].credits */
    /* qpn -> peer */
    uint32_t *map_qpn;
    int *map_peer;
    size_t map_cap;
    /* progress */
    vb_engine *eng;
    pthread_t thread;
    int has_thread;
    int wake_fd;
    volatile int stop;
};

/* ---- device choice --------------------------------------------------------- */

static const char *port_state_name(enum ibv_port_state s) {
    switch (s) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "NOP";
    }
}

static const char *no_devices_reason(int err) {
    if (err == ENOSYS || err == ENOENT)
        return "; the kernel's RDMA subsystem is not loaded: there is no /sys/class/infiniband; load ib_uverbs and "
               "the adapter's driver";
    return "";
}

/* The first active port of `ctx` (or `want` if > 0); 0 when none, with the
 * states seen appended to `states`. */
static int active_port(struct ibv_context *ctx, int want, char *states, size_t cap) {
    struct ibv_device_attr da;
    if (ibv_query_device(ctx, &da) != 0) {
        snprintf(states, cap, "cannot query the device: %s", strerror(errno));
        return 0;
    }
    size_t used = strlen(states);
    for (int p = 1; p <= da.phys_port_cnt; p++) {
        if (want > 0 && p != want) continue;
        struct ibv_port_attr pa;
        if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0) continue;
        if (pa.state == IBV_PORT_ACTIVE) return p;
        if (used < cap)
            used += (size_t)snprintf(states + used, cap - used, "%sport %d %s", used ? ", " : "", p,
                                     port_state_name(pa.state));
    }
    if (want > (int)da.phys_port_cnt && used < cap)
        snprintf(states + used, cap - used, "%sit has %d port%s, not %d", used ? ", " : "", da.phys_port_cnt,
                 da.phys_port_cnt == 1 ? "" : "s", want);
    return 0;
}

plait_status vb_ib_probe(const plait_host *h) {
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    int err = errno;
    if (!list || n == 0) {
        if (list) ibv_free_device_list(list);
        return h->set_error(PLAIT_ERR_UNSUPPORTED, "no RDMA device found (ibv_get_device_list: %s%s)",
                            list ? "no devices" : strerror(err), no_devices_reason(err));
    }
    char seen[512] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        char states[256] = "";
        if (!ctx) {
            snprintf(states, sizeof states, "cannot open: %s", strerror(errno));
        } else {
            int p = active_port(ctx, 0, states, sizeof states);
            ibv_close_device(ctx);
            if (p > 0) {
                ibv_free_device_list(list);
                return PLAIT_OK;
            }
        }
        if (used < sizeof seen)
            used += (size_t)snprintf(seen + used, sizeof seen - used, "%s%s: %s", i ? "; " : "",
                                     ibv_get_device_name(list[i]), states[0] ? states : "no ports");
    }
    ibv_free_device_list(list);
    return h->set_error(PLAIT_ERR_UNSUPPORTED, "no RDMA device with an active port (%s)", seen);
}

/* RoCE: a RoCE v2 GID with an IPv4 address if there is one (what NCCL and
 * most fabrics route), else RoCE v2, else index 0. */
static int pick_gid(struct ibv_context *ctx, uint8_t port) {
    struct ibv_gid_entry ents[128];
    ssize_t n = ibv_query_gid_table(ctx, ents, 128, 0);
    int v2 = -1;
    for (ssize_t i = 0; i < n; i++) {
        if (ents[i].port_num != port || ents[i].gid_type != IBV_GID_TYPE_ROCE_V2) continue;
        const uint8_t *g = ents[i].gid.raw;
        int v4 = 1;
        for (int k = 0; k < 10; k++) v4 &= g[k] == 0;
        v4 &= g[10] == 0xff && g[11] == 0xff;
        if (v4) return (int)ents[i].gid_index;
        if (v2 < 0) v2 = (int)ents[i].gid_index;
    }
    return v2 >= 0 ? v2 : 0;
}

/* ---- open -------------------------------------------------------------------- */

static plait_status open_fail(vb_ib *ib, plait_status st, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static plait_status open_fail(vb_ib *ib, plait_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ib->why, sizeof ib->why, fmt, ap);
    va_end(ap);
    return ib->host->set_error(st, "verbs: %s", ib->why);
}

/* "mlx5_0:1" -> name and port (like NCCL_IB_HCA). */
static void split_device(const char *spec, char *name, size_t cap, int *port) {
    snprintf(name, cap, "%s", spec);
    char *colon = strchr(name, ':');
    if (colon) {
        *colon = '\0';
        int p = atoi(colon + 1);
        if (p > 0) *port = p;
    }
}

static plait_status open_device(vb_ib *ib) {
    int n = 0;
    errno = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    int err = errno;
    if (!list || n == 0) {
        if (list) ibv_free_device_list(list);
        return open_fail(ib, PLAIT_ERR_UNSUPPORTED, "no RDMA device found (ibv_get_device_list: %s%s)",
                         list ? "no devices" : strerror(err), no_devices_reason(err));
    }
    char want[64];
    int want_port = ib->cfg.port;
    split_device(ib->cfg.device, want, sizeof want, &want_port);
    char seen[384] = "";
    size_t used = 0;
    plait_status st = PLAIT_ERR_UNSUPPORTED;
    for (int i = 0; i < n && !ib->ctx; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (want[0] && strcmp(name, want) != 0) continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        char states[256] = "";
        int p = 0;
        if (!ctx) snprintf(states, sizeof states, "cannot open: %s", strerror(errno));
        else p = active_port(ctx, want_port, states, sizeof states);
        if (p > 0) {
            ib->ctx = ctx;
            ib->port = (uint8_t)p;
            snprintf(ib->dev, sizeof ib->dev, "%s", name);
            break;
        }
        if (ctx) ibv_close_device(ctx);
        if (used < sizeof seen)
            used += (size_t)snprintf(seen + used, sizeof seen - used, "%s%s: %s", used ? "; " : "", name,
                                     states[0] ? states : "no ports");
    }
    if (!ib->ctx) {
        if (want[0] && !seen[0]) {
            used = 0;
            char names[256] = "";
            for (int i = 0; i < n && used < sizeof names; i++)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", i ? ", " : "",
                                         ibv_get_device_name(list[i]));
            st = open_fail(ib, PLAIT_ERR_INVALID_CONFIG, "[comm.verbs] device = %s: no such RDMA device (found: %s)",
                           ib->cfg.device, names);
        } else {
            st = open_fail(ib, PLAIT_ERR_UNSUPPORTED, "no RDMA device with an active port%s (%s)",
                           want_port > 0 ? " matching [comm.verbs] port" : "", seen);
        }
    }
    ibv_free_device_list(list);
    return ib->ctx ? PLAIT_OK : st;
}

plait_status vb_ib_open(const plait_host *h, const vb_settings *cfg, int rank, int size, vb_ib **out) {
    vb_ib *ib = calloc(1, sizeof *ib);
    *out = ib;
    if (!ib) return h->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    ib->host = h;
    ib->cfg = *cfg;
    ib->rank = rank;
    ib->size = size;
    ib->wake_fd = -1;
    if (gethostname(ib->host_name, sizeof ib->host_name - 1) != 0) snprintf(ib->host_name, sizeof ib->host_name, "?");
    plait_status st = open_device(ib);
    if (st != PLAIT_OK) return st;

    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    if (ibv_query_device(ib->ctx, &da) != 0 || ibv_query_port(ib->ctx, ib->port, &pa) != 0)
        return open_fail(ib, PLAIT_ERR_SYSTEM, "cannot query %s port %d: %s", ib->dev, ib->port, strerror(errno));
    ib->link_layer = pa.link_layer;
    ib->lid = pa.lid;
    ib->mtu = pa.active_mtu;
    ib->max_rd_atomic = da.max_qp_rd_atom < MAX_RD_ATOMIC ? da.max_qp_rd_atom : MAX_RD_ATOMIC;
    if (ib->max_rd_atomic < 1) ib->max_rd_atomic = 1;
    int ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    ib->gid_index = cfg->gid_index >= 0 ? cfg->gid_index : ethernet ? pick_gid(ib->ctx, ib->port) : 0;
    if ((ethernet || cfg->gid_index >= 0) && ibv_query_gid(ib->ctx, ib->port, ib->gid_index, &ib->gid) != 0)
        return open_fail(ib, PLAIT_ERR_INVALID_CONFIG, "%s port %d has no GID at index %d ([comm.verbs] gid_index): %s",
                         ib->dev, ib->port, ib->gid_index, strerror(errno));
    snprintf(ib->where, sizeof ib->where, "%s port %d (%s, %s %d)", ib->dev, ib->port,
             ethernet ? "RoCE" : "InfiniBand", ethernet ? "GID index" : "LID", ethernet ? ib->gid_index : ib->lid);

    if (cfg->sq_depth > da.max_qp_wr || cfg->rx_depth > da.max_srq_wr)
        return open_fail(ib, PLAIT_ERR_INVALID_CONFIG,
                         "%s allows %d work requests per queue and %d per shared receive queue; lower [comm.verbs] "
                         "sq_depth (%d) or rx_depth (%d)", ib->dev, da.max_qp_wr, da.max_srq_wr, cfg->sq_depth,
                         cfg->rx_depth);
    long want_cq = (long)cfg->rx_depth + (long)cfg->tx_depth + (long)(size - 1) * cfg->sq_depth;
    ib->cq_size = want_cq < da.max_cqe ? (int)want_cq : da.max_cqe;
    if (ib->cq_size < cfg->rx_depth + 2 * cfg->sq_depth)
        return open_fail(ib, PLAIT_ERR_INVALID_CONFIG,
                         "%s completion queues hold at most %d entries, too few for [comm.verbs] rx_depth = %d and "
                         "sq_depth = %d; lower them", ib->dev, da.max_cqe, cfg->rx_depth, cfg->sq_depth);
    ib->pd = ibv_alloc_pd(ib->ctx);
    ib->ch = ib->pd ? ibv_create_comp_channel(ib->ctx) : NULL;
    ib->cq = ib->ch ? ibv_create_cq(ib->ctx, ib->cq_size, ib, ib->ch, 0) : NULL;
    struct ibv_srq_init_attr sa = {.attr = {.max_wr = (uint32_t)cfg->rx_depth, .max_sge = 1}};
    ib->srq = ib->cq ? ibv_create_srq(ib->pd, &sa) : NULL;
    if (!ib->srq)
        return open_fail(ib, PLAIT_ERR_SYSTEM, "cannot create the %s of %s: %s",
                         !ib->pd ? "protection domain" : !ib->ch ? "completion channel"
                                                      : !ib->cq ? "completion queue" : "shared receive queue",
                         ib->dev, strerror(errno));
    if (ibv_req_notify_cq(ib->cq, 0) != 0)
        return open_fail(ib, PLAIT_ERR_SYSTEM, "cannot arm the completion queue of %s: %s", ib->dev, strerror(errno));

    ib->qps = calloc((size_t)size, sizeof *ib->qps);
    ib->psn = calloc((size_t)size, sizeof *ib->psn);
    ib->map_cap = 16;
    while (ib->map_cap < 2 * (size_t)size) ib->map_cap *= 2;
    ib->map_qpn = calloc(ib->map_cap, sizeof *ib->map_qpn);
    ib->map_peer = calloc(ib->map_cap, sizeof *ib->map_peer);
    if (!ib->qps || !ib->psn || !ib->map_qpn || !ib->map_peer)
        return open_fail(ib, PLAIT_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < ib->map_cap; i++) ib->map_peer[i] = -1;
    for (int p = 0; p < size; p++) {
        if (p == rank) continue;
        struct ibv_qp_init_attr qa = {.send_cq = ib->cq,
                                      .recv_cq = ib->cq,
                                      .srq = ib->srq,
                                      .qp_type = IBV_QPT_RC,
                                      .cap = {.max_send_wr = (uint32_t)cfg->sq_depth,
                                              .max_send_sge = 1,
                                              .max_inline_data = MAX_INLINE}};
        struct ibv_qp *qp = ibv_create_qp(ib->pd, &qa);
        if (!qp) {
            qa.cap.max_inline_data = 0; /* some devices have no inline data */
            qp = ibv_create_qp(ib->pd, &qa);
        }
        if (!qp)
            return open_fail(ib, PLAIT_ERR_SYSTEM, "cannot create queue pair %d of %d on %s: %s", p, size, ib->dev,
                             strerror(errno));
        ib->max_inline = qa.cap.max_inline_data;
        ib->qps[p] = qp;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                                .pkey_index = 0,
                                .port_num = ib->port,
                                .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ};
        int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (rc != 0)
            return open_fail(ib, PLAIT_ERR_SYSTEM, "queue pair for rank %d: INIT failed: %s", p, strerror(rc));
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) r = (uint32_t)(p * 2654435761u);
        ib->psn[p] = r & 0xffffff;
        size_t k = (qp->qp_num * 2654435761u) & (ib->map_cap - 1);
        while (ib->map_peer[k] >= 0) k = (k + 1) & (ib->map_cap - 1);
        ib->map_qpn[k] = qp->qp_num;
        ib->map_peer[k] = p;
    }
    return PLAIT_OK;
}

static int peer_of_qpn(const vb_ib *ib, uint32_t qpn) {
    size_t k = (qpn * 2654435761u) & (ib->map_cap - 1);
    while (ib->map_peer[k] >= 0) {
        if (ib->map_qpn[k] == qpn) return ib->map_peer[k];
        k = (k + 1) & (ib->map_cap - 1);
    }
    return -1;
}

const char *vb_ib_where(const vb_ib *ib) { return ib->where; }

int vb_ib_send_budget(const vb_ib *ib) { return ib->cq_size - ib->cfg.rx_depth; }

/* ---- connect ----------------------------------------------------------------- */

static plait_status connect_qp(vb_ib *ib, int p, const vb_port_info *pi, const vb_qp_info *q) {
    const plait_host *h = ib->host;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ib->mtu < (enum ibv_mtu)pi->mtu ? ib->mtu : (enum ibv_mtu)pi->mtu;
    a.dest_qp_num = q->qpn;
    a.rq_psn = q->psn;
    /* the responder's resources must cover the requester's depth: use the
     * smaller of the two ends' limits in both directions */
    int rd = ib->max_rd_atomic < (int)pi->max_rd_atomic ? ib->max_rd_atomic : (int)pi->max_rd_atomic;
    if (rd < 1) rd = 1;
    a.max_dest_rd_atomic = (uint8_t)rd;
    a.min_rnr_timer = 12; /* 0.64 ms */
    a.ah_attr.dlid = pi->lid;
    a.ah_attr.sl = (uint8_t)ib->cfg.sl;
    a.ah_attr.port_num = ib->port;
    if (ib->link_layer == IBV_LINK_LAYER_ETHERNET || ib->cfg.gid_index >= 0) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, pi->gid, 16);
        a.ah_attr.grh.sgid_index = (uint8_t)ib->gid_index;
        a.ah_attr.grh.hop_limit = 255;
        a.ah_attr.grh.traffic_class = (uint8_t)ib->cfg.traffic_class;
    }
    int rc = ibv_modify_qp(ib->qps[p], &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0)
        return h->set_error(PLAIT_ERR_SYSTEM, "verbs: queue pair to rank %d (%s on %s): ready-to-receive failed: %s",
                            p, pi->dev, pi->host, strerror(rc));
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)ib->cfg.ib_timeout;
    a.retry_cnt = (uint8_t)ib->cfg.ib_retry;
    a.rnr_retry = 7; /* infinite: the SRQ refills as fast as the progress thread runs */
    a.sq_psn = ib->psn[p];
    a.max_rd_atomic = (uint8_t)rd;
    rc = ibv_modify_qp(ib->qps[p], &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0)
        return h->set_error(PLAIT_ERR_SYSTEM, "verbs: queue pair to rank %d (%s on %s): ready-to-send failed: %s", p,
                            pi->dev, pi->host, strerror(rc));
    return PLAIT_OK;
}

plait_status vb_ib_exchange(vb_ib *ib, const plait_bootstrap *bs, const char *failed_why,
                            const uint32_t **peer_credits, int *exchanged) {
    const plait_host *h = ib->host;
    *exchanged = 0;
    int n = bs->size;
    size_t block = sizeof(vb_port_info) + (size_t)n * sizeof(vb_qp_info);
    char *mine = calloc(1, block), *all = calloc((size_t)n, block);
    ib->infos = calloc((size_t)n, sizeof *ib->infos);
    ib->credits = calloc((size_t)n, sizeof *ib->credits);
    if (!mine || !all || !ib->infos || !ib->credits) {
        free(mine);
        free(all);
        return h->set_error(PLAIT_ERR_NO_MEMORY, "verbs: out of memory");
    }
    vb_port_info *pi = (vb_port_info *)mine;
    pi->magic = VB_INFO_MAGIC;
    pi->version = VB_WIRE_VERSION;
    pi->ok = failed_why == NULL;
    snprintf(pi->host, sizeof pi->host, "%s", ib->host_name);
    snprintf(pi->dev, sizeof pi->dev, "%s", ib->dev[0] ? ib->dev : "-");
    if (failed_why) snprintf(pi->reason, sizeof pi->reason, "%s", failed_why);
    pi->link_layer = ib->link_layer;
    pi->port = ib->port;
    pi->lid = ib->lid;
    pi->mtu = (uint8_t)ib->mtu;
    memcpy(pi->gid, ib->gid.raw, 16);
    pi->gid_index = ib->gid_index;
    pi->eager_max = ib->cfg.eager_max;
    pi->credits = (uint32_t)ib->cfg.credits;
    pi->max_rd_atomic = (uint32_t)ib->max_rd_atomic;
    vb_qp_info *qi = (vb_qp_info *)(mine + sizeof(vb_port_info));
    for (int p = 0; !failed_why && p < n; p++)
        if (ib->qps && ib->qps[p]) qi[p] = (vb_qp_info){ib->qps[p]->qp_num, ib->psn[p]};
    plait_status st = bs->allgather(bs->ctx, mine, all, block);
    if (st != PLAIT_OK) st = h->set_error(st, "verbs: exchanging queue pair addresses: %s", h->last_error());
    else *exchanged = 1;
    for (int p = 0; st == PLAIT_OK && p < n; p++) {
        memcpy(&ib->infos[p], all + (size_t)p * block, sizeof(vb_port_info));
        const vb_port_info *in = &ib->infos[p];
        ib->credits[p] = in->credits;
        if (in->magic != VB_INFO_MAGIC || in->version != VB_WIRE_VERSION)
            st = h->set_error(PLAIT_ERR_ABI, "verbs: rank %d runs a different verbs plugin (wire version %u, ours %u)",
                              p, in->version, VB_WIRE_VERSION);
        else if (!in->ok && p != bs->rank)
            st = h->set_error(PLAIT_ERR_UNSUPPORTED, "verbs: rank %d (host %.64s) cannot take part: %.192s", p, in->host,
                              in->reason);
        else if (in->ok && failed_why == NULL && in->eager_max != ib->cfg.eager_max)
            st = h->set_error(PLAIT_ERR_INVALID_CONFIG,
                              "verbs: ranks disagree on [comm.verbs] eager_max: rank %d has %u, rank %d has %u; set "
                              "the same value everywhere", p, in->eager_max, bs->rank, ib->cfg.eager_max);
        else if (in->ok && failed_why == NULL && in->link_layer != ib->link_layer)
            st = h->set_error(PLAIT_ERR_INVALID_CONFIG,
                              "verbs: rank %d uses %s (%s) but rank %d uses %s (%s); pick ports of one fabric with "
                              "[comm.verbs] device", p, in->dev, in->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                              bs->rank, ib->dev, ib->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
    }
    if (failed_why && st == PLAIT_OK) st = h->set_error(PLAIT_ERR_UNSUPPORTED, "verbs: %s", failed_why);
    for (int p = 0; st == PLAIT_OK && p < n; p++) {
        if (p == bs->rank) continue;
        const vb_qp_info *q = (const vb_qp_info *)(all + (size_t)p * block + sizeof(vb_port_info)) + bs->rank;
        st = connect_qp(ib, p, &ib->infos[p], q);
    }
    free(mine);
    free(all);
    *peer_credits = ib->credits;
    return st;
}

/* ---- fabric operations (engine mutex held) ------------------------------------ */

static int f_post_send(void *fab, int peer, uint64_t wr_id, const void *buf, uint32_t len, uint32_t lkey) {
    vb_ib *ib = fab;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED | (len <= ib->max_inline ? IBV_SEND_INLINE : 0)};
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(ib->qps[peer], &wr, &bad);
}

static int f_post_read(void *fab, int peer, uint64_t wr_id, void *local, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                       uint32_t len) {
    vb_ib *ib = fab;
    struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(ib->qps[peer], &wr, &bad);
}

static int f_post_recv(void *fab, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey) {
    vb_ib *ib = fab;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    return ibv_post_srq_recv(ib->srq, &wr, &bad);
}

static int f_poll(void *fab, vb_cqe *out, int max) {
    vb_ib *ib = fab;
    struct ibv_wc wc[32];
    if (max > 32) max = 32;
    int n = ibv_poll_cq(ib->cq, max, wc);
    if (n < 0) {
        ib->host->log(PLAIT_LOG_ERROR, VB_COMPONENT, "ibv_poll_cq on %s failed (%d): the completion queue is broken",
                      ib->dev, n);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        out[i].wr_id = wc[i].wr_id;
        out[i].peer = peer_of_qpn(ib, wc[i].qp_num);
        out[i].ok = wc[i].status == IBV_WC_SUCCESS;
        out[i].status = ibv_wc_status_str(wc[i].status);
        out[i].vendor_err = wc[i].vendor_err;
        out[i].byte_len = wc[i].byte_len;
    }
    return n;
}

static int f_reg(void *fab, void *addr, size_t len, vb_mr *out) {
    vb_ib *ib = fab;
    struct ibv_mr *mr = ibv_reg_mr(ib->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!mr) return errno ? errno : ENOMEM;
    out->handle = mr;
    out->lkey = mr->lkey;
    out->rkey = mr->rkey;
    return 0;
}

static void f_dereg(void *fab, vb_mr *mr) {
    (void)fab;
    if (mr->handle) ibv_dereg_mr(mr->handle);
    mr->handle = NULL;
}

static void f_kill_peer(void *fab, int peer) {
    vb_ib *ib = fab;
    if (!ib->qps || !ib->qps[peer]) return;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(ib->qps[peer], &a, IBV_QP_STATE);
}

static void f_describe_peer(void *fab, int peer, char *buf, size_t cap) {
    vb_ib *ib = fab;
    if (ib->infos && peer >= 0 && peer < ib->size)
        snprintf(buf, cap, "%s port %u on %s", ib->infos[peer].dev, ib->infos[peer].port, ib->infos[peer].host);
    else
        snprintf(buf, cap, "?");
}

const vb_fabric_ops vb_ib_ops = {f_post_send, f_post_read, f_post_recv, f_poll,
                                 f_reg,       f_dereg,     f_kill_peer, f_describe_peer};

/* ---- progress thread ------------------------------------------------------------ */

static void on_async_event(vb_ib *ib, struct ibv_async_event *ev) {
    const char *what = ibv_event_type_str(ev->event_type);
    switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
        int p = peer_of_qpn(ib, ev->element.qp->qp_num);
        char why[256];
        snprintf(why, sizeof why, "the connection to rank %d failed (%s on %s)", p, what, ib->dev);
        if (p >= 0) {
            pthread_mutex_lock(&ib->eng->mu);
            vb_fail_peer(ib->eng, p, PLAIT_ERR_PEER_LOST, why);
            pthread_mutex_unlock(&ib->eng->mu);
        }
        break;
    }
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_CQ_ERR: {
        char why[256];
        snprintf(why, sizeof why, "%s reported %s; no transfer can continue", ib->dev, what);
        pthread_mutex_lock(&ib->eng->mu);
        for (int p = 0; p < ib->size; p++)
            if (p != ib->rank) vb_fail_peer(ib->eng, p, PLAIT_ERR_SYSTEM, why);
        pthread_mutex_unlock(&ib->eng->mu);
        break;
    }
    case IBV_EVENT_PORT_ERR:
        ib->host->log(PLAIT_LOG_WARN, VB_COMPONENT, "%s port %d went down; transfers fail if it stays down", ib->dev,
                      ev->element.port_num);
        break;
    default: ib->host->log(PLAIT_LOG_DEBUG, VB_COMPONENT, "%s: asynchronous event %s", ib->dev, what); break;
    }
}

static void *progress_main(void *arg) {
    vb_ib *ib = arg;
    struct pollfd fds[3] = {{.fd = ib->ch->fd, .events = POLLIN},
                            {.fd = ib->ctx->async_fd, .events = POLLIN},
                            {.fd = ib->wake_fd, .events = POLLIN}};
    while (!ib->stop) {
        int n = poll(fds, 3, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            ib->host->log(PLAIT_LOG_ERROR, VB_COMPONENT, "progress thread: poll: %s", strerror(errno));
            break;
        }
        if (ib->stop) break;
        if (fds[1].revents & POLLIN) {
            struct ibv_async_event ev;
            while (ibv_get_async_event(ib->ctx, &ev) == 0) {
                on_async_event(ib, &ev);
                ibv_ack_async_event(&ev);
            }
        }
        if (fds[0].revents & POLLIN) {
            struct ibv_cq *cq;
            void *cq_ctx;
            while (ibv_get_cq_event(ib->ch, &cq, &cq_ctx) == 0) ibv_ack_cq_events(cq, 1);
            /* re-arm, then drain: a completion after the drain raises a new event */
            ibv_req_notify_cq(ib->cq, 0);
            pthread_mutex_lock(&ib->eng->mu);
            vb_progress(ib->eng);
            pthread_mutex_unlock(&ib->eng->mu);
        }
    }
    return NULL;
}

static int set_nonblocking(int fd) {
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

plait_status vb_ib_start(vb_ib *ib, vb_engine *e) {
    ib->eng = e;
    ib->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ib->wake_fd < 0 || set_nonblocking(ib->ch->fd) != 0 || set_nonblocking(ib->ctx->async_fd) != 0)
        return ib->host->set_error(PLAIT_ERR_SYSTEM, "verbs: cannot set up the progress thread: %s", strerror(errno));
    if (pthread_create(&ib->thread, NULL, progress_main, ib) != 0)
        return ib->host->set_error(PLAIT_ERR_SYSTEM, "verbs: cannot start the progress thread");
    ib->has_thread = 1;
    return PLAIT_OK;
}

void vb_ib_stop(vb_ib *ib) {
    if (!ib || !ib->has_thread) return;
    ib->stop = 1;
    uint64_t one = 1;
    (void)!write(ib->wake_fd, &one, sizeof one);
    pthread_join(ib->thread, NULL);
    ib->has_thread = 0;
}

void vb_ib_destroy_qps(vb_ib *ib) {
    if (!ib || !ib->qps) return;
    for (int p = 0; p < ib->size; p++)
        if (ib->qps[p]) {
            ibv_destroy_qp(ib->qps[p]);
            ib->qps[p] = NULL;
        }
    if (ib->srq) ibv_destroy_srq(ib->srq);
    ib->srq = NULL;
}

void vb_ib_close(vb_ib *ib) {
    if (!ib) return;
    vb_ib_stop(ib);
    vb_ib_destroy_qps(ib);
    if (ib->cq) ibv_destroy_cq(ib->cq);
    if (ib->ch) ibv_destroy_comp_channel(ib->ch);
    if (ib->pd) ibv_dealloc_pd(ib->pd);
    if (ib->ctx) ibv_close_device(ib->ctx);
    if (ib->wake_fd >= 0) close(ib->wake_fd);
    free(ib->qps);
    free(ib->psn);
    free(ib->map_qpn);
    free(ib->map_peer);
    free(ib->infos);
    free(ib->credits);
    free(ib);
}
