/* A host's replica keeper (agent.h). */
#include "elastic/agent.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "elastic/agent_wire.h"
#include "runtime/error.h"

#define MAX_RANKS 4096

typedef struct held {
    agent_entry e;
    int fd;
} held;

/* Only the keeper's thread closes the launcher's ends while it runs: a
 * socket it is polling or serving stays open, so its number cannot be
 * taken by a new attempt's socket meanwhile (which the thread would then
 * read from, blocking, or close for the old rank's hang-up). Detaching
 * retires the ends and waits until the thread has closed them. */
struct plait_agent {
    int (*grow)(void *ctx);
    void *ctx;
    pthread_t thread;
    int wake;               /* eventfd: the socket set changed, or stop */
    pthread_mutex_t lock;   /* everything below but stop */
    pthread_cond_t settled; /* done caught up with asked, or the thread ended */
    int *socks;             /* the launcher's ends, -1 when closed */
    int n_socks;
    int *retired;           /* ends of detached attempts, for the thread to close */
    int n_retired, cap_retired;
    uint64_t asked, done;   /* detaches asked for; seen by the thread, their ends closed */
    int running;            /* the thread has not ended */
    held *img;
    int n_img, cap_img;
    atomic_int stop;
};

/* Close the retired ends. Called with the lock held. */
static void close_retired(plait_agent *a) {
    for (int i = 0; i < a->n_retired; i++) close(a->retired[i]);
    a->n_retired = 0;
}

/* Keep `e` (fd taken over): replaces the same step of the same shard, then
 * keeps the two newest steps of that shard. Called with the lock held. */
static int keep(plait_agent *a, const agent_entry *e, int fd) {
    for (int i = 0; i < a->n_img; i++) {
        held *h = &a->img[i];
        if (h->e.shard == e->shard && h->e.n_shards == e->n_shards && h->e.step == e->step) {
            close(h->fd);
            h->e = *e;
            h->fd = fd;
            return 0;
        }
    }
    if (a->n_img == a->cap_img) {
        int cap = a->cap_img ? 2 * a->cap_img : 8;
        held *v = realloc(a->img, sizeof *v * (size_t)cap);
        if (!v) return -1;
        a->img = v;
        a->cap_img = cap;
    }
    a->img[a->n_img++] = (held){*e, fd};
    /* the oldest of three steps of this shard goes */
    int same = 0, oldest = -1;
    for (int i = 0; i < a->n_img; i++) {
        held *h = &a->img[i];
        if (h->e.shard != e->shard || h->e.n_shards != e->n_shards) continue;
        same++;
        if (oldest < 0 || h->e.step < a->img[oldest].e.step) oldest = i;
    }
    if (same > 2) {
        close(a->img[oldest].fd);
        a->img[oldest] = a->img[--a->n_img];
    }
    return 0;
}

/* One request from a rank; 0, or -1 when its socket is done. */
static int serve(plait_agent *a, int sock) {
    agent_msg m;
    int fd = -1, cut = 0;
    ssize_t r = agent_recv(sock, &m, sizeof m, &fd, &cut);
    if (r <= 0) return -1;
    agent_msg rep = {.magic = AGENT_MAGIC, .op = m.op};
    if (r != (ssize_t)sizeof m || m.magic != AGENT_MAGIC || cut) {
        if (fd >= 0) close(fd);
        rep.status = -1;
        return agent_send(sock, &rep, sizeof rep, -1) < 0 ? -1 : 0;
    }
    if (m.op == AGENT_PUT) {
        pthread_mutex_lock(&a->lock);
        rep.status = fd >= 0 && keep(a, &m.e, fd) == 0 ? 0 : -1;
        pthread_mutex_unlock(&a->lock);
        if (rep.status != 0 && fd >= 0) close(fd);
        return agent_send(sock, &rep, sizeof rep, -1) < 0 ? -1 : 0;
    }
    if (fd >= 0) close(fd);
    if (m.op == AGENT_LIST) {
        struct {
            agent_msg h;
            agent_entry e[AGENT_MAX_LIST];
        } list;
        memset(&list, 0, sizeof list);
        list.h = rep;
        pthread_mutex_lock(&a->lock);
        /* the stages' images first (n_shards > 0), then the ranks' own
         * (train/run_replica.c): a long list never hides a stage's */
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < a->n_img && list.h.count < AGENT_MAX_LIST; i++)
                if ((a->img[i].e.n_shards > 0) == (pass == 0)) list.e[list.h.count++] = a->img[i].e;
        pthread_mutex_unlock(&a->lock);
        size_t len = sizeof list.h + sizeof(agent_entry) * (size_t)list.h.count;
        return agent_send(sock, &list, len, -1) < 0 ? -1 : 0;
    }
    if (m.op == AGENT_GET) {
        int out = -1;
        rep.status = 1;
        pthread_mutex_lock(&a->lock);
        for (int i = 0; i < a->n_img; i++) {
            held *h = &a->img[i];
            if (h->e.step == m.e.step && h->e.shard == m.e.shard && h->e.n_shards == m.e.n_shards) {
                out = dup(h->fd);
                rep.e = h->e;
                rep.status = out >= 0 ? 0 : -1;
                break;
            }
        }
        pthread_mutex_unlock(&a->lock);
        ssize_t w = agent_send(sock, &rep, sizeof rep, out);
        if (out >= 0) close(out);
        return w < 0 ? -1 : 0;
    }
    if (m.op == AGENT_REGROUP) {
        rep.status = a->grow && a->grow(a->ctx) ? 1 : 0;
        return agent_send(sock, &rep, sizeof rep, -1) < 0 ? -1 : 0;
    }
    rep.status = -1;
    return agent_send(sock, &rep, sizeof rep, -1) < 0 ? -1 : 0;
}

