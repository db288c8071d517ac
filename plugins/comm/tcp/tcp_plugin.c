/*
 * The TCP comm plugin: descriptor, [comm.tcp] keys, and the plait_comm_ops
 * entry points (communicator life cycle; the data path is tcp_send.c, tcp_recv.c
 * and tcp_progress.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp.h"

static const plait_host *g_host;

#define P(k, type, def, lo, hi, flags, doc) {sizeof(plait_key_decl), (flags), (k), (type), (def), (lo), (hi), NULL, (doc)}

static const char *const g_cma_choices[] = {"auto", "off", NULL};

static const plait_key_decl g_keys[] = {
    P("streams", PLAIT_KEY_INT, "2", 1, 16, PLAIT_KEY_SAME_ON_ALL,
      "sockets per pair of ranks; messages above chunk_size are striped over them"),
    P("ifname", PLAIT_KEY_STRING, "", 1, 0, 0,
      "network interface (exact name, else prefix, as NCCL_SOCKET_IFNAME); empty = loopback when every rank "
      "is on this host, else the card nearest the rank's GPU or cores where [run] bind placed it and its "
      "interface has an address, else the first interface that is up and not loopback/docker/virbr/veth"),
    P("sndbuf", PLAIT_KEY_BYTES, "0", 0, 1073741824.0, 0, "socket send buffer (SO_SNDBUF); 0 = kernel autotuning"),
    P("rcvbuf", PLAIT_KEY_BYTES, "0", 0, 1073741824.0, 0, "socket receive buffer (SO_RCVBUF); 0 = kernel autotuning"),
    P("chunk_size", PLAIT_KEY_BYTES, "512K", 4096, 1073741824.0, PLAIT_KEY_SAME_ON_ALL,
      "largest frame payload: longer messages are cut into chunks of this size and striped over the streams"),
    P("max_message", PLAIT_KEY_BYTES, "64G", 1, 1125899906842624.0, 0,
      "largest message accepted from a peer; a frame announcing more is treated as garbage"),
    {sizeof(plait_key_decl), 0, "cma", PLAIT_KEY_ENUM, "auto", 1, 0, g_cma_choices,
     "single copy to ranks on the same host: auto (where process_vm_readv is allowed, tested at start-up) or off "
     "(every byte through the sockets)"},
    P("cma_min", PLAIT_KEY_BYTES, "256K", 1, 1125899906842624.0, 0,
      "messages of at least this size go by single copy to same-host ranks (with cma = auto)"),
    P("spin_us", PLAIT_KEY_INT, "50", 0, 100000, 0,
      "microseconds a waiting caller polls its sockets, yielding the CPU between polls, before it sleeps in "
      "epoll: a reply that comes sooner skips the sleep and wake-up (0 = sleep at once)"),
    P("progress_thread", PLAIT_KEY_BOOL, "true", 1, 0, PLAIT_KEY_HIDDEN,
      "testing: move large transfers from a background thread while the caller computes (false: only inside "
      "test/wait)"),
};

/* ---- life cycle --------------------------------------------------------- */

static void engine_free(tcp_engine *e) {
    if (!e) return;
    if (e->ep >= 0 || e->cep >= 0 || e->has_thread) {
        tcp_engine_stop(e);
    } else {
        if (e->peers)
            for (int p = 0; p < e->size; p++) {
                if (!e->peers[p].conns) continue;
                for (int s = 0; s < e->cfg.streams; s++)
                    if (e->peers[p].conns[s].fd >= 0) close(e->peers[p].conns[s].fd);
                free(e->peers[p].conns);
            }
        free(e->peers);
        if (e->listen_fd >= 0) close(e->listen_fd);
        if (e->wake_fd >= 0) close(e->wake_fd);
        if (e->cwake_fd >= 0) close(e->cwake_fd);
    }
    free(e);
}

/* long: the engine set up in the order the peers depend on (settings,
 * listening socket, the address exchange, connections, threads), each
 * failure through one exit that undoes what came before */
