/*
 * Example third-party comm plugin: a transport over Unix-domain sockets
 * between the ranks of one host, written against the installed SDK only.
 *
 * What it shows a transport author (each point is a rule of plait/comm.h):
 *   - setup through the bootstrap: every rank listens on an abstract-namespace
 *     socket the kernel names for it (autobind), the ranks allgather the names
 *     and a random secret each, and every pair is connected once (the higher
 *     rank connects and presents the lower rank's secret);
 *   - derived communicators share the world's connections and keep their
 *     traffic apart by the communicator id in every message header;
 *   - matching: messages from one peer arrive in the order that peer posted
 *     them (one stream per pair), and an arriving message goes to the first
 *     posted receive with the same (communicator, tag), else into an
 *     "unexpected" queue that irecv searches first — so order is kept per
 *     (sender, receiver, tag), and an isend completes without waiting for
 *     its receive to be posted (the bytes wait at the receiver);
 *   - progress without a thread (no PLAIT_COMM_ASYNC_PROGRESS): isend writes
 *     what the socket takes at once, and every test()/wait() on any
 *     communicator moves every connection forward;
 *   - wait() sleeps in poll() until its deadline and returns
 *     PLAIT_ERR_TIMEOUT with the request still pending;
 *   - a closed connection fails that peer's requests with
 *     PLAIT_ERR_PEER_LOST; abort() fails everything at once;
 *   - destroy() of the last communicator closes every socket and frees
 *     everything: nothing is leaked.
 * The core builds every collective on isend/irecv, so this is all a plugin
 * needs. Unix sockets cannot span hosts: init refuses a job whose ranks are
 * on several hosts (a real transport would delegate those peers to another
 * plugin; see "Delegating" in plait/comm.h).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <plait/plait.h>

static const plait_host *host;

/* Every message starts with this header; the payload follows. */
typedef struct wire_hdr {
    uint32_t comm_id;
    uint32_t tag;
    uint64_t len;
} wire_hdr;

typedef struct uds_comm uds_comm;

/* A posted isend or irecv. Owned by the plugin from post to the test()/wait()
 * that reports its end. */
typedef struct uds_req {
    struct uds_req *next;   /* in its peer's send or receive queue */
    uds_comm *comm;
    int is_send, peer;      /* peer: world rank */
    wire_hdr hdr;           /* send: the header to write; receive: what to match */
    char *buf;
    size_t cap;             /* receive buffer size */
    size_t moved;           /* header + payload bytes written (send), payload bytes read (receive) */
    size_t len;             /* payload length (receive: once matched) */
    int done;               /* 1 = completed, -1 = failed */
    plait_status err;
    char msg[256];
} uds_req;

/* A message that arrived before its receive was posted. */
typedef struct unexpected {
    struct unexpected *next;
    wire_hdr hdr;
    char *data;
    size_t got;
    uds_req *claimed;       /* a receive posted while the payload was still arriving */
} unexpected;

typedef struct peer {
    int fd;                 /* -1 for this rank itself */
    uds_req *sq, *sq_tail;  /* sends in posting order; the head is being written */
    uds_req *rq, *rq_tail;  /* posted receives not yet matched */
    unexpected *uq, *uq_tail;
    wire_hdr in;            /* header being read */
    size_t in_got;
    uds_req *cur_req;       /* receive the current payload goes to */
    unexpected *cur_unexp;  /* ... or unexpected message it goes to */
    size_t cur_left;        /* payload bytes still to read */
    int lost;
} peer;

/* The connections shared by the world and every communicator derived from it. */
typedef struct fabric {
    pthread_mutex_t mu;
    int rank, size, refs, waiters;
    peer *peers;
    char lost_reason[256];  /* set by abort(): every request fails with it */
} fabric;

struct uds_comm {
    fabric *f;
    uint32_t id;
    int rank, size;
    int *world;             /* communicator rank -> world rank */
};

/* What each rank publishes at setup. */
typedef struct uds_addr {
    struct sockaddr_un sa;
    socklen_t len;
    uint64_t secret;
} uds_addr;

typedef struct hello {
    uint64_t secret;        /* the listening rank's secret */
    int32_t rank;           /* the connecting rank */
} hello;

/* ---- requests ----------------------------------------------------------- */

