/*
 * The rendezvous store's server: one thread, one epoll set, non-blocking
 * sockets. Requests on a connection are handled one at a time; a request
 * that has to wait (GET of a missing key, GATHER before everyone arrived)
 * parks its connection until the data exists or its deadline passes.
 * Bad clients are dropped with a warning and never touch other connections.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "launch/net.h"
#include "launch/store.h"
#include "launch/store_auth.h"
#include "launch/store_gather.h"
#include "launch/store_table.h"
#include "launch/store_wire.h"
#include "runtime/error.h"
#include "runtime/log.h"

/* Two budgets, so connections that never prove the job token cannot use up
 * what ranks need: at most MAX_UNAUTHED connections in their handshake (a
 * full budget drops the oldest to make room, so a flood ages out instead of
 * keeping newcomers away), and MAX_AUTHED for the ranks (each holds a few). */
#define MAX_UNAUTHED 1024
#define MAX_AUTHED 16384
#define MAX_REPLY (256u << 20)
#define COMPONENT "store"

struct conn {
    struct conn *next, *prev;
    int fd;
    int authed;
    int said_hello;   /* HELLO answered; AUTH expected next */
    unsigned char nc[STORE_NONCE_BYTES], ns[STORE_NONCE_BYTES];
    int rank;
    double hello_deadline;
    char peer[64];
    unsigned char *rbuf;
    size_t rlen, rcap;
    unsigned char *wbuf;
    size_t wlen, wpos, wcap;
    int want_out;     /* EPOLLOUT armed */
    int close_after;  /* close once the reply is flushed */
    /* parked request */
    int parked;
    uint8_t op;
    char *key;
    uint32_t n;
    double deadline;
};

struct plait_store_server {
    int listen_fd, wake_fd, ep;
    int port;
    char token[PLAIT_STORE_MAX_TOKEN];
    size_t token_len;
    double hello_timeout;
    pthread_t thread;
    pthread_mutex_t lock;      /* guards stop/drain fields */
    int stop;
    double drain_deadline;
    struct conn *conns;
    int n_conns, n_authed;
    store_table table;
    store_gathers gathers; /* members, contributors and conflicts of each gather */
    atomic_uint_fast64_t rejected;
    double accept_paused_until; /* out of file descriptors: accept again then */
};

/* ---- connections -------------------------------------------------------- */

static void conn_close(plait_store_server *s, struct conn *c) {
    epoll_ctl(s->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (c->authed) s->n_authed--;
    s->n_conns--;
    free(c->rbuf);
    free(c->wbuf);
    free(c->key);
    free(c);
}

static int flush(plait_store_server *s, struct conn *c);

/* Count, log, send whatever reply is queued (a DENIED or BAD_REQUEST, after
 * counting, so a client that reads it sees the count updated) and close. */
static void reject(plait_store_server *s, struct conn *c, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static void reject(plait_store_server *s, struct conn *c, const char *fmt, ...) {
    uint64_t n = atomic_fetch_add(&s->rejected, 1) + 1;
    /* Log the first rejections and then every 100th, so a flood of junk
     * cannot flood the log. */
    if (n <= 20 || n % 100 == 0) {
        char why[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        PLAIT_WARN(COMPONENT, "rejected connection from %s%s: %s (the job goes on; %llu rejected so far)",
                   c->peer, c->authed ? " (authenticated)" : "", why, (unsigned long long)n);
    }
    if (c->wlen > c->wpos) flush(s, c);
    conn_close(s, c);
}

static int flush(plait_store_server *s, struct conn *c) {
    while (c->wpos < c->wlen) {
        ssize_t w = send(c->fd, c->wbuf + c->wpos, c->wlen - c->wpos, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            c->wpos += (size_t)w;
            continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!c->want_out) {
                struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT, .data.ptr = c};
                epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
                c->want_out = 1;
            }
            return 0;
        }
        return -1;
    }
    c->wpos = c->wlen = 0;
    if (c->want_out) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        epoll_ctl(s->ep, EPOLL_CTL_MOD, c->fd, &ev);
        c->want_out = 0;
    }
    return 0;
}

