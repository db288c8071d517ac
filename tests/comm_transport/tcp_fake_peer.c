/* The fake rank 1 that the TCP plugin's tests talk to (tcp_fake_peer.h). */
#include "tcp_fake_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch/net.h"
#include "config/config.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "../../plugins/comm/tcp/tcp_wire.h"
#include "host/host_table.h"

/* ---- a two-member bootstrap shared by the plugin (rank 0) and the fake --- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    tcp_addr_info info[2];
    int have[2];
} g_bs = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, {{0}}, {0, 0}};

static plait_status bs_set(void *ctx, const char *key, const void *v, size_t n) {
    (void)ctx, (void)key, (void)v, (void)n;
    return PLAIT_OK;
}
static plait_status bs_get(void *ctx, const char *key, void *v, size_t cap, size_t *n) {
    (void)ctx, (void)key, (void)v, (void)cap, (void)n;
    return plait_set_error(PLAIT_ERR_TIMEOUT, "fake bootstrap has no keys");
}
static void publish(int rank, const tcp_addr_info *info) {
    pthread_mutex_lock(&g_bs.mu);
    g_bs.info[rank] = *info;
    g_bs.have[rank] = 1;
    pthread_cond_broadcast(&g_bs.cv);
    pthread_mutex_unlock(&g_bs.mu);
}
static void await(int rank, tcp_addr_info *out) {
    pthread_mutex_lock(&g_bs.mu);
    while (!g_bs.have[rank]) pthread_cond_wait(&g_bs.cv, &g_bs.mu);
    *out = g_bs.info[rank];
    pthread_mutex_unlock(&g_bs.mu);
}
static plait_status bs_allgather(void *ctx, const void *mine, void *all, size_t bytes) {
    (void)ctx;
    if (bytes != sizeof(tcp_addr_info)) { /* the single-copy agreement: the fake reads nothing */
        memset(all, 0, 2 * bytes);
        memcpy(all, mine, bytes);
        return PLAIT_OK;
    }
    publish(0, mine);
    tcp_addr_info *a = all;
    await(0, &a[0]);
    await(1, &a[1]);
    return PLAIT_OK;
}
static plait_status bs_barrier(void *ctx) {
    (void)ctx;
    return PLAIT_OK;
}

plait_bootstrap tcp_fake_bootstrap(void) {
    return (plait_bootstrap){.struct_size = sizeof(plait_bootstrap),
                             .size = 2,
                             .local_size = 2,
                             .timeout_s = 10.0,
                             .set = bs_set,
                             .get = bs_get,
                             .allgather = bs_allgather,
                             .barrier = bs_barrier};
}

/* ---- the fake rank 1 ----------------------------------------------------- */

int g_fds[STREAMS]; /* fake's ends of the plugin's connections, by stream */

static void *fake_peer(void *arg) {
    (void)arg;
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ls = plait_net_listen((struct sockaddr *)&sa, sizeof sa, 8);
    socklen_t sl = sizeof sa;
    getsockname(ls, (struct sockaddr *)&sa, &sl);
    tcp_addr_info me = {0};
    me.magic = TCP_ADDR_MAGIC;
    me.version = TCP_WIRE_VERSION;
    me.family = AF_INET;
    me.port = ntohs(sa.sin_port);
    memcpy(me.addr, &sa.sin_addr, 4);
    memset(me.secret, 0x42, sizeof me.secret);
    me.streams = STREAMS;
    publish(1, &me);
    for (int i = 0; i < STREAMS; i++) {
        int fd = accept(ls, NULL, NULL);
        tcp_hello h;
        if (plait_net_read_all(fd, &h, sizeof h, plait_clock_now() + 10) != 0) return NULL;
        if (h.magic != TCP_HELLO_MAGIC || h.from_rank != 0 || h.to_rank != 1 || h.stream >= STREAMS ||
            memcmp(h.secret, me.secret, sizeof me.secret) != 0)
            return NULL;
        tcp_ack ack = {TCP_ACK_MAGIC, 1};
        plait_net_write_all(fd, &ack, sizeof ack, plait_clock_now() + 10);
        g_fds[h.stream] = fd;
    }
    close(ls);
    return NULL;
}

/* ---- fixture: a fresh world per test ----------------------------------- */

const plait_comm_ops *g_ops;
static plait_config *g_cfg;
void *g_comm;

const char *g_extra_override[3]; /* more [comm.tcp] settings for the next setup */

int tcp_fake_setup(void **state) {
    (void)state;
    memset(g_bs.have, 0, sizeof g_bs.have);
    for (int i = 0; i < STREAMS; i++) g_fds[i] = -1;
    const plait_plugin_desc *d = plait_plugin_load(PLAIT_KIND_COMM, "tcp");
    if (!d) {
        fprintf(stderr, "%s\n", plait_last_error());
        return -1;
    }
    g_ops = d->ops;
    g_cfg = plait_config_new();
    plait_config_declare_core(g_cfg);
    plait_config_declare(g_cfg, "comm.tcp", d->keys, d->n_keys, d->key_size, "tcp");
    plait_config_add_override(g_cfg, "comm.tcp.streams=2");
    plait_config_add_override(g_cfg, "comm.tcp.chunk_size=64K");
    plait_config_add_override(g_cfg, "comm.tcp.max_message=1M");
    for (int i = 0; i < 3 && g_extra_override[i]; i++) plait_config_add_override(g_cfg, g_extra_override[i]);
    memset(g_extra_override, 0, sizeof g_extra_override);
    char *empty_env[] = {NULL};
    if (plait_config_finalize(g_cfg, empty_env) != PLAIT_OK) {
        fprintf(stderr, "%s\n", plait_last_error());
        return -1;
    }
    pthread_t t;
    pthread_create(&t, NULL, fake_peer, NULL);
    plait_bootstrap bs = tcp_fake_bootstrap();
    plait_comm_init init = {sizeof init, plait_host_table(), g_cfg, &bs, 0, 2};
    plait_status st = g_ops->init(&init, &g_comm);
    pthread_join(t, NULL);
    if (st != PLAIT_OK) {
        fprintf(stderr, "init: %s\n", plait_last_error());
        return -1;
    }
    for (int i = 0; i < STREAMS; i++)
        if (g_fds[i] < 0) return -1;
    return 0;
}

int tcp_fake_teardown(void **state) {
    (void)state;
    g_ops->destroy(g_comm);
    for (int i = 0; i < STREAMS; i++)
        if (g_fds[i] >= 0) close(g_fds[i]);
    plait_config_free(g_cfg);
    return 0;
}

plait_buffer hb(void *p, size_t n) { return (plait_buffer){p, n, PLAIT_MEM_HOST, -1}; }

void send_frame(int stream, uint32_t comm, uint32_t tag, uint32_t seq, uint64_t msg_len, uint64_t off,
                const void *payload, uint32_t n) {
    tcp_frame f = {TCP_FRAME_MAGIC, TCP_WIRE_VERSION, TCP_FRAME_DATA, 0, comm, tag, seq, n, msg_len, off};
    assert_int_equal(plait_net_write_all(g_fds[stream], &f, sizeof f, plait_clock_now() + 5), 0);
    if (n) assert_int_equal(plait_net_write_all(g_fds[stream], payload, n, plait_clock_now() + 5), 0);
}

plait_status recv_after(void (*inject)(void), char *buf, size_t cap, size_t *bytes) {
    void *req;
    plait_buffer b = hb(buf, cap);
    assert_int_equal(g_ops->irecv(g_comm, &b, 1, 5, NULL, &req), PLAIT_OK);
    inject();
    return g_ops->wait(g_comm, req, 5, bytes);
}
