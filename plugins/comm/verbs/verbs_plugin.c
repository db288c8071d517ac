/*
 * The verbs comm plugin: descriptor, [comm.verbs] keys, probe, and the
 * plait_comm_ops entry points (communicator life cycle over verbs_ib.c and
 * the engine of verbs_engine.c / verbs_recv.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verbs.h"
#include "verbs_ib.h"

static const plait_host *g_host;

#define P(k, type, def, lo, hi, flags, doc) {sizeof(plait_key_decl), (flags), (k), (type), (def), (lo), (hi), NULL, (doc)}

static const plait_key_decl g_keys[] = {
    P("device", PLAIT_KEY_STRING, "", 1, 0, 0,
      "RDMA device, optionally with its port, as NCCL_IB_HCA: mlx5_0 or mlx5_0:1; empty = in a job on several "
      "hosts, the card nearest the rank's GPU or cores where [run] bind placed it, else the first device with an "
      "active port"),
    P("port", PLAIT_KEY_INT, "0", 0, 255, 0, "port of the device; 0 = its first active port"),
    P("gid_index", PLAIT_KEY_INT, "-1", -1, 1023, 0,
      "GID table index (RoCE, or routed InfiniBand); -1 = InfiniBand: none, RoCE: a RoCE v2 GID with an IPv4 "
      "address, else the first RoCE v2 one"),
    P("eager_max", PLAIT_KEY_BYTES, "8K", 64, 1048576.0, PLAIT_KEY_SAME_ON_ALL,
      "messages up to this size are copied through bounce buffers; longer ones are read by the receiver with RDMA "
      "READ straight from the sender's buffer"),
    P("credits", PLAIT_KEY_INT, "64", 2, 65535, 0,
      "eager and control messages a peer may have in flight to this rank before it waits for a credit grant"),
    P("rx_depth", PLAIT_KEY_INT, "512", 16, 1048576, 0, "receive bounce buffers in the shared receive queue"),
    P("tx_depth", PLAIT_KEY_INT, "256", 16, 1048576, 0,
      "bounce buffers for eager sends and control messages, shared by all peers"),
    P("sq_depth", PLAIT_KEY_INT, "128", 4, 65536, 0, "work requests in flight per queue pair (sends and READs)"),
    P("max_read", PLAIT_KEY_BYTES, "1G", 4096, 2147483648.0, 0,
      "largest single RDMA READ; longer messages are read in pieces"),
    P("ib_timeout", PLAIT_KEY_INT, "18", 1, 31, 0,
      "transport ACK timeout exponent: 4.096 us * 2^x per try (18: about 1 s), like NCCL_IB_TIMEOUT"),
    P("retry_cnt", PLAIT_KEY_INT, "7", 0, 7, 0, "transport retries before a connection is declared broken"),
    P("sl", PLAIT_KEY_INT, "0", 0, 15, 0, "InfiniBand service level, like NCCL_IB_SL"),
    P("traffic_class", PLAIT_KEY_INT, "0", 0, 255, 0, "traffic class of RoCE / routed packets, like NCCL_IB_TC"),
    P("max_message", PLAIT_KEY_BYTES, "64G", 1, 1125899906842624.0, 0,
      "largest message accepted from a peer; an RTS announcing more is treated as garbage"),
};

static plait_status read_settings(const plait_host *h, const plait_config *cfg, vb_settings *s) {
    vb_settings_default(s);
    plait_value v;
    if (h->config_get(cfg, "comm.verbs", "device", &v) != PLAIT_OK)
        return h->set_error(PLAIT_ERR_INVALID_CONFIG,
                            "[comm.verbs] settings could not be read (%s); was the plugin's section declared?",
                            h->last_error());
    snprintf(s->device, sizeof s->device, "%s", v.s ? v.s : "");
    s->port = (int)plait_cfg_int(h, cfg, "comm.verbs", "port");
    s->gid_index = (int)plait_cfg_int(h, cfg, "comm.verbs", "gid_index");
    s->eager_max = (uint32_t)plait_cfg_int(h, cfg, "comm.verbs", "eager_max");
    s->credits = (int)plait_cfg_int(h, cfg, "comm.verbs", "credits");
    s->rx_depth = (int)plait_cfg_int(h, cfg, "comm.verbs", "rx_depth");
    s->tx_depth = (int)plait_cfg_int(h, cfg, "comm.verbs", "tx_depth");
    s->sq_depth = (int)plait_cfg_int(h, cfg, "comm.verbs", "sq_depth");
    s->max_read = (uint64_t)plait_cfg_int(h, cfg, "comm.verbs", "max_read");
    s->ib_timeout = (int)plait_cfg_int(h, cfg, "comm.verbs", "ib_timeout");
    s->ib_retry = (int)plait_cfg_int(h, cfg, "comm.verbs", "retry_cnt");
    s->sl = (int)plait_cfg_int(h, cfg, "comm.verbs", "sl");
    s->traffic_class = (int)plait_cfg_int(h, cfg, "comm.verbs", "traffic_class");
    s->max_message = (uint64_t)plait_cfg_int(h, cfg, "comm.verbs", "max_message");
    return PLAIT_OK;
}

static plait_status verbs_probe(const plait_host *h) { return vb_ib_probe(h); }

/* ---- life cycle ---------------------------------------------------------------- */