/* Append a reply (header + up to two value parts) to the write buffer. */
static int reply(struct conn *c, uint8_t status, const void *v1, size_t n1) {
    size_t need = c->wlen + sizeof(store_rep_hdr) + n1;
    if (need > c->wcap) {
        size_t cap = c->wcap ? c->wcap : 256;
        while (cap < need) cap *= 2;
        unsigned char *b = realloc(c->wbuf, cap);
        if (!b) return -1;
        c->wbuf = b;
        c->wcap = cap;
    }
    store_rep_hdr h = {STORE_REP_MAGIC, status, {0, 0, 0}, (uint32_t)n1, 0};
    memcpy(c->wbuf + c->wlen, &h, sizeof h);
    if (n1) memcpy(c->wbuf + c->wlen + sizeof h, v1, n1);
    c->wlen = need;
    return 0;
}

/* GATHER: if all n keys "<prefix>i" exist, build the reply and return 1. */
static int gather_ready(plait_store_server *s, struct conn *c, int final) {
    size_t plen = strlen(c->key);
    char key[PLAIT_STORE_MAX_KEY + 16];
    memcpy(key, c->key, plen);
    size_t total = 0;
    uint32_t missing = 0;
    const char *failed = store_gathers_failed(&s->gathers, c->key, plen);
    if (failed) return reply(c, STORE_ABORTED, failed, strlen(failed)) == 0 ? 1 : -1;
    for (uint32_t i = 0; i < c->n; i++) {
        int kl = snprintf(key + plen, sizeof key - plen, "%u", i);
        store_kv *e = store_table_find(&s->table, key, plen + (size_t)kl);
        if (!e) missing++;
        else total += 4 + e->vlen;
    }
    if (missing && !final) return 0;
    if (missing) { /* deadline passed: report who is missing */
        uint32_t *list = malloc(missing * sizeof *list);
        uint32_t m = 0;
        for (uint32_t i = 0; list && i < c->n; i++) {
            int kl = snprintf(key + plen, sizeof key - plen, "%u", i);
            if (!store_table_find(&s->table, key, plen + (size_t)kl)) list[m++] = i;
        }
        int rc = list ? reply(c, STORE_TIMEOUT, list, m * sizeof *list) : reply(c, STORE_TIMEOUT, NULL, 0);
        free(list);
        return rc == 0 ? 1 : -1;
    }
    if (total > MAX_REPLY) return reply(c, STORE_TOO_LARGE, NULL, 0) == 0 ? 1 : -1;
    unsigned char *out = malloc(total ? total : 1);
    if (!out) return reply(c, STORE_TOO_LARGE, NULL, 0) == 0 ? 1 : -1;
    size_t off = 0;
    for (uint32_t i = 0; i < c->n; i++) {
        int kl = snprintf(key + plen, sizeof key - plen, "%u", i);
        store_kv *e = store_table_find(&s->table, key, plen + (size_t)kl);
        uint32_t l = (uint32_t)e->vlen;
        memcpy(out + off, &l, 4);
        memcpy(out + off + 4, e->val, e->vlen);
        off += 4 + e->vlen;
    }
    int rc = reply(c, STORE_OK, out, total);
    free(out);
    return rc == 0 ? 1 : -1;
}

/* Try to answer a parked request; 1 answered, 0 still waiting, -1 error. */
static int try_parked(plait_store_server *s, struct conn *c, int final) {
    if (c->op == STORE_GET) {
        store_kv *e = store_table_find(&s->table, c->key, strlen(c->key));
        if (e) return reply(c, STORE_OK, e->val, e->vlen) == 0 ? 1 : -1;
        if (final) return reply(c, STORE_TIMEOUT, NULL, 0) == 0 ? 1 : -1;
        return 0;
    }
    return gather_ready(s, c, final);
}

static void unpark(struct conn *c) {
    c->parked = 0;
    free(c->key);
    c->key = NULL;
}

/* After a change to the table: answer every parked request that can be. */
static void wake_parked(plait_store_server *s) {
    for (struct conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->parked) continue;
        int r = try_parked(s, c, 0);
        if (r == 0) continue;
        unpark(c);
        if (r < 0 || flush(s, c) != 0) conn_close(s, c);
    }
}