static void fail_req(uds_req *r, plait_status st, const char *msg) {
    if (r->done) return;
    r->done = -1;
    r->err = st;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
}

static void fail_queue(uds_req **head, uds_req **tail, plait_status st, const char *msg) {
    for (uds_req *r = *head, *n; r; r = n) {
        n = r->next;
        fail_req(r, st, msg);
    }
    *head = *tail = NULL;
}

static void push(uds_req **head, uds_req **tail, uds_req *r) {
    r->next = NULL;
    if (*tail) (*tail)->next = r;
    else *head = r;
    *tail = r;
}

/* A connection ended: everything with that peer fails. */
static void lose_peer(fabric *f, int p, const char *why) {
    peer *pe = &f->peers[p];
    if (pe->lost) return;
    pe->lost = 1;
    char msg[256];
    snprintf(msg, sizeof msg, "uds: rank %d %s", p, why);
    fail_queue(&pe->sq, &pe->sq_tail, PLAIT_ERR_PEER_LOST, msg);
    fail_queue(&pe->rq, &pe->rq_tail, PLAIT_ERR_PEER_LOST, msg);
    if (pe->cur_req) fail_req(pe->cur_req, PLAIT_ERR_PEER_LOST, msg);
    for (unexpected *u = pe->uq; u; u = u->next)
        if (u->claimed) fail_req(u->claimed, PLAIT_ERR_PEER_LOST, msg);
    pe->cur_req = NULL;
}

/* ---- moving bytes ------------------------------------------------------- */

