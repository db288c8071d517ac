/*
 * The rendezvous store's client: blocking request/reply over a small pool of
 * authenticated connections (one request per connection at a time, so a
 * thread waiting for a key never blocks another thread's set).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch/net.h"
#include "launch/store.h"
#include "launch/store_auth.h"
#include "launch/store_wire.h"
#include "runtime/error.h"

#define MAX_REPLY (256u << 20)
/* Extra time we give the server to answer a wait it times out itself: a
 * tenth of the wait (or of the connection's timeout, the job's [comm]
 * timeout) past 3 s, at most 30 s. A store host that is stopped or stuck is
 * thus named within its timeout and a little more, before the comm
 * watchdog (5 s and a tenth of the timeout past it) ends a plugin's init()
 * or derive() waiting on it without naming it. */
#define REPLY_GRACE_MIN_S 3.0
#define REPLY_GRACE_MAX_S 30.0

struct sconn {
    struct sconn *next;
    int fd;
};

struct plait_store {
    pthread_mutex_t lock;
    struct sconn *idle;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    char token[PLAIT_STORE_MAX_TOKEN + 1];
    int rank;
    double connect_timeout;
    double reconnect_s;  /* a later connection of the pool: how long to try (0 = max(30, connect_timeout)) */
    double reply_grace;  /* how long past its own wait a request may take to be answered (0: reply_grace()) */
    char address[96];
    char what[192];
};

static plait_status lost(plait_store *st, const char *doing, int err) {
    if (err == ETIMEDOUT)
        return plait_set_error(PLAIT_ERR_TIMEOUT, "%s did not answer %s in time; rank 0 may be stuck",
                               st->what, doing);
    return plait_set_error(PLAIT_ERR_PEER_LOST,
                           "lost the connection to %s while %s (%s); rank 0 probably exited or failed",
                           st->what, doing, strerror(err));
}

/* The handshake failed on the wire: the reason for the caller. */
static plait_status handshake_lost(plait_store *st, int err) {
    if (err == ETIMEDOUT)
        return plait_set_error(PLAIT_ERR_TIMEOUT,
                               "%s took the connection but did not answer within the timeout: rank 0 never "
                               "joined the job or is stuck, or another program listens on that port",
                               st->what);
    return plait_set_error(PLAIT_ERR_PEER_LOST,
                           "%s closed the connection during the handshake (%s): wrong job token or rank 0 exited",
                           st->what, strerror(err));
}

/* Open and authenticate one connection before `deadline` (store_auth.h):
 * the store proves it knows the job token before this rank sends anything
 * but a random nonce, then this rank proves it. */
static plait_status open_conn(plait_store *st, double deadline, int *out) {
    int fd = plait_net_connect_retry((struct sockaddr *)&st->addr, st->addr_len, deadline, st->what);
    if (fd < 0) return PLAIT_ERR_TIMEOUT; /* message set by connect_retry */
    size_t tl = strlen(st->token);
    unsigned char msg[sizeof(store_req_hdr) + 4 + STORE_PROOF_BYTES];
    unsigned char nc[STORE_NONCE_BYTES], answer[STORE_NONCE_BYTES + STORE_PROOF_BYTES];
    if (store_auth_nonce(nc) != 0) {
        close(fd);
        return plait_set_error(PLAIT_ERR_SYSTEM, "no random bytes for the store handshake (getrandom failed)");
    }
    store_req_hdr h = {STORE_REQ_MAGIC, STORE_HELLO, 0, 0, 4 + STORE_NONCE_BYTES, 0};
    uint32_t version = STORE_PROTO_VERSION;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, &version, 4);
    memcpy(msg + sizeof h + 4, nc, STORE_NONCE_BYTES);
    store_rep_hdr r;
    if (plait_net_write_all(fd, msg, sizeof h + 4 + STORE_NONCE_BYTES, deadline) != 0 ||
        plait_net_read_all(fd, &r, sizeof r, deadline) != 0) {
        int e = errno;
        close(fd);
        return handshake_lost(st, e);
    }
    if (r.magic == STORE_REP_MAGIC && r.status == STORE_DENIED) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s refused this rank's HELLO: another plait version (store protocol %u here)",
                               st->what, STORE_PROTO_VERSION);
    }
    int proven = r.magic == STORE_REP_MAGIC && r.status == STORE_OK && r.val_len == sizeof answer &&
                 plait_net_read_all(fd, answer, sizeof answer, deadline) == 0;
    if (proven) {
        unsigned char want[STORE_PROOF_BYTES];
        store_auth_server_proof(st->token, tl, nc, answer, want);
        proven = plait_net_ct_equal(answer + STORE_NONCE_BYTES, STORE_PROOF_BYTES, want, sizeof want);
    }
    if (!proven) {
        /* Tell a real store (whose token differs) which rank gave up, so
         * the ranks waiting for it stop at once; a squatter learns nothing
         * it did not know. */
        store_req_hdr g = {STORE_REQ_MAGIC, STORE_AUTH, STORE_AUTH_GAVE_UP, 0, 4, 0};
        int32_t me = st->rank;
        memcpy(msg, &g, sizeof g);
        memcpy(msg + sizeof g, &me, 4);
        (void)plait_net_write_all(fd, msg, sizeof g + 4, plait_clock_now() + 1);
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s could not be authenticated: the process there does not prove it knows the job "
                               "token (another job's store with another PLAIT_JOB_TOKEN, or another program holding "
                               "the port); nothing but a random challenge was sent to it",
                               st->what);
    }
    h = (store_req_hdr){STORE_REQ_MAGIC, STORE_AUTH, 0, 0, 4 + STORE_PROOF_BYTES, 0};
    int32_t rank = st->rank;
    memcpy(msg, &h, sizeof h);
    memcpy(msg + sizeof h, &rank, 4);
    store_auth_client_proof(st->token, tl, nc, answer, rank, msg + sizeof h + 4);
    if (plait_net_write_all(fd, msg, sizeof h + 4 + STORE_PROOF_BYTES, deadline) != 0 ||
        plait_net_read_all(fd, &r, sizeof r, deadline) != 0) {
        int e = errno;
        close(fd);
        return handshake_lost(st, e);
    }
    if (r.magic != STORE_REP_MAGIC || r.status != STORE_OK || r.val_len != 0) {
        close(fd);
        if (r.magic == STORE_REP_MAGIC && r.status == STORE_DENIED)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s rejected this rank's job token: PLAIT_JOB_TOKEN must be the same "
                                   "on every rank", st->what);
        if (r.magic == STORE_REP_MAGIC && r.status == STORE_FULL)
            return plait_set_error(PLAIT_ERR_SYSTEM,
                                   "%s holds as many ranks' connections as it may (its log says so): too many "
                                   "ranks, or ranks that open connections without closing them", st->what);
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s answered the handshake with garbage: is "
                                                   "something else listening on that port?", st->what);
    }
    *out = fd;
    return PLAIT_OK;
}