static int park(struct conn *c, uint8_t op, const char *key, size_t klen, uint32_t n, double timeout_s) {
    c->key = malloc(klen + 1);
    if (!c->key) return -1;
    memcpy(c->key, key, klen);
    c->key[klen] = '\0';
    c->op = op;
    c->n = n;
    c->parked = 1;
    c->deadline = plait_clock_now() + timeout_s;
    return 0;
}

/* Answer every parked gather whose
 * members disagree (store_gather.h), with the reason. */
static void abort_waiters(plait_store_server *s) {
    for (struct conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->parked || c->op != STORE_GATHER) continue;
        int r = try_parked(s, c, 0);
        if (r == 0) continue;
        unpark(c);
        if (r < 0 || flush(s, c) != 0) conn_close(s, c);
    }
}

/* The handshake (store_auth.h). Returns 0, or -1 after closing `c`. */
static int authenticate(plait_store_server *s, struct conn *c, const store_req_hdr *h, const unsigned char *val) {
    size_t vl = h->val_len;
    if (!c->said_hello) {
        if (h->op != STORE_HELLO) {
            reject(s, c, "first request is not HELLO (op %u)", h->op);
            return -1;
        }
        uint32_t version = 0;
        if (vl >= 4) memcpy(&version, val, 4);
        if (vl >= 4 && version != STORE_PROTO_VERSION) {
            reply(c, STORE_DENIED, NULL, 0);
            reject(s, c, "protocol version %u, expected %u (mixed plait versions?)", version, STORE_PROTO_VERSION);
            return -1;
        }
        if (vl != 4 + STORE_NONCE_BYTES) {
            reject(s, c, "HELLO of %zu bytes, expected %d", vl, 4 + STORE_NONCE_BYTES);
            return -1;
        }
        memcpy(c->nc, val + 4, STORE_NONCE_BYTES);
        unsigned char answer[STORE_NONCE_BYTES + STORE_PROOF_BYTES];
        if (store_auth_nonce(c->ns) != 0) {
            reject(s, c, "no random bytes for the server nonce (getrandom failed)");
            return -1;
        }
        memcpy(answer, c->ns, STORE_NONCE_BYTES);
        store_auth_server_proof(s->token, s->token_len, c->nc, c->ns, answer + STORE_NONCE_BYTES);
        c->said_hello = 1;
        if (reply(c, STORE_OK, answer, sizeof answer) != 0) {
            conn_close(s, c);
            return -1;
        }
        return 0;
    }
    int gave_up = h->op == STORE_AUTH && (h->flags & STORE_AUTH_GAVE_UP) && vl == 4;
    if (h->op != STORE_AUTH || (vl != 4 + STORE_PROOF_BYTES && !gave_up)) {
        reject(s, c, "expected AUTH after HELLO (op %u, %zu bytes)", h->op, vl);
        return -1;
    }
    int32_t rank;
    memcpy(&rank, val, 4);
    unsigned char want[STORE_PROOF_BYTES];
    store_auth_client_proof(s->token, s->token_len, c->nc, c->ns, rank, want);
    if (gave_up || !plait_net_ct_equal(val + 4, STORE_PROOF_BYTES, want, sizeof want)) {
        reply(c, STORE_DENIED, NULL, 0);
        /* Anyone who can reach the port can send this, claiming any rank,
         * so it changes nothing for the job: a rank started with another
         * PLAIT_JOB_TOKEN stops itself, naming the token, and its launcher
         * ends the job; a stranger's frames only cost it a connection. */
        reject(s, c,
               "%s (claimed rank %d): a rank started with another PLAIT_JOB_TOKEN, or a process that does "
               "not have the token",
               gave_up ? "could not verify the store" : "did not prove the job token", (int)rank);
        return -1;
    }
    if (s->n_authed >= MAX_AUTHED) {
        reply(c, STORE_FULL, NULL, 0);
        reject(s, c, "authenticated connections are at their cap of %d (rank %d refused)", MAX_AUTHED, (int)rank);
        return -1;
    }
    c->authed = 1;
    c->rank = rank;
    s->n_authed++;
    if (reply(c, STORE_OK, NULL, 0) != 0) {
        conn_close(s, c);
        return -1;
    }
    return 0;
}

