/*
 * Fuzz target for the rendezvous store's protocol. The first byte picks the
 * side, the rest is what the other side sends:
 *   0  bytes to a fresh store server from a client that never authenticated;
 *   1  the same after a correct handshake (store_auth.h), reaching SET, GET,
 *      ADD, GATHER and their limits;
 *   2  bytes a "server" answers a connecting client with (the client's
 *      handshake must refuse anything but a correct proof).
 * The server and client must answer with a status, drop bad peers and never
 * crash, leak or read out of bounds (ASan/UBSan); a client must never
 * authenticate against bytes that do not hold the token's proof.
 *
 * Built as `fuzz_store` (PLAIT_FUZZ=ON) and as the ctest
 * `test_fuzz_store_corpus` (replay_main.c over tests/fuzz/corpus/store).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch/net.h"
#include "launch/store.h"
#include "launch/store_auth.h"
#include "launch/store_wire.h"
#include "runtime/clock.h"
#include "runtime/log.h"

#define TOKEN "fuzz-token-0123456789"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int dial(int port) {
    struct sockaddr_storage ss;
    socklen_t sl;
    if (plait_net_resolve("127.0.0.1", port, &ss, &sl) != PLAIT_OK) abort();
    return plait_net_connect_retry((struct sockaddr *)&ss, sl, plait_clock_now() + 2, "fuzz store");
}

/* The client side of a correct handshake on fd; 0 when authenticated. */
static int handshake(int fd) {
    unsigned char msg[sizeof(store_req_hdr) + 4 + STORE_PROOF_BYTES], nc[STORE_NONCE_BYTES];
    unsigned char answer[STORE_NONCE_BYTES + STORE_PROOF_BYTES];
    if (store_auth_nonce(nc) != 0) return -1;
    store_req_hdr h = {STORE_REQ_MAGIC, STORE_HELLO, 0, 0, 4 + STORE_NONCE_BYTES, 0};
    uint32_t ver = STORE_PROTO_VERSION;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, &ver, 4);
    memcpy(msg + sizeof h + 4, nc, STORE_NONCE_BYTES);
    store_rep_hdr r;
    double deadline = plait_clock_now() + 2;
    if (plait_net_write_all(fd, msg, sizeof h + 4 + STORE_NONCE_BYTES, deadline) != 0 ||
        plait_net_read_all(fd, &r, sizeof r, deadline) != 0 || r.status != STORE_OK ||
        r.val_len != sizeof answer || plait_net_read_all(fd, answer, sizeof answer, deadline) != 0)
        return -1;
    h = (store_req_hdr){STORE_REQ_MAGIC, STORE_AUTH, 0, 0, 4 + STORE_PROOF_BYTES, 0};
    int32_t rank = 0;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, &rank, 4);
    store_auth_client_proof(TOKEN, sizeof TOKEN - 1, nc, answer, rank, msg + sizeof h + 4);
    if (plait_net_write_all(fd, msg, sizeof msg, deadline) != 0 || plait_net_read_all(fd, &r, sizeof r, deadline) != 0)
        return -1;
    return r.status == STORE_OK ? 0 : -1;
}

static void to_server(const uint8_t *in, size_t n, int authenticate) {
    plait_store_server *srv = NULL;
    if (plait_store_server_start(-1, "127.0.0.1", 0, TOKEN, 0.2, &srv) != PLAIT_OK) abort();
    int fd = dial(plait_store_server_port(srv));
    if (fd >= 0 && (!authenticate || handshake(fd) == 0)) {
        (void)plait_net_write_all(fd, in, n, plait_clock_now() + 1);
        shutdown(fd, SHUT_WR);
        unsigned char sink[4096];
        double deadline = plait_clock_now() + 0.3; /* replies, until the server closes or waits */
        while (plait_net_read_all(fd, sink, 1, deadline) == 0) {
        }
    }
    if (fd >= 0) close(fd);
    plait_store_server_stop(srv, 0);
}

struct fake_server {
    int listen_fd;
    const uint8_t *in;
    size_t n;
};

static void *serve_bytes(void *arg) {
    struct fake_server *f = arg;
    int fd = accept(f->listen_fd, NULL, NULL);
    if (fd < 0) return NULL;
    unsigned char hello[sizeof(store_req_hdr) + 4 + STORE_NONCE_BYTES];
    double deadline = plait_clock_now() + 1;
    if (plait_net_read_all(fd, hello, sizeof hello, deadline) == 0) (void)plait_net_write_all(fd, f->in, f->n, deadline);
    shutdown(fd, SHUT_WR);
    unsigned char sink[256];
    while (plait_net_read_all(fd, sink, 1, plait_clock_now() + 0.2) == 0) {
    }
    close(fd);
    return NULL;
}

static void to_client(const uint8_t *in, size_t n) {
    struct fake_server f = {socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), in, n};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (f.listen_fd < 0 || bind(f.listen_fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(f.listen_fd, 1) != 0 ||
        getsockname(f.listen_fd, (struct sockaddr *)&a, &al) != 0)
        abort();
    pthread_t t;
    pthread_create(&t, NULL, serve_bytes, &f);
    plait_store *st = NULL;
    /* no bytes hold a proof made with the token: the handshake must fail */
    if (plait_store_connect("127.0.0.1", ntohs(a.sin_port), TOKEN, 0, 0.5, NULL, &st) == PLAIT_OK) abort();
    pthread_join(t, NULL);
    close(f.listen_fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static int quiet;
    if (!quiet) {
        (void)plait_log_configure("error"); /* rejected clients are warnings: thousands of them */
        quiet = 1;
    }
    if (size < 1) return 0;
    switch (data[0] % 3) {
    case 0: to_server(data + 1, size - 1, 0); break;
    case 1: to_server(data + 1, size - 1, 1); break;
    default: to_client(data + 1, size - 1); break;
    }
    return 0;
}