plait_status plait_store_connect(const char *host, int port, const char *token, int rank,
                                 double timeout_s, const char *what, plait_store **out) {
    if (!token || !*token || strlen(token) > PLAIT_STORE_MAX_TOKEN)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "the job token must be 1..%d bytes",
                               PLAIT_STORE_MAX_TOKEN);
    plait_store *st = calloc(1, sizeof *st);
    if (!st) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&st->lock, NULL);
    snprintf(st->token, sizeof st->token, "%s", token);
    st->rank = rank;
    st->connect_timeout = timeout_s;
    if (strchr(host, ':')) snprintf(st->address, sizeof st->address, "[%s]:%d", host, port);
    else snprintf(st->address, sizeof st->address, "%s:%d", host, port);
    if (what) snprintf(st->what, sizeof st->what, "%s", what);
    else snprintf(st->what, sizeof st->what, "the store at %s", st->address);
    plait_status s = plait_net_resolve(host, port, &st->addr, &st->addr_len);
    int fd = -1;
    if (s == PLAIT_OK) s = open_conn(st, plait_clock_now() + timeout_s, &fd);
    if (s != PLAIT_OK) {
        pthread_mutex_destroy(&st->lock);
        free(st);
        return s;
    }
    struct sconn *c = malloc(sizeof *c);
    if (!c) {
        close(fd);
        free(st);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    c->fd = fd;
    c->next = NULL;
    st->idle = c;
    *out = st;
    return PLAIT_OK;
}

void plait_store_close(plait_store *st) {
    if (!st) return;
    for (struct sconn *c = st->idle, *nx; c; c = nx) {
        nx = c->next;
        /* the connection ends here even where a child forked since (a
         * plugin's helper) holds a copy of the socket: the store host stops
         * waiting for it at once */
        shutdown(c->fd, SHUT_RDWR);
        close(c->fd);
        free(c);
    }
    pthread_mutex_destroy(&st->lock);
    free(st);
}

const char *plait_store_address(const plait_store *st) { return st->address; }

void plait_store_set_patience(plait_store *st, double seconds) {
    st->reconnect_s = seconds;
    st->reply_grace = seconds;
}

static plait_status take(plait_store *st, struct sconn **out) {
    pthread_mutex_lock(&st->lock);
    struct sconn *c = st->idle;
    if (c) st->idle = c->next;
    pthread_mutex_unlock(&st->lock);
    if (c) {
        *out = c;
        return PLAIT_OK;
    }
    c = malloc(sizeof *c);
    if (!c) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    double t = st->reconnect_s > 0 ? st->reconnect_s : st->connect_timeout < 30 ? 30 : st->connect_timeout;
    plait_status s = open_conn(st, plait_clock_now() + t, &c->fd);
    if (s != PLAIT_OK) {
        free(c);
        return s;
    }
    *out = c;
    return PLAIT_OK;
}