/* Handle one complete request frame. Returns 0, or -1 after closing `c`. */
static int handle(plait_store_server *s, struct conn *c, const store_req_hdr *h, const char *key,
                  const unsigned char *val) {
    size_t kl = h->key_len, vl = h->val_len;
    if (!c->authed) return authenticate(s, c, h, val);
    PLAIT_DEBUG(COMPONENT, "rank %d: op %u key '%.*s' (%zu bytes)", c->rank, h->op, (int)kl, key, vl);
    switch (h->op) {
    case STORE_SET:
        if (kl == 0) goto bad;
        if (store_table_set(&s->table, key, kl, val, vl) != 0) goto oom;
        if (reply(c, STORE_OK, NULL, 0) != 0) goto oom;
        wake_parked(s);
        return 0;
    case STORE_ADD: {
        if (kl == 0 || vl != 8) goto bad;
        int64_t delta, cur = 0;
        memcpy(&delta, val, 8);
        store_kv *e = store_table_find(&s->table, key, kl);
        if (e && e->vlen == 8) memcpy(&cur, e->val, 8);
        cur = (int64_t)((uint64_t)cur + (uint64_t)delta);
        if (store_table_set(&s->table, key, kl, &cur, 8) != 0) goto oom;
        if (reply(c, STORE_OK, &cur, 8) != 0) goto oom;
        wake_parked(s);
        return 0;
    }
    case STORE_GET: {
        if (kl == 0) goto bad;
        store_kv *e = store_table_find(&s->table, key, kl);
        if (e) return reply(c, STORE_OK, e->val, e->vlen) == 0 ? 0 : (conn_close(s, c), -1);
        if (h->timeout_ms == 0) return reply(c, STORE_NOT_FOUND, NULL, 0) == 0 ? 0 : (conn_close(s, c), -1);
        if (park(c, STORE_GET, key, kl, 0, h->timeout_ms / 1000.0) != 0) goto oom;
        return 0;
    }
    case STORE_GATHER: {
        uint32_t n, index;
        if (vl < 8 || kl + 12 > PLAIT_STORE_MAX_KEY) goto bad;
        memcpy(&n, val, 4);
        memcpy(&index, val + 4, 4);
        if (n == 0 || n > STORE_MAX_GATHER || index >= n) goto bad;
        const char *conflict =
            store_gathers_check(&s->gathers, &s->table, key, kl, n, index, c->rank, c->peer, val + 8, vl - 8);
        if (conflict) {
            PLAIT_WARN(COMPONENT, "%s", conflict);
            if (reply(c, STORE_ABORTED, conflict, strlen(conflict)) != 0) goto oom;
            abort_waiters(s);
            return 0;
        }
        char k[PLAIT_STORE_MAX_KEY + 16];
        memcpy(k, key, kl);
        int il = snprintf(k + kl, sizeof k - kl, "%u", index);
        if (store_table_set(&s->table, k, kl + (size_t)il, val + 8, vl - 8) != 0) goto oom;
        if (park(c, STORE_GATHER, key, kl, n, h->timeout_ms / 1000.0) != 0) goto oom;
        int r = try_parked(s, c, 0);
        if (r != 0) unpark(c);
        if (r < 0) goto oom;
        wake_parked(s); /* earlier arrivals waiting for this contribution */
        return 0;
    }
    default:
        goto bad;
    }
bad:
    reply(c, STORE_BAD_REQUEST, NULL, 0);
    reject(s, c, "malformed request (op %u, key %zu bytes, value %zu bytes)", h->op, kl, vl);
    return -1;
oom:
    PLAIT_ERROR(COMPONENT, "out of memory serving %s; dropping it", c->peer);
    conn_close(s, c);
    return -1;
}