/* Write as much of the send queue as the socket takes. */
static void pump_sends(fabric *f, int p) {
    peer *pe = &f->peers[p];
    while (pe->sq && !pe->lost) {
        uds_req *r = pe->sq;
        size_t total = sizeof r->hdr + r->hdr.len;
        while (r->moved < total) {
            const char *src = r->moved < sizeof r->hdr ? (const char *)&r->hdr + r->moved
                                                       : r->buf + (r->moved - sizeof r->hdr);
            size_t n = r->moved < sizeof r->hdr ? sizeof r->hdr - r->moved : total - r->moved;
            ssize_t w = send(pe->fd, src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
            if (w < 0) {
                lose_peer(f, p, "closed the connection (the process probably exited or died)");
                return;
            }
            r->moved += (size_t)w;
        }
        pe->sq = r->next;
        if (!pe->sq) pe->sq_tail = NULL;
        r->done = 1;
    }
}

/* The header of a new message has arrived: find where its payload goes. */
static void match_incoming(fabric *f, int p) {
    peer *pe = &f->peers[p];
    uds_req **link = &pe->rq, *prev = NULL;
    for (uds_req *r = pe->rq; r; prev = r, link = &r->next, r = r->next) {
        if (r->hdr.comm_id != pe->in.comm_id || r->hdr.tag != pe->in.tag) continue;
        *link = r->next;
        if (pe->rq_tail == r) pe->rq_tail = prev;
        r->len = (size_t)pe->in.len;
        if (r->len > r->cap) {
            char msg[256];
            snprintf(msg, sizeof msg, "uds: a %zu-byte message from rank %d (tag %u) does not fit the %zu-byte "
                     "receive", r->len, p, r->hdr.tag, r->cap);
            fail_req(r, PLAIT_ERR_PROTOCOL, msg);
            r = NULL; /* its payload is read and dropped below */
        }
        pe->cur_req = r;
        pe->cur_left = (size_t)pe->in.len;
        if (r && r->len == 0) r->done = 1;
        return;
    }
    unexpected *u = calloc(1, sizeof *u);
    if (u) {
        u->hdr = pe->in;
        u->data = pe->in.len ? malloc((size_t)pe->in.len) : NULL;
    }
    if (!u || (pe->in.len && !u->data)) {
        free(u);
        lose_peer(f, p, "sent a message this rank has no memory to hold");
        return;
    }
    if (pe->uq_tail) pe->uq_tail->next = u;
    else pe->uq = u;
    pe->uq_tail = u;
    pe->cur_unexp = u;
    pe->cur_left = (size_t)pe->in.len;
}

/* An unexpected message is complete and claimed: hand it to its receive. */
static void deliver_unexpected(peer *pe, unexpected *u) {
    uds_req *r = u->claimed;
    unexpected **link = &pe->uq, *prev = NULL;
    while (*link != u) {
        prev = *link;
        link = &(*link)->next;
    }
    *link = u->next;
    if (pe->uq_tail == u) pe->uq_tail = prev;
    if (u->hdr.len > r->cap) {
        char msg[256];
        snprintf(msg, sizeof msg, "uds: a %llu-byte message from rank %d (tag %u) does not fit the %zu-byte receive",
                 (unsigned long long)u->hdr.len, r->peer, r->hdr.tag, r->cap);
        fail_req(r, PLAIT_ERR_PROTOCOL, msg);
    } else {
        if (u->hdr.len) memcpy(r->buf, u->data, (size_t)u->hdr.len);
        r->len = (size_t)u->hdr.len;
        r->done = 1;
    }
    free(u->data);
    free(u);
}

/* Read whatever the socket holds. */
static void pump_recvs(fabric *f, int p) {
    peer *pe = &f->peers[p];
    char sink[4096];
    while (!pe->lost) {
        char *dst;
        size_t want;
        int in_header = pe->cur_left == 0 && !pe->cur_req && !pe->cur_unexp;
        if (in_header) {
            dst = (char *)&pe->in + pe->in_got;
            want = sizeof pe->in - pe->in_got;
        } else if (pe->cur_req) {
            dst = pe->cur_req->buf + (pe->cur_req->len - pe->cur_left);
            want = pe->cur_left;
        } else if (pe->cur_unexp) {
            dst = pe->cur_unexp->data + pe->cur_unexp->got;
            want = pe->cur_left;
        } else {
            dst = sink; /* the payload of a message that did not fit its receive */
            want = pe->cur_left < sizeof sink ? pe->cur_left : sizeof sink;
        }
        ssize_t n = recv(pe->fd, dst, want, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        if (n <= 0) {
            lose_peer(f, p, n == 0 ? "closed the connection (the process probably exited or died)"
                                   : "reset the connection");
            return;
        }
        if (in_header) {
            pe->in_got += (size_t)n;
            if (pe->in_got < sizeof pe->in) continue;
            pe->in_got = 0;
            match_incoming(f, p);
            if (pe->cur_left) continue;
        } else {
            pe->cur_left -= (size_t)n;
            if (pe->cur_unexp) pe->cur_unexp->got += (size_t)n;
            if (pe->cur_left) continue;
        }
        /* the message is complete */
        if (pe->cur_req) pe->cur_req->done = 1;
        if (pe->cur_unexp && pe->cur_unexp->claimed) deliver_unexpected(pe, pe->cur_unexp);
        pe->cur_req = NULL;
        pe->cur_unexp = NULL;
    }
}

/* One pass over every connection; sleeps in poll() for at most timeout_ms.
 * Called with f->mu held; releases it while sleeping. */
static void progress(fabric *f, int timeout_ms) {
    struct pollfd fds[f->size];
    int map[f->size], n = 0;
    for (int p = 0; p < f->size; p++) {
        if (f->peers[p].fd < 0 || f->peers[p].lost) continue;
        fds[n] = (struct pollfd){.fd = f->peers[p].fd, .events = POLLIN | (f->peers[p].sq ? POLLOUT : 0)};
        map[n++] = p;
    }
    if (timeout_ms > 0) pthread_mutex_unlock(&f->mu);
    int ready = poll(fds, (nfds_t)n, timeout_ms);
    if (timeout_ms > 0) pthread_mutex_lock(&f->mu);
    if (ready <= 0) return;
    for (int i = 0; i < n; i++) {
        if (!fds[i].revents) continue;
        pump_recvs(f, map[i]);
        pump_sends(f, map[i]);
    }
}

/* ---- the ops ------------------------------------------------------------ */

static plait_status post(uds_comm *c, const plait_buffer *buf, int peer_rank, uint32_t tag, int is_send,
                         void **out) {
    if (peer_rank < 0 || peer_rank >= c->size || (buf->bytes && !buf->ptr))
        return host->set_error(PLAIT_ERR_INVALID_ARG, "uds: %s rank %d of %d with a %zu-byte buffer at %p",
                               is_send ? "send to" : "receive from", peer_rank, c->size, buf->bytes, buf->ptr);
    if (buf->kind != PLAIT_MEM_HOST && buf->kind != PLAIT_MEM_HOST_PINNED)
        return host->set_error(PLAIT_ERR_UNSUPPORTED, "uds: moves host memory only");
    uds_req *r = calloc(1, sizeof *r);
    if (!r) return host->set_error(PLAIT_ERR_NO_MEMORY, "uds: out of memory");
    fabric *f = c->f;
    int p = c->world[peer_rank];
    *r = (uds_req){.comm = c, .is_send = is_send, .peer = p, .buf = buf->ptr, .cap = buf->bytes,
                   .hdr = {.comm_id = c->id, .tag = tag, .len = is_send ? buf->bytes : 0}};
    pthread_mutex_lock(&f->mu);
    peer *pe = &f->peers[p];
    if (f->lost_reason[0]) {
        fail_req(r, PLAIT_ERR_PEER_LOST, f->lost_reason);
    } else if (pe->lost) {
        char msg[256];
        snprintf(msg, sizeof msg, "uds: rank %d is gone (its connection closed earlier)", p);
        fail_req(r, PLAIT_ERR_PEER_LOST, msg);
    } else if (p == f->rank) {
        fail_req(r, PLAIT_ERR_INVALID_ARG, "uds: a rank cannot send to itself");
    } else if (is_send) {
        push(&pe->sq, &pe->sq_tail, r);
        pump_sends(f, p); /* most messages leave here, before the caller waits */
    } else {
        unexpected *u = pe->uq;
        while (u && (u->claimed || u->hdr.comm_id != c->id || u->hdr.tag != tag)) u = u->next;
        if (!u) push(&pe->rq, &pe->rq_tail, r);
        else if (u == pe->cur_unexp) u->claimed = r; /* still arriving: delivered when complete */
        else {
            u->claimed = r;
            deliver_unexpected(pe, u);
        }
    }
    pthread_mutex_unlock(&f->mu);
    *out = r;
    return PLAIT_OK;
}

static plait_status uds_isend(void *comm, const plait_buffer *buf, int peer_rank, uint32_t tag, void *mr,
                              void **req) {
    (void)mr;
    return post(comm, buf, peer_rank, tag, 1, req);
}

static plait_status uds_irecv(void *comm, const plait_buffer *buf, int peer_rank, uint32_t tag, void *mr,
                              void **req) {
    (void)mr;
    return post(comm, buf, peer_rank, tag, 0, req);
}

/* Report a finished request and release it. Called with f->mu held. */
static plait_status finish(uds_req *r, size_t *bytes) {
    plait_status st = PLAIT_OK;
    if (r->done < 0) st = host->set_error(r->err, "%s", r->msg);
    else if (bytes) *bytes = r->is_send ? (size_t)r->hdr.len : r->len;
    free(r);
    return st;
}

static plait_status uds_test(void *comm, void *req, int *done, size_t *bytes) {
    fabric *f = ((uds_comm *)comm)->f;
    uds_req *r = req;
    pthread_mutex_lock(&f->mu);
    if (!r->done) progress(f, 0);
    *done = r->done != 0;
    plait_status st = r->done ? finish(r, bytes) : PLAIT_OK;
    pthread_mutex_unlock(&f->mu);
    return st;
}

static plait_status uds_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    fabric *f = ((uds_comm *)comm)->f;
    uds_req *r = req;
    double deadline = host->now() + timeout_s;
    pthread_mutex_lock(&f->mu);
    f->waiters++;
    while (!r->done) {
        double left = deadline - host->now();
        if (left <= 0) break;
        /* another thread's progress may complete this request while we sleep:
         * with company, wake every millisecond to look */
        int cap_ms = f->waiters > 1 ? 1 : 100;
        int ms = left * 1e3 < cap_ms ? (int)(left * 1e3) + 1 : cap_ms;
        progress(f, ms);
    }
    f->waiters--;
    plait_status st;
    if (r->done) st = finish(r, bytes);
    else st = host->set_error(PLAIT_ERR_TIMEOUT, "uds: %s rank %d (tag %u) did not complete within %g s",
                              r->is_send ? "send to" : "receive from", r->peer, r->hdr.tag, timeout_s);
    pthread_mutex_unlock(&f->mu);
    return st;
}

/* Fail everything, on every communicator sharing the connections, and close
 * them so the peers notice at once (the core aborts when the job goes down). */
static void uds_abort(void *comm, const char *reason) {
    fabric *f = ((uds_comm *)comm)->f;
    pthread_mutex_lock(&f->mu);
    if (!f->lost_reason[0]) snprintf(f->lost_reason, sizeof f->lost_reason, "uds: aborted: %s", reason);
    for (int p = 0; p < f->size; p++) {
        if (f->peers[p].fd >= 0) shutdown(f->peers[p].fd, SHUT_RDWR);
        if (p != f->rank) lose_peer(f, p, "is cut off: this rank aborted its communication");
    }
    pthread_mutex_unlock(&f->mu);
}

static void free_fabric(fabric *f) {
    for (int p = 0; p < f->size; p++) {
        peer *pe = &f->peers[p];
        if (pe->fd >= 0) close(pe->fd);
        for (unexpected *u = pe->uq, *n; u; u = n) {
            n = u->next;
            free(u->data);
            free(u);
        }
    }
    pthread_mutex_destroy(&f->mu);
    free(f->peers);
    free(f);
}

static void uds_destroy(void *comm) {
    uds_comm *c = comm;
    fabric *f = c->f;
    pthread_mutex_lock(&f->mu);
    int last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (last) free_fabric(f);
    free(c->world);
    free(c);
}

static uds_comm *new_comm(fabric *f, uint32_t id, int rank, int size) {
    uds_comm *c = calloc(1, sizeof *c);
    if (c) c->world = calloc((size_t)size, sizeof *c->world);
    if (!c || !c->world) {
        free(c);
        return NULL;
    }
    *c = (uds_comm){.f = f, .id = id, .rank = rank, .size = size, .world = c->world};
    return c;
}

static plait_status uds_derive(void *parent_v, const plait_comm_derive *args, void **out) {
    uds_comm *parent = parent_v;
    if (args->bootstrap->comm_id == 0)
        return host->set_error(PLAIT_ERR_INVALID_ARG, "uds: derive: a child communicator needs a nonzero id");
    uds_comm *c = new_comm(parent->f, args->bootstrap->comm_id, args->rank, args->size);
    if (!c) return host->set_error(PLAIT_ERR_NO_MEMORY, "uds: out of memory");
    for (int i = 0; i < args->size; i++) c->world[i] = parent->world[args->members[i]];
    pthread_mutex_lock(&parent->f->mu);
    parent->f->refs++;
    pthread_mutex_unlock(&parent->f->mu);
    *out = c;
    return PLAIT_OK;
}

/* ---- setup -------------------------------------------------------------- */

static plait_status sys_error(const char *what) {
    return host->set_error(PLAIT_ERR_SYSTEM, "uds: %s: %s", what, strerror(errno));
}

/* Read or write exactly n bytes on a blocking socket with a receive/send timeout. */
static int full_io(int fd, void *buf, size_t n, int writing) {
    for (size_t done = 0; done < n;) {
        ssize_t k = writing ? send(fd, (char *)buf + done, n - done, MSG_NOSIGNAL)
                            : recv(fd, (char *)buf + done, n - done, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return -1;
        done += (size_t)k;
    }
    return 0;
}

static plait_status connect_all(fabric *f, const plait_bootstrap *bs, int lfd, const uds_addr *all,
                                 uint64_t secret) {
    struct timeval tv = {.tv_sec = (time_t)bs->timeout_s, .tv_usec = 0};
    /* the higher rank of each pair connects */
    for (int p = 0; p < f->rank; p++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return sys_error("socket");
        f->peers[p].fd = fd;
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        hello h = {.secret = all[p].secret, .rank = f->rank};
        if (connect(fd, (const struct sockaddr *)&all[p].sa, all[p].len) != 0 || full_io(fd, &h, sizeof h, 1))
            return host->set_error(PLAIT_ERR_PEER_LOST, "uds: connecting to rank %d: %s", p, strerror(errno));
    }
    for (int k = f->rank + 1; k < f->size; k++) {
        struct pollfd pfd = {.fd = lfd, .events = POLLIN};
        int ready = poll(&pfd, 1, (int)(bs->timeout_s * 1e3));
        if (ready == 0)
            return host->set_error(PLAIT_ERR_TIMEOUT, "uds: %d higher ranks did not connect within %g s",
                                   f->size - k, bs->timeout_s);
        int fd = ready < 0 ? -1 : accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) return sys_error("accept");
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        hello h;
        int ok = full_io(fd, &h, sizeof h, 0) == 0 && h.secret == secret && h.rank > f->rank &&
                 h.rank < f->size && f->peers[h.rank].fd < 0;
        if (!ok) { /* a stranger or a confused peer: not one of ours */
            close(fd);
            k--;
            host->log(PLAIT_LOG_WARN, "uds", "closed a connection that did not present this job's secret");
            continue;
        }
        f->peers[h.rank].fd = fd;
    }
    return PLAIT_OK;
}

static plait_status uds_init(const plait_comm_init *args, void **out) {
    const plait_bootstrap *bs = args->bootstrap;
    if (bs->local_size != bs->size)
        return host->set_error(PLAIT_ERR_UNSUPPORTED,
                               "uds: every rank must run on this host (%d of %d ranks do); use tcp across hosts",
                               bs->local_size, bs->size);
    fabric *f = calloc(1, sizeof *f);
    if (f) f->peers = calloc((size_t)bs->size, sizeof *f->peers);
    uds_addr *all = calloc((size_t)bs->size, sizeof *all);
    uds_comm *c = f ? new_comm(f, 0, bs->rank, bs->size) : NULL;
    if (!f || !f->peers || !all || !c) {
        free(all);
        if (f) free(f->peers);
        free(f);
        return host->set_error(PLAIT_ERR_NO_MEMORY, "uds: out of memory");
    }
    pthread_mutex_init(&f->mu, NULL);
    f->rank = bs->rank;
    f->size = bs->size;
    f->refs = 1;
    for (int p = 0; p < f->size; p++) {
        f->peers[p].fd = -1;
        c->world[p] = p;
    }
    plait_status st = PLAIT_OK;
    uds_addr me = {.len = sizeof(sa_family_t)};
    me.sa.sun_family = AF_UNIX;
    int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    /* binding only the family autobinds a unique abstract name */
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&me.sa, me.len) != 0 || listen(lfd, bs->size) != 0)
        st = sys_error("listening socket");
    me.len = sizeof me.sa;
    if (st == PLAIT_OK && getsockname(lfd, (struct sockaddr *)&me.sa, &me.len) != 0) st = sys_error("getsockname");
    if (st == PLAIT_OK && getrandom(&me.secret, sizeof me.secret, 0) != (ssize_t)sizeof me.secret)
        st = sys_error("getrandom");
    if (st == PLAIT_OK) st = bs->allgather(bs->ctx, &me, all, sizeof me);
    if (st == PLAIT_OK) st = connect_all(f, bs, lfd, all, me.secret);
    if (lfd >= 0) close(lfd);
    free(all);
    /* everyone connected before anyone sends: no connection is refused later */
    if (st == PLAIT_OK) st = bs->barrier(bs->ctx);
    if (st != PLAIT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", host->last_error());
        uds_destroy(c);
        return host->set_error(st, "uds: setting up rank %d of %d: %s", bs->rank, bs->size, msg);
    }
    *out = c;
    return PLAIT_OK;
}