static void give_back(plait_store *st, struct sconn *c) {
    pthread_mutex_lock(&st->lock);
    c->next = st->idle;
    st->idle = c;
    pthread_mutex_unlock(&st->lock);
}

static void drop(struct sconn *c) {
    close(c->fd);
    free(c);
}

static double reply_grace(const plait_store *st, double timeout_s) {
    if (st->reply_grace > 0) return st->reply_grace; /* plait_store_set_patience */
    double t = timeout_s > st->connect_timeout ? timeout_s : st->connect_timeout;
    double g = REPLY_GRACE_MIN_S + 0.1 * (t > 0 ? t : 0);
    return g < REPLY_GRACE_MAX_S ? g : REPLY_GRACE_MAX_S;
}

/* One request: header, key, value parts v1 and v2. On PLAIT_OK *status is
 * the server's status and *rep (malloc'd, may be NULL when empty) its value. */
static plait_status request(plait_store *st, uint8_t op, const char *key, const void *v1, size_t n1,
                            const void *v2, size_t n2, double timeout_s, const char *doing,
                            uint8_t *status, unsigned char **rep, size_t *rep_len) {
    size_t kl = key ? strlen(key) : 0;
    if (kl > PLAIT_STORE_MAX_KEY)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "store key of %zu bytes is longer than %d", kl,
                               PLAIT_STORE_MAX_KEY);
    if (n1 + n2 > PLAIT_STORE_MAX_VALUE)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "store value of %zu bytes for '%s' exceeds %u",
                               n1 + n2, key ? key : "", PLAIT_STORE_MAX_VALUE);
    double t_ms = timeout_s > 0 ? timeout_s * 1000.0 : 0;
    if (t_ms > 4e9) t_ms = 4e9;
    store_req_hdr h = {STORE_REQ_MAGIC, op, 0, (uint16_t)kl, (uint32_t)(n1 + n2),
                       (uint32_t)(timeout_s > 0 && t_ms < 1 ? 1 : t_ms)};
    struct sconn *c = NULL;
    plait_status s = take(st, &c);
    if (s != PLAIT_OK) return s;
    double deadline = plait_clock_now() + (timeout_s > 0 ? timeout_s : 0) + reply_grace(st, timeout_s);
    /* header+key in one small buffer; values written as they are */
    unsigned char head[sizeof h + PLAIT_STORE_MAX_KEY];
    memcpy(head, &h, sizeof h);
    if (kl) memcpy(head + sizeof h, key, kl);
    store_rep_hdr r;
    if (plait_net_write_all(c->fd, head, sizeof h + kl, deadline) != 0 ||
        (n1 && plait_net_write_all(c->fd, v1, n1, deadline) != 0) ||
        (n2 && plait_net_write_all(c->fd, v2, n2, deadline) != 0) ||
        plait_net_read_all(c->fd, &r, sizeof r, deadline) != 0) {
        int e = errno;
        drop(c);
        return lost(st, doing, e);
    }
    if (r.magic != STORE_REP_MAGIC || r.val_len > MAX_REPLY) {
        drop(c);
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s sent a malformed reply while %s", st->what, doing);
    }
    unsigned char *buf = NULL;
    if (r.val_len) {
        buf = malloc(r.val_len);
        if (!buf) {
            drop(c);
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory (%u bytes) while %s", r.val_len,
                                   doing);
        }
        if (plait_net_read_all(c->fd, buf, r.val_len, deadline) != 0) {
            int e = errno;
            free(buf);
            drop(c);
            return lost(st, doing, e);
        }
    }
    if (r.status == STORE_BAD_REQUEST || r.status == STORE_DENIED) drop(c);
    else give_back(st, c);
    *status = r.status;
    *rep = buf;
    *rep_len = r.val_len;
    return PLAIT_OK;
}

/* A wait answered ABORTED: the store's reason why the job cannot start. */
static plait_status aborted(plait_store *st, unsigned char *rep, size_t rl, const char *doing) {
    plait_status s = plait_set_error(PLAIT_ERR_PEER_LOST, "%s stopped the job while %s: %.*s", st->what, doing,
                                     (int)(rl < 512 ? rl : 512), rep ? (const char *)rep : "");
    free(rep);
    return s;
}

static plait_status unexpected(plait_store *st, uint8_t status, const char *doing) {
    if (status == STORE_TOO_LARGE)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: the reply would exceed the store's limits (%s)",
                               st->what, doing);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s refused the request (status %u) while %s", st->what,
                           status, doing);
}