/* Read what is available and handle complete frames. */
static void on_readable(plait_store_server *s, struct conn *c) {
    for (;;) {
        if (c->rlen == c->rcap) {
            size_t cap = c->rcap ? c->rcap * 2 : 4096;
            size_t limit = sizeof(store_req_hdr) + PLAIT_STORE_MAX_KEY + PLAIT_STORE_MAX_VALUE + 16;
            if (cap > limit) cap = limit;
            if (cap <= c->rcap) { /* cannot happen: frames are checked before growing */
                reject(s, c, "frame exceeds the store's limits");
                return;
            }
            unsigned char *b = realloc(c->rbuf, cap);
            if (!b) {
                PLAIT_ERROR(COMPONENT, "out of memory reading from %s", c->peer);
                conn_close(s, c);
                return;
            }
            c->rbuf = b;
            c->rcap = cap;
        }
        ssize_t r = recv(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen, MSG_DONTWAIT);
        if (r == 0) {
            if (!c->authed && c->rlen > 0) reject(s, c, "closed in the middle of a frame");
            else if (!c->authed) reject(s, c, "closed without saying HELLO");
            else conn_close(s, c);
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            if (c->authed) conn_close(s, c);
            else reject(s, c, "%s", strerror(errno));
            return;
        }
        c->rlen += (size_t)r;
        /* parse */
        size_t pos = 0;
        while (!c->parked && c->rlen - pos >= sizeof(store_req_hdr)) {
            store_req_hdr h;
            memcpy(&h, c->rbuf + pos, sizeof h);
            if (h.magic != STORE_REQ_MAGIC) {
                reject(s, c, "bad frame magic 0x%08x (not a plait store client)", h.magic);
                return;
            }
            if (!c->authed && h.op != STORE_HELLO && h.op != STORE_AUTH) {
                /* Said before the handshake ended: a client of another
                 * protocol, or one that skips proving the job token. */
                reject(s, c,
                       "request (op %u, key %u bytes, value %u bytes) before authenticating: only HELLO "
                       "and AUTH may come first",
                       h.op, h.key_len, h.val_len);
                return;
            }
            if (h.key_len > PLAIT_STORE_MAX_KEY || h.val_len > PLAIT_STORE_MAX_VALUE + 8 ||
                (!c->authed && (h.key_len != 0 || h.val_len > 4 + STORE_PROOF_BYTES))) {
                reject(s, c, "oversized frame (key %u bytes, value %u bytes)", h.key_len, h.val_len);
                return;
            }
            size_t need = sizeof h + h.key_len + h.val_len;
            if (c->rlen - pos < need) {
                if (need > c->rcap) { /* grow to hold the whole frame */
                    unsigned char *b = realloc(c->rbuf, need);
                    if (!b) {
                        conn_close(s, c);
                        return;
                    }
                    c->rbuf = b;
                    c->rcap = need;
                }
                break;
            }
            const char *key = (const char *)c->rbuf + pos + sizeof h;
            const unsigned char *val = c->rbuf + pos + sizeof h + h.key_len;
            if (memchr(key, '\0', h.key_len)) {
                reject(s, c, "key contains a NUL byte");
                return;
            }
            if (handle(s, c, &h, key, val) != 0) return;
            pos += need;
            if (flush(s, c) != 0) {
                conn_close(s, c);
                return;
            }
        }
        if (pos) {
            memmove(c->rbuf, c->rbuf + pos, c->rlen - pos);
            c->rlen -= pos;
        }
        if (c->parked) break; /* the client waits for our answer */
    }
}

/* The connection that has waited longest without authenticating, or NULL. */
static struct conn *oldest_unauthed(plait_store_server *s) {
    struct conn *old = NULL;
    for (struct conn *c = s->conns; c; c = c->next)
        if (!c->authed && (!old || c->hello_deadline < old->hello_deadline)) old = c;
    return old;
}

/* Make room for one more connection in the handshake: drop the oldest. */
static int drop_oldest_unauthed(plait_store_server *s, const char *why) {
    struct conn *old = oldest_unauthed(s);
    if (!old) return -1;
    reject(s, old, "%s: dropped the oldest of them to make room (a flood of connections without the job "
                   "token?)", why);
    return 0;
}