static plait_status tcp_init(const plait_comm_init *args, void **out) {
    const plait_host *h = args->host ? args->host : g_host;
    const plait_bootstrap *bs = args->bootstrap;
    tcp_engine *e = calloc(1, sizeof *e);
    tcp_comm *cm = calloc(1, sizeof *cm);
    tcp_addr_info *infos = NULL;
    plait_status st = PLAIT_OK;
    if (!e || !cm) {
        st = h->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
        goto fail;
    }
    e->host = h;
    e->listen_fd = e->ep = e->cep = e->wake_fd = e->cwake_fd = -1;
    e->rank = bs->rank;
    e->size = bs->size;
    st = tcp_read_settings(h, args->config, &e->cfg);
    if (st != PLAIT_OK) goto fail;
    e->peers = calloc((size_t)e->size, sizeof *e->peers);
    infos = calloc((size_t)e->size, sizeof *infos);
    if (!e->peers || !infos) {
        st = h->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
        goto fail;
    }
    for (int p = 0; p < e->size; p++) {
        if (p == e->rank) continue;
        e->peers[p].conns = calloc((size_t)e->cfg.streams, sizeof(tcp_conn));
        if (!e->peers[p].conns) {
            st = h->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
            goto fail;
        }
        for (int s = 0; s < e->cfg.streams; s++) e->peers[p].conns[s].fd = -1;
    }

    /* listen where the peers can reach us */
    tcp_addr_info mine;
    memset(&mine, 0, sizeof mine);
    struct sockaddr_storage ss;
    socklen_t sl = 0;
    st = tcp_pick_address(h, &e->cfg, bs->local_size == bs->size, &mine, &ss, &sl);
    if (st != PLAIT_OK) goto fail;
    e->listen_fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (e->listen_fd < 0 || bind(e->listen_fd, (struct sockaddr *)&ss, sl) != 0 || listen(e->listen_fd, 512) != 0) {
        st = h->set_error(PLAIT_ERR_SYSTEM, "tcp: rank %d cannot listen on interface %s: %s", e->rank, mine.ifname,
                          strerror(errno));
        goto fail;
    }
    sl = sizeof ss;
    getsockname(e->listen_fd, (struct sockaddr *)&ss, &sl);
    mine.port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                : ((struct sockaddr_in *)&ss)->sin_port);
    mine.magic = TCP_ADDR_MAGIC;
    mine.version = TCP_WIRE_VERSION;
    mine.streams = (uint16_t)e->cfg.streams;
    if (getrandom(e->secret, sizeof e->secret, 0) != (ssize_t)sizeof e->secret) {
        st = h->set_error(PLAIT_ERR_SYSTEM, "tcp: getrandom: %s", strerror(errno));
        goto fail;
    }
    memcpy(mine.secret, e->secret, sizeof e->secret);
    tcp_cma_describe(e, &mine);
    char ip[INET6_ADDRSTRLEN] = "?";
    inet_ntop(mine.family, mine.addr, ip, sizeof ip);
    snprintf(e->my_addr, sizeof e->my_addr, mine.family == AF_INET6 ? "[%s]:%u" : "%s:%u", ip, mine.port);

    /* exchange addresses (the key is for diagnostics and tests) */
    char key[32];
    snprintf(key, sizeof key, "tcp.addr.%d", e->rank);
    st = bs->set(bs->ctx, key, &mine, sizeof mine);
    if (st == PLAIT_OK) st = bs->allgather(bs->ctx, &mine, infos, sizeof mine);
    if (st != PLAIT_OK) {
        st = h->set_error(st, "tcp: exchanging addresses: %s", h->last_error());
        goto fail;
    }
    for (int p = 0; p < e->size; p++) {
        const tcp_addr_info *in = &infos[p];
        if (in->magic != TCP_ADDR_MAGIC || in->version != TCP_WIRE_VERSION) {
            st = h->set_error(PLAIT_ERR_ABI, "tcp: rank %d runs a different tcp plugin (wire version %u, ours %u)", p,
                              in->version, TCP_WIRE_VERSION);
            goto fail;
        }
        if (in->streams != e->cfg.streams) {
            st = h->set_error(PLAIT_ERR_INVALID_CONFIG,
                              "tcp: ranks disagree on [comm.tcp] streams: rank %d has %u, rank %d has %d; set the "
                              "same value everywhere", p, in->streams, e->rank, e->cfg.streams);
            goto fail;
        }
        char pip[INET6_ADDRSTRLEN] = "?";
        inet_ntop(in->family, in->addr, pip, sizeof pip);
        snprintf(e->peers[p].addr, sizeof e->peers[p].addr, in->family == AF_INET6 ? "[%s]:%u" : "%s:%u", pip,
                 in->port);
    }
    st = tcp_cma_setup(e, bs, infos);
    if (st != PLAIT_OK) goto fail;
    h->log(bs->local_rank == 0 ? PLAIT_LOG_INFO : PLAIT_LOG_DEBUG, TCP_COMPONENT,
           "rank %d uses interface %s, listening on %s; %d stream%s per peer, %llu-byte chunks", e->rank, mine.ifname,
           e->my_addr, e->cfg.streams, e->cfg.streams == 1 ? "" : "s", (unsigned long long)e->cfg.chunk_size);

    st = tcp_connect_all(e, infos, bs->timeout_s);
    if (st != PLAIT_OK) goto fail;
    st = tcp_engine_start(e);
    if (st != PLAIT_OK) goto fail;

    cm->eng = e;
    cm->id = bs->comm_id;
    cm->rank = e->rank;
    cm->size = e->size;
    cm->is_world = 1;
    cm->world_of = malloc(sizeof(int) * (size_t)e->size);
    if (!cm->world_of) {
        st = h->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
        goto fail;
    }
    for (int i = 0; i < e->size; i++) cm->world_of[i] = i;
    st = tcp_comm_register(e, cm);
    if (st != PLAIT_OK) goto fail;
    free(infos);
    *out = cm;
    return PLAIT_OK;