plait_status plait_store_set(plait_store *st, const char *key, const void *value, size_t len) {
    char doing[PLAIT_STORE_MAX_KEY + 32];
    snprintf(doing, sizeof doing, "setting '%s'", key);
    uint8_t status;
    unsigned char *rep;
    size_t rl;
    plait_status s = request(st, STORE_SET, key, value, len, NULL, 0, 0, doing, &status, &rep, &rl);
    if (s != PLAIT_OK) return s;
    free(rep);
    return status == STORE_OK ? PLAIT_OK : unexpected(st, status, doing);
}

plait_status plait_store_get(plait_store *st, const char *key, void *value, size_t cap, size_t *len,
                             double timeout_s) {
    char doing[PLAIT_STORE_MAX_KEY + 32];
    snprintf(doing, sizeof doing, "waiting for '%s'", key);
    uint8_t status;
    unsigned char *rep;
    size_t rl;
    plait_status s = request(st, STORE_GET, key, NULL, 0, NULL, 0, timeout_s, doing, &status, &rep, &rl);
    if (s != PLAIT_OK) return s;
    if (status == STORE_ABORTED) return aborted(st, rep, rl, doing);
    if (status == STORE_OK) {
        if (value && rl && cap) memcpy(value, rep, rl < cap ? rl : cap);
        if (len) *len = rl;
        free(rep);
        return PLAIT_OK;
    }
    free(rep);
    if (status == STORE_NOT_FOUND)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "key '%s' is not in %s", key, st->what);
    if (status == STORE_TIMEOUT)
        return plait_set_error(PLAIT_ERR_TIMEOUT, "key '%s' did not appear in %s within %.3g s", key,
                               st->what, timeout_s);
    return unexpected(st, status, doing);
}

plait_status plait_store_add(plait_store *st, const char *key, int64_t delta, int64_t *result) {
    char doing[PLAIT_STORE_MAX_KEY + 32];
    snprintf(doing, sizeof doing, "adding to '%s'", key);
    uint8_t status;
    unsigned char *rep;
    size_t rl;
    plait_status s = request(st, STORE_ADD, key, &delta, 8, NULL, 0, 0, doing, &status, &rep, &rl);
    if (s != PLAIT_OK) return s;
    if (status == STORE_OK && rl == 8) {
        if (result) memcpy(result, rep, 8);
        free(rep);
        return PLAIT_OK;
    }
    free(rep);
    return unexpected(st, status, doing);
}

plait_status plait_store_gather(plait_store *st, const char *prefix, int n, int index,
                                const void *mine, void *all, size_t bytes, double timeout_s,
                                int *missing, int *n_missing) {
    if (n_missing) *n_missing = 0;
    if (n < 1 || n > STORE_MAX_GATHER || index < 0 || index >= n)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "gather '%s': index %d of %d is out of range",
                               prefix, index, n);
    char doing[PLAIT_STORE_MAX_KEY + 64];
    snprintf(doing, sizeof doing, "gathering '%s*' from %d members", prefix, n);
    uint32_t head[2] = {(uint32_t)n, (uint32_t)index};
    uint8_t status;
    unsigned char *rep;
    size_t rl;
    plait_status s = request(st, STORE_GATHER, prefix, head, sizeof head, mine, bytes,
                             timeout_s > 0 ? timeout_s : 1e-3, doing, &status, &rep, &rl);
    if (s != PLAIT_OK) return s;
    if (status == STORE_ABORTED) return aborted(st, rep, rl, doing);
    if (status == STORE_TIMEOUT) {
        int m = (int)(rl / 4);
        char list[512] = "";
        size_t off = 0;
        for (int i = 0; i < m; i++) {
            uint32_t v;
            memcpy(&v, rep + 4 * (size_t)i, 4);
            if (missing && i < n) missing[i] = (int)v;
            if (off < sizeof list - 16)
                off += (size_t)snprintf(list + off, sizeof list - off, "%s%u", i ? ", " : "", v);
        }
        if (n_missing) *n_missing = m < n ? m : n;
        free(rep);
        return plait_set_error(PLAIT_ERR_TIMEOUT, "%s: member%s %s did not arrive within %.3g s",
                               doing, m == 1 ? "" : "s", list, timeout_s);
    }
    if (status != STORE_OK) {
        free(rep);
        return unexpected(st, status, doing);
    }
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        uint32_t l;
        if (off + 4 > rl) goto bad;
        memcpy(&l, rep + off, 4);
        if (l != bytes || off + 4 + l > rl) {
            free(rep);
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: member %d contributed %u bytes, expected %zu (mismatched "
                                   "plait versions or calls?)", doing, i, l, bytes);
        }
        if (all) memcpy((char *)all + (size_t)i * bytes, rep + off + 4, l);
        off += 4 + l;
    }
    free(rep);
    return PLAIT_OK;
bad:
    free(rep);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s sent a truncated gather reply", st->what);
}