static void on_accept(plait_store_server *s) {
    for (;;) {
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            /* Out of file descriptors: an unauthenticated connection makes
             * room; with none, stop accepting for a moment rather than spin. */
            char why[128];
            snprintf(why, sizeof why, "out of file descriptors (%s) with %d connections that have not "
                     "authenticated", strerror(errno), s->n_conns - s->n_authed);
            if (drop_oldest_unauthed(s, why) == 0) continue;
            PLAIT_WARN(COMPONENT, "out of file descriptors (%s) with %d ranks' connections: not accepting for "
                       "0.1 s (raise ulimit -n)", strerror(errno), s->n_authed);
            epoll_ctl(s->ep, EPOLL_CTL_DEL, s->listen_fd, NULL);
            s->accept_paused_until = plait_clock_now() + 0.1;
            return;
        }
        if (fd < 0) return;
        if (s->n_conns - s->n_authed >= MAX_UNAUTHED) {
            char why[128];
            snprintf(why, sizeof why, "connections that have not authenticated are at their cap of %d",
                     MAX_UNAUTHED);
            drop_oldest_unauthed(s, why);
        }
        struct conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        c->fd = fd;
        c->rank = -1;
        c->hello_deadline = plait_clock_now() + s->hello_timeout;
        plait_net_peer_str(fd, c->peer, sizeof c->peer);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            close(fd);
            free(c);
            continue;
        }
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        s->n_conns++;
    }
}

/* Expire hello and wait deadlines; returns ms until the next one (-1 none). */
static int expire(plait_store_server *s) {
    double now = plait_clock_now(), next = -1;
    if (s->accept_paused_until > 0) {
        if (now >= s->accept_paused_until) {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
            epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &ev);
            s->accept_paused_until = 0;
        } else {
            next = s->accept_paused_until;
        }
    }
    for (struct conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->authed) {
            if (now >= c->hello_deadline) {
                reject(s, c, "no valid HELLO within %.3g s", s->hello_timeout);
                continue;
            }
            if (next < 0 || c->hello_deadline < next) next = c->hello_deadline;
        } else if (c->parked) {
            if (now >= c->deadline) {
                int r = try_parked(s, c, 1);
                unpark(c);
                if (r < 0 || flush(s, c) != 0) conn_close(s, c);
                continue;
            }
            if (next < 0 || c->deadline < next) next = c->deadline;
        }
    }
    if (next < 0) return -1;
    double ms = (next - now) * 1000.0 + 1;
    return ms > 1e9 ? 1000000000 : (int)ms;
}

static void *server_main(void *arg) {
    plait_store_server *s = arg;
    struct epoll_event evs[64];
    for (;;) {
        int timeout = expire(s);
        pthread_mutex_lock(&s->lock);
        int stop = s->stop;
        double drain = s->drain_deadline;
        pthread_mutex_unlock(&s->lock);
        if (stop) {
            if (s->n_authed == 0) break;
            if (plait_clock_now() >= drain) {
                if (drain > 0) {
                    /* ranks by number; launchers (an elastic job's membership
                     * clients, which have none) counted */
                    char list[256] = "";
                    size_t off = 0;
                    int others = 0;
                    for (struct conn *c = s->conns; c; c = c->next) {
                        if (!c->authed) continue;
                        if (c->rank < 0) others++;
                        else if (off + 16 < sizeof list)
                            off += (size_t)snprintf(list + off, sizeof list - off, "%s%d", off ? ", " : "", c->rank);
                    }
                    char launchers[64] = "";
                    if (others)
                        snprintf(launchers, sizeof launchers, "%s%d launcher%s", off ? " and " : "", others,
                                 others == 1 ? "" : "s");
                    PLAIT_WARN(COMPONENT, "closing the store while %s%s%s %s still connected", off ? "rank(s) " : "",
                               list, launchers, off + (size_t)others > 1 ? "are" : "is");
                }
                break;
            }
            int dms = (int)((drain - plait_clock_now()) * 1000) + 1;
            if (timeout < 0 || dms < timeout) timeout = dms;
        }
        int n = epoll_wait(s->ep, evs, 64, timeout);
        if (n < 0 && errno != EINTR) {
            PLAIT_ERROR(COMPONENT, "epoll_wait: %s; the store stops", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->listen_fd) {
                on_accept(s);
            } else if (p == &s->wake_fd) {
                uint64_t v;
                if (read(s->wake_fd, &v, sizeof v) < 0) {
                }
            } else {
                struct conn *c = p;
                /* `c` may have been closed by an earlier event in this batch
                 * only through wake_parked/expire of itself, which happen
                 * after its own events; guard by looking it up. */
                int alive = 0;
                for (struct conn *x = s->conns; x; x = x->next)
                    if (x == c) {
                        alive = 1;
                        break;
                    }
                if (!alive) continue;
                if (evs[i].events & EPOLLOUT) {
                    if (flush(s, c) != 0) {
                        conn_close(s, c);
                        continue;
                    }
                }
                if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(s, c);
            }
        }
    }
    /* Answer whoever still waits, with what is missing, rather than just
     * cutting them off: rank 0 may be stopping because of that very wait
     * (a rank that never joined), and the others should say so too. */
    for (struct conn *c = s->conns, *nx; c; c = nx) {
        nx = c->next;
        if (!c->parked) continue;
        int r = try_parked(s, c, 1);
        unpark(c);
        if (r > 0) {
            plait_net_set_nonblocking(c->fd);
            flush(s, c);
        }
    }
    return NULL;
}