fail:
    free(infos);
    if (cm) free(cm->world_of);
    free(cm);
    engine_free(e);
    return st;
}

static plait_status tcp_derive(void *parent_v, const plait_comm_derive *args, void **out) {
    tcp_comm *parent = parent_v;
    tcp_engine *e = parent->eng;
    const plait_bootstrap *bs = args->bootstrap;
    if (args->size < 1 || args->rank < 0 || args->rank >= args->size || !args->members || bs->comm_id == 0)
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: derive: bad arguments (size %d, rank %d, id %u)",
                                  args->size, args->rank, bs->comm_id);
    tcp_comm *c = calloc(1, sizeof *c);
    if (c) c->world_of = malloc(sizeof(int) * (size_t)args->size);
    if (!c || !c->world_of) {
        if (c) free(c);
        return e->host->set_error(PLAIT_ERR_NO_MEMORY, "tcp: out of memory");
    }
    for (int i = 0; i < args->size; i++) {
        int pr = args->members[i];
        if (pr < 0 || pr >= parent->size) {
            free(c->world_of);
            free(c);
            return e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: derive: member %d is parent rank %d of %d", i, pr,
                                      parent->size);
        }
        c->world_of[i] = parent->world_of[pr];
    }
    if (c->world_of[args->rank] != e->rank) {
        int w = c->world_of[args->rank];
        free(c->world_of);
        free(c);
        return e->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: derive: child rank %d is world rank %d, not this rank %d",
                                  args->rank, w, e->rank);
    }
    c->eng = e;
    c->id = bs->comm_id;
    c->rank = args->rank;
    c->size = args->size;
    plait_status st = tcp_comm_register(e, c);
    /* nobody sends on the child before every member knows it */
    if (st == PLAIT_OK) {
        st = bs->barrier(bs->ctx);
        if (st != PLAIT_OK) {
            st = e->host->set_error(st, "tcp: creating communicator %u: %s", c->id, e->host->last_error());
            tcp_comm_unregister(c);
        }
    }
    if (st != PLAIT_OK) {
        free(c->world_of);
        free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

static void tcp_destroy(void *v) {
    tcp_comm *c = v;
    if (!c) return;
    tcp_engine *e = c->eng;
    tcp_comm_unregister(c);
    if (c->is_world) engine_free(e);
    free(c->world_of);
    free(c);
}

static void tcp_abort_op(void *v, const char *reason) { tcp_abort(v, reason); }

static plait_status check_buffer(tcp_comm *c, const plait_buffer *b) {
    if (b->kind != PLAIT_MEM_HOST && b->kind != PLAIT_MEM_HOST_PINNED)
        return c->eng->host->set_error(PLAIT_ERR_UNSUPPORTED, "tcp: moves host memory only (buffer kind %d)", b->kind);
    if (!b->ptr && b->bytes)
        return c->eng->host->set_error(PLAIT_ERR_INVALID_ARG, "tcp: NULL buffer of %zu bytes", b->bytes);
    return PLAIT_OK;
}

static plait_status op_isend(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    (void)mr;
    plait_status st = check_buffer(comm, buf);
    return st != PLAIT_OK ? st : tcp_isend(comm, buf, peer, tag, (tcp_req **)req);
}

static plait_status op_irecv(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr, void **req) {
    (void)mr;
    plait_status st = check_buffer(comm, buf);
    return st != PLAIT_OK ? st : tcp_irecv(comm, buf, peer, tag, (tcp_req **)req);
}

static plait_status op_test(void *comm, void *req, int *done, size_t *bytes) {
    return tcp_test(comm, req, done, bytes);
}

static plait_status op_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    return tcp_wait(comm, req, timeout_s, bytes);
}

static plait_status tcp_probe(const plait_host *host) {
    (void)host;
    return PLAIT_OK; /* TCP works everywhere */
}

static const plait_comm_ops g_ops = {
    .struct_size = sizeof(plait_comm_ops),
    .flags = PLAIT_COMM_ASYNC_PROGRESS,
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED),
    .init = tcp_init,
    .derive = tcp_derive,
    .destroy = tcp_destroy,
    .abort = tcp_abort_op,
    .reg = NULL,
    .dereg = NULL,
    .isend = op_isend,
    .irecv = op_irecv,
    .test = op_test,
    .wait = op_wait,
    .native_coll = NULL,
};

static const plait_plugin_desc g_desc = {
    PLAIT_PLUGIN_DESC_HEAD(PLAIT_KIND_COMM, "tcp", PLAIT_ABI_MINOR),
    .version = "0.1.0",
    .description = "TCP sockets: every pair of ranks, striped streams, epoll progress (works everywhere)",
    .keys = g_keys,
    .n_keys = sizeof g_keys / sizeof g_keys[0],
    .key_size = sizeof(plait_key_decl),
    .probe = tcp_probe,
    .ops = &g_ops,
    .uses = NULL,
    .report = tcp_report,
};

PLAIT_PLUGIN_DEFINE_ENTRY("comm/tcp", 0, &g_host, &g_desc)