static const plait_comm_ops uds_ops = {
    .struct_size = sizeof(plait_comm_ops),
    .flags = 0, /* no progress thread: test() and wait() drive everything */
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED),
    .init = uds_init,
    .derive = uds_derive,
    .destroy = uds_destroy,
    .abort = uds_abort,
    .isend = uds_isend,
    .irecv = uds_irecv,
    .test = uds_test,
    .wait = uds_wait,
};

static const plait_plugin_desc uds_desc = {
    .struct_size = sizeof(plait_plugin_desc),
    .magic = PLAIT_PLUGIN_MAGIC,
    .abi_major = PLAIT_ABI_MAJOR,
    .abi_minor = 0, /* uses nothing added after ABI v1.0: loads in every 1.x core */
    .kind = PLAIT_KIND_COMM,
    .name = "uds",
    .version = "1.0.0",
    .description = "Unix-domain sockets between the ranks of one host (example out-of-tree plugin)",
    .ops = &uds_ops,
};

static const plait_plugin_desc *const uds_list[] = {&uds_desc};

PLAIT_EXPORT plait_status PLAIT_PLUGIN_ENTRY(uint32_t host_abi, const plait_host *h,
                                            const plait_plugin_desc *const **descs, size_t *count) {
    (void)host_abi;
    host = h;
    *descs = uds_list;
    *count = 1;
    return PLAIT_OK;
}