plait_status plait_store_server_start(int listen_fd, const char *bind_host, int port,
                                      const char *token, double hello_timeout_s,
                                      plait_store_server **out) {
    size_t tl = token ? strlen(token) : 0;
    if (tl == 0 || tl > PLAIT_STORE_MAX_TOKEN)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "the job token must be 1..%d bytes (got %zu)",
                               PLAIT_STORE_MAX_TOKEN, tl);
    plait_store_server *s = calloc(1, sizeof *s);
    if (!s) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory starting the store");
    memcpy(s->token, token, tl);
    s->token_len = tl;
    s->hello_timeout = hello_timeout_s > 0 ? hello_timeout_s : 10;
    s->listen_fd = listen_fd;
    s->wake_fd = s->ep = -1;
    pthread_mutex_init(&s->lock, NULL);
    plait_status st = PLAIT_OK;
    if (store_table_init(&s->table) != 0 || store_gathers_init(&s->gathers) != 0) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory starting the store");
        goto fail;
    }
    if (s->listen_fd < 0) {
        struct sockaddr_storage ss;
        socklen_t sl;
        st = plait_net_resolve(bind_host, port, &ss, &sl);
        if (st != PLAIT_OK) goto fail;
        s->listen_fd = plait_net_listen((struct sockaddr *)&ss, sl, 1024);
        if (s->listen_fd < 0) {
            st = plait_wrap_error(PLAIT_ERR_SYSTEM, "starting the job's store");
            goto fail;
        }
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl) != 0) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "store: getsockname: %s", strerror(errno));
        goto fail;
    }
    s->port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    plait_net_set_nonblocking(s->listen_fd);
    s->ep = epoll_create1(EPOLL_CLOEXEC);
    s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->ep < 0 || s->wake_fd < 0) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "store: epoll/eventfd: %s", strerror(errno));
        goto fail;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
    epoll_ctl(s->ep, EPOLL_CTL_ADD, s->listen_fd, &ev);
    ev.data.ptr = &s->wake_fd;
    epoll_ctl(s->ep, EPOLL_CTL_ADD, s->wake_fd, &ev);
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "store: cannot start its thread");
        goto fail;
    }
    *out = s;
    return PLAIT_OK;
fail:
    if (s->listen_fd >= 0) close(s->listen_fd);
    if (s->ep >= 0) close(s->ep);
    if (s->wake_fd >= 0) close(s->wake_fd);
    store_table_free(&s->table);
    store_gathers_free(&s->gathers);
    free(s);
    return st;
}

int plait_store_server_port(const plait_store_server *srv) { return srv->port; }

uint64_t plait_store_server_rejected(const plait_store_server *srv) {
    return atomic_load(&((plait_store_server *)srv)->rejected);
}

void plait_store_server_stop(plait_store_server *s, double drain_s) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    s->drain_deadline = drain_s > 0 ? plait_clock_now() + drain_s : 0;
    pthread_mutex_unlock(&s->lock);
    uint64_t one = 1;
    if (write(s->wake_fd, &one, sizeof one) < 0) {
    }
    pthread_join(s->thread, NULL);
    while (s->conns) conn_close(s, s->conns);
    store_table_free(&s->table);
    store_gathers_free(&s->gathers);
    close(s->listen_fd);
    close(s->ep);
    close(s->wake_fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