static void *run(void *arg) {
    plait_agent *a = arg;
    struct pollfd *p = calloc(MAX_RANKS + 1, sizeof *p);
    int *owner = calloc(MAX_RANKS + 1, sizeof *owner);
    while (p && owner && !atomic_load(&a->stop)) {
        int n = 0;
        p[n++] = (struct pollfd){a->wake, POLLIN, 0};
        pthread_mutex_lock(&a->lock);
        close_retired(a);
        a->done = a->asked;
        pthread_cond_broadcast(&a->settled);
        for (int i = 0; i < a->n_socks; i++)
            if (a->socks[i] >= 0) {
                owner[n] = i;
                p[n++] = (struct pollfd){a->socks[i], POLLIN, 0};
            }
        pthread_mutex_unlock(&a->lock);
        if (poll(p, (nfds_t)n, -1) < 0 && errno != EINTR) break;
        if (p[0].revents) {
            uint64_t v;
            ssize_t r = read(a->wake, &v, sizeof v);
            (void)r;
            continue; /* the set may have changed: rebuild it */
        }
        for (int i = 1; i < n; i++) {
            if (!p[i].revents) continue;
            if (serve(a, p[i].fd) != 0) {
                pthread_mutex_lock(&a->lock);
                /* the rank is gone: stop listening to its end (unless a
                 * detach retired it meanwhile: then it is closed there) */
                if (owner[i] < a->n_socks && a->socks[owner[i]] == p[i].fd) {
                    close(a->socks[owner[i]]);
                    a->socks[owner[i]] = -1;
                }
                pthread_mutex_unlock(&a->lock);
            }
        }
    }
    free(p);
    free(owner);
    pthread_mutex_lock(&a->lock);
    a->running = 0;
    close_retired(a);
    pthread_cond_broadcast(&a->settled);
    pthread_mutex_unlock(&a->lock);
    return NULL;
}

plait_status plait_agent_start(int (*grow)(void *ctx), void *ctx, plait_agent **out) {
    plait_agent *a = calloc(1, sizeof *a);
    if (!a) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    a->grow = grow;
    a->ctx = ctx;
    pthread_mutex_init(&a->lock, NULL);
    pthread_cond_init(&a->settled, NULL);
    a->running = 1;
    a->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (a->wake < 0 || pthread_create(&a->thread, NULL, run, a) != 0) {
        if (a->wake >= 0) close(a->wake);
        pthread_cond_destroy(&a->settled);
        pthread_mutex_destroy(&a->lock);
        free(a);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the replica keeper: %s", strerror(errno));
    }
    *out = a;
    return PLAIT_OK;
}

static void poke(plait_agent *a) {
    uint64_t one = 1;
    ssize_t w = write(a->wake, &one, sizeof one);
    (void)w;
}

plait_status plait_agent_attach(plait_agent *a, int nranks, int *child_fds) {
    if (nranks < 1 || nranks > MAX_RANKS)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "replica keeper: %d ranks (1..%d)", nranks, MAX_RANKS);
    plait_agent_detach(a);
    int *socks = malloc(sizeof(int) * (size_t)nranks);
    if (!socks) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < nranks; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
            plait_status st = plait_set_error(PLAIT_ERR_SYSTEM, "socketpair: %s", strerror(errno));
            for (int j = 0; j < i; j++) {
                close(socks[j]);
                close(child_fds[j]);
            }
            free(socks);
            return st;
        }
        socks[i] = sv[0];
        child_fds[i] = sv[1];
    }
    pthread_mutex_lock(&a->lock);
    a->socks = socks;
    a->n_socks = nranks;
    pthread_mutex_unlock(&a->lock);
    poke(a);
    return PLAIT_OK;
}

void plait_agent_detach(plait_agent *a) {
    pthread_mutex_lock(&a->lock);
    int room = a->n_retired + a->n_socks <= a->cap_retired;
    if (!room) {
        int *v = realloc(a->retired, sizeof *v * (size_t)(a->n_retired + a->n_socks));
        if (v) {
            a->retired = v;
            a->cap_retired = a->n_retired + a->n_socks;
            room = 1;
        }
    }
    for (int i = 0; i < a->n_socks; i++) {
        if (a->socks[i] < 0) continue;
        if (room) a->retired[a->n_retired++] = a->socks[i];
        else close(a->socks[i]); /* out of memory: closed here, while the thread may still poll it */
    }
    free(a->socks);
    a->socks = NULL;
    a->n_socks = 0;
    const uint64_t ticket = ++a->asked;
    pthread_mutex_unlock(&a->lock);
    poke(a);
    pthread_mutex_lock(&a->lock);
    while (a->running && a->done < ticket) pthread_cond_wait(&a->settled, &a->lock);
    if (!a->running) close_retired(a);
    pthread_mutex_unlock(&a->lock);
}

void plait_agent_held(plait_agent *a, int *images, uint64_t *bytes) {
    pthread_mutex_lock(&a->lock);
    *images = a->n_img;
    *bytes = 0;
    for (int i = 0; i < a->n_img; i++) *bytes += a->img[i].e.bytes;
    pthread_mutex_unlock(&a->lock);
}

void plait_agent_stop(plait_agent *a) {
    if (!a) return;
    atomic_store(&a->stop, 1);
    poke(a);
    pthread_join(a->thread, NULL);
    plait_agent_detach(a);
    for (int i = 0; i < a->n_img; i++) close(a->img[i].fd);
    free(a->img);
    free(a->retired);
    close(a->wake);
    pthread_cond_destroy(&a->settled);
    pthread_mutex_destroy(&a->lock);
    free(a);
}