static void teardown(vb_engine *e, vb_ib *ib) {
    vb_ib_stop(ib);
    vb_ib_destroy_qps(ib);
    vb_engine_free(e); /* deregisters through the still-open protection domain */
    vb_ib_close(ib);
}

static plait_status verbs_init(const plait_comm_init *args, void **out) {
    const plait_host *h = args->host ? args->host : g_host;
    const plait_bootstrap *bs = args->bootstrap;
    *out = NULL;
    vb_settings cfg;
    vb_ib *ib = NULL;
    vb_engine *e = NULL;
    vb_comm *c = NULL;
    char local[448] = "";
    plait_status st = read_settings(h, args->config, &cfg);
    if (st == PLAIT_OK) st = vb_ib_open(h, &cfg, bs->rank, bs->size, &ib);
    if (st != PLAIT_OK) snprintf(local, sizeof local, "%s", h->last_error());
    if (!ib) return st; /* out of memory before anything else */
    /* every rank takes part in the exchange, so a failure anywhere fails
     * everyone at once, with its reason */
    const uint32_t *peer_credits = NULL;
    int exchanged = 0;
    plait_status ex = vb_ib_exchange(ib, bs, st != PLAIT_OK ? local : NULL, &peer_credits, &exchanged);
    if (st != PLAIT_OK) st = h->set_error(st, "%s", local);
    else st = ex;
    if (st == PLAIT_OK) {
        cfg.send_budget = vb_ib_send_budget(ib);
        st = vb_engine_new(h, &cfg, bs->rank, bs->size, ib, &vb_ib_ops, peer_credits, &e);
    }
    /* nobody sends before every rank's receive buffers are posted; a rank
     * that failed since the exchange (connecting, posting) says so here, so
     * nobody waits for it */
    if (exchanged) {
        char mine[160], *all = calloc((size_t)bs->size, sizeof mine);
        memset(mine, 0, sizeof mine);
        if (st != PLAIT_OK) snprintf(mine, sizeof mine, "%s", *h->last_error() ? h->last_error() : "setup failed");
        plait_status agreed = all ? bs->allgather(bs->ctx, mine, all, sizeof mine) : PLAIT_ERR_NO_MEMORY;
        if (st == PLAIT_OK && agreed != PLAIT_OK)
            st = h->set_error(agreed, "verbs: waiting for every rank to connect: %s", h->last_error());
        for (int p = 0; st == PLAIT_OK && all && p < bs->size; p++)
            if (all[(size_t)p * sizeof mine])
                st = h->set_error(PLAIT_ERR_UNSUPPORTED, "verbs: rank %d failed to set up: %.160s", p,
                                  all + (size_t)p * sizeof mine);
        free(all);
    }
    if (st == PLAIT_OK) st = vb_ib_start(ib, e);
    if (st == PLAIT_OK) st = vb_comm_world(e, bs->comm_id, &c);
    if (st != PLAIT_OK) {
        teardown(e, ib);
        return st;
    }
    h->log(bs->local_rank == 0 ? PLAIT_LOG_INFO : PLAIT_LOG_DEBUG, VB_COMPONENT,
           "rank %d uses %s; eager up to %u bytes, %d credits per peer", bs->rank, vb_ib_where(ib), cfg.eager_max,
           cfg.credits);
    *out = c;
    return PLAIT_OK;
}

static plait_status verbs_derive(void *parent_v, const plait_comm_derive *args, void **out) {
    vb_comm *parent = parent_v;
    const plait_bootstrap *bs = args->bootstrap;
    vb_comm *c = NULL;
    *out = NULL;
    plait_status st = vb_comm_derive(parent, bs->comm_id, args->rank, args->size, args->members, &c);
    if (st != PLAIT_OK) return st;
    /* nobody sends on the child before every member knows it */
    st = bs->barrier(bs->ctx);
    if (st != PLAIT_OK) {
        st = parent->eng->host->set_error(st, "verbs: creating communicator %u: %s", c->id,
                                          parent->eng->host->last_error());
        vb_comm_free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

static void verbs_destroy(void *v) {
    vb_comm *c = v;
    if (!c) return;
    vb_engine *e = c->eng;
    int world = c->is_world;
    vb_comm_free(c);
    if (world) teardown(e, e->fab);
}

static void verbs_abort(void *v, const char *reason) { vb_abort(v, reason); }

static plait_status op_reg(void *comm, const plait_buffer *buf, void **mr) {
    vb_comm *c = comm;
    return vb_reg(c->eng, buf, (vb_mr **)mr);
}

static void op_dereg(void *comm, void *mr) {
    vb_comm *c = comm;
    vb_dereg(c->eng, mr);
}

static plait_status op_isend(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    return vb_isend(comm, buf, peer, tag, mr, (vb_req **)req);
}

static plait_status op_irecv(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    return vb_irecv(comm, buf, peer, tag, mr, (vb_req **)req);
}

static plait_status op_test(void *comm, void *req, int *done, size_t *bytes) { return vb_test(comm, req, done, bytes); }

static plait_status op_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    return vb_wait(comm, req, timeout_s, bytes);
}

static const plait_comm_ops g_ops = {
    .struct_size = sizeof(plait_comm_ops),
    .flags = PLAIT_COMM_ASYNC_PROGRESS,
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED),
    .init = verbs_init,
    .derive = verbs_derive,
    .destroy = verbs_destroy,
    .abort = verbs_abort,
    .reg = op_reg,
    .dereg = op_dereg,
    .isend = op_isend,
    .irecv = op_irecv,
    .test = op_test,
    .wait = op_wait,
    .native_coll = NULL,
};

static const plait_plugin_desc g_desc = {
    PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_COMM, "verbs", PLAIT_ABI_MINOR),
    .version = "0.1.0",
    .description = "RDMA over InfiniBand / RoCE (libibverbs): RC queue pairs, eager + RDMA-READ rendezvous",
    .keys = g_keys,
    .n_keys = sizeof g_keys / sizeof g_keys[0],
    .key_size = sizeof(plait_key_decl),
    .probe = verbs_probe,
    .ops = &g_ops,
    .uses = NULL,
    .report = vb_report,
};

PLAIT_PLUGIN_DEFINE_ENTRY("comm/verbs", 0, &g_host, &g_desc)
