/* In-process transport and bootstrap: see comm_threads.h. */
#include "comm/comm_threads.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/error.h"

typedef struct treq {
    int is_send;
    char *buf;
    size_t bytes;          /* posted length */
    int me, peer;          /* ranks in the group */
    uint32_t tag;
    int state;             /* 0 queued, 1 matched (copy running), 2 done */
    plait_status status;
    size_t moved;
    char msg[192];
    struct treq *next;
} treq;

typedef struct queue {
    treq *head, *tail;
} queue;

typedef struct tgroup {
    uint32_t id;
    int size, refs;
    queue *recvq;          /* [member] receives it posted */
    queue *sendq;          /* [member] sends waiting for it to receive */
    int *dead;             /* [member] aborted */
    struct tgroup *next;
} tgroup;

typedef struct kv {
    char *key;
    void *val;
    size_t len;
    struct kv *next;
} kv;

struct plait_threads_world {
    int size;
    double timeout_s;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* any completion, any store write */
    tgroup *groups;
    kv *store;
};

typedef struct tcomm {
    plait_threads_world *w;
    tgroup *g;
    int rank;
} tcomm;

#define BOOT_MAGIC 0x74687262u /* "thrb" */

typedef struct tboot {
    plait_bootstrap pub;
    uint32_t magic;
    plait_threads_world *w;
    uint64_t round;
    int *host_of;     /* all zeros: every thread-rank is on this host */
} tboot;

/* ---- helpers ------------------------------------------------------------ */

static struct timespec deadline_after(double s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    double whole = (double)(time_t)s;
    ts.tv_sec += (time_t)s;
    ts.tv_nsec += (long)((s - whole) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static void q_push(queue *q, treq *r) {
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

/* Remove and return the first request with (me == from, tag); from < 0 matches
 * any sender and `tag_any` any tag (used by abort). */
static treq *q_take(queue *q, int field_is_me, int rank, uint32_t tag, int tag_any) {
    treq *prev = NULL;
    for (treq *r = q->head; r; prev = r, r = r->next) {
        int who = field_is_me ? r->me : r->peer;
        if ((rank < 0 || who == rank) && (tag_any || r->tag == tag)) {
            if (prev)
                prev->next = r->next;
            else
                q->head = r->next;
            if (q->tail == r) q->tail = prev;
            r->next = NULL;
            return r;
        }
    }
    return NULL;
}

/* Copy send `s` into receive `r`. Called and returns with w->lock held;
 * the copy itself runs unlocked (both requests are out of every queue). */
static void complete_match(plait_threads_world *w, treq *s, treq *r) {
    s->state = r->state = 1;
    int too_long = s->bytes > r->bytes;
    pthread_mutex_unlock(&w->lock);
    if (!too_long && s->bytes) memcpy(r->buf, s->buf, s->bytes);
    pthread_mutex_lock(&w->lock);
    s->status = PLAIT_OK;
    s->moved = s->bytes;
    if (too_long) {
        r->status = PLAIT_ERR_PROTOCOL;
        snprintf(r->msg, sizeof r->msg, "message of %zu bytes from rank %d (tag %u) is longer than "
                 "the %zu-byte receive buffer", s->bytes, s->me, s->tag, r->bytes);
    } else {
        r->status = PLAIT_OK;
        r->moved = s->bytes;
    }
    s->state = r->state = 2;
    pthread_cond_broadcast(&w->cond);
}

static void fail_req(treq *r, const char *msg) {
    r->state = 2;
    r->status = PLAIT_ERR_PEER_LOST;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
}

/* ---- groups ------------------------------------------------------------- */

static plait_status attach(plait_threads_world *w, uint32_t id, int size, tgroup **out) {
    pthread_mutex_lock(&w->lock);
    tgroup *g = w->groups;
    while (g && g->id != id) g = g->next;
    if (g && g->size != size) {
        pthread_mutex_unlock(&w->lock);
        return plait_set_error(PLAIT_ERR_INTERNAL, "threads transport: communicator %08x created "
                               "with sizes %d and %d", id, g->size, size);
    }
    if (!g) {
        g = calloc(1, sizeof *g);
        if (g) {
            g->recvq = calloc((size_t)size, sizeof *g->recvq);
            g->sendq = calloc((size_t)size, sizeof *g->sendq);
            g->dead = calloc((size_t)size, sizeof *g->dead);
        }
        if (!g || !g->recvq || !g->sendq || !g->dead) {
            if (g) free(g->recvq), free(g->sendq), free(g->dead);
            free(g);
            pthread_mutex_unlock(&w->lock);
            return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        }
        g->id = id;
        g->size = size;
        g->next = w->groups;
        w->groups = g;
    }
    g->refs++;
    pthread_mutex_unlock(&w->lock);
    *out = g;
    return PLAIT_OK;
}

static plait_status make_comm(plait_threads_world *w, const plait_bootstrap *bs, void **out) {
    tcomm *c = calloc(1, sizeof *c);
    if (!c) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    c->w = w;
    c->rank = bs->rank;
    plait_status st = attach(w, bs->comm_id, bs->size, &c->g);
    if (st == PLAIT_OK) st = bs->barrier(bs->ctx); /* every member attached */
    if (st != PLAIT_OK) {
        free(c);
        return st;
    }
    *out = c;
    return PLAIT_OK;
}

static tboot *boot_of(const plait_bootstrap *bs) {
    tboot *b = bs ? bs->ctx : NULL;
    return b && b->magic == BOOT_MAGIC ? b : NULL;
}

static plait_status t_init(const plait_comm_init *args, void **comm) {
    tboot *b = boot_of(args->bootstrap);
    if (!b) return plait_set_error(PLAIT_ERR_INVALID_ARG, "the threads transport needs a bootstrap "
                                                           "from plait_threads_bootstrap_new()");
    return make_comm(b->w, args->bootstrap, comm);
}

static plait_status t_derive(void *parent, const plait_comm_derive *args, void **child) {
    tcomm *p = parent;
    (void)p;
    tboot *b = boot_of(args->bootstrap);
    if (!b) return plait_set_error(PLAIT_ERR_INVALID_ARG, "threads transport: foreign bootstrap");
    return make_comm(b->w, args->bootstrap, child);
}

static void t_destroy(void *comm) {
    tcomm *c = comm;
    plait_threads_world *w = c->w;
    pthread_mutex_lock(&w->lock);
    tgroup *g = c->g;
    if (--g->refs == 0) {
        tgroup **pp = &w->groups;
        while (*pp != g) pp = &(*pp)->next;
        *pp = g->next;
        free(g->recvq);
        free(g->sendq);
        free(g->dead);
        free(g);
    }
    pthread_mutex_unlock(&w->lock);
    free(c);
}

static void t_abort(void *comm, const char *reason) {
    tcomm *c = comm;
    plait_threads_world *w = c->w;
    tgroup *g = c->g;
    char msg[192];
    pthread_mutex_lock(&w->lock);
    if (g->dead[c->rank]) {
        pthread_mutex_unlock(&w->lock);
        return;
    }
    g->dead[c->rank] = 1;
    snprintf(msg, sizeof msg, "rank %d aborted: %.150s", c->rank, reason ? reason : "");
    treq *r;
    /* everything this member posted, and everything others posted toward it */
    while ((r = q_take(&g->recvq[c->rank], 1, -1, 0, 1))) fail_req(r, msg);
    while ((r = q_take(&g->sendq[c->rank], 1, -1, 0, 1))) fail_req(r, msg);
    for (int q = 0; q < g->size; q++) {
        while ((r = q_take(&g->recvq[q], 0, c->rank, 0, 1))) fail_req(r, msg);
        while ((r = q_take(&g->sendq[q], 1, c->rank, 0, 1))) fail_req(r, msg);
    }
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
}

static plait_status post(tcomm *c, int is_send, const plait_buffer *buf, int peer, uint32_t tag,
                         void **req) {
    tgroup *g = c->g;
    plait_threads_world *w = c->w;
    if (peer < 0 || peer >= g->size || peer == c->rank)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "threads transport: bad peer %d", peer);
    treq *r = calloc(1, sizeof *r);
    if (!r) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    r->is_send = is_send;
    r->buf = buf->ptr;
    r->bytes = buf->bytes;
    r->me = c->rank;
    r->peer = peer;
    r->tag = tag;
    pthread_mutex_lock(&w->lock);
    if (g->dead[peer] || g->dead[c->rank]) {
        int who = g->dead[c->rank] ? c->rank : peer;
        pthread_mutex_unlock(&w->lock);
        free(r);
        return plait_set_error(PLAIT_ERR_PEER_LOST, "threads transport: rank %d has aborted", who);
    }
    if (is_send) {
        /* the receiver's posted receives from me with this tag, oldest first */
        treq *m = NULL;
        treq *prev = NULL;
        for (treq *x = g->recvq[peer].head; x; prev = x, x = x->next)
            if (x->peer == c->rank && x->tag == tag) {
                m = x;
                break;
            }
        if (m) {
            if (prev)
                prev->next = m->next;
            else
                g->recvq[peer].head = m->next;
            if (g->recvq[peer].tail == m) g->recvq[peer].tail = prev;
            complete_match(w, r, m);
        } else {
            q_push(&g->sendq[peer], r);
        }
    } else {
        treq *m = q_take(&g->sendq[c->rank], 1, peer, tag, 0);
        if (m)
            complete_match(w, m, r);
        else
            q_push(&g->recvq[c->rank], r);
    }
    pthread_mutex_unlock(&w->lock);
    *req = r;
    return PLAIT_OK;
}

static plait_status t_isend(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr,
                            void **req) {
    (void)mr;
    return post(comm, 1, buf, peer, tag, req);
}

static plait_status t_irecv(void *comm, const plait_buffer *buf, int peer, uint32_t tag, void *mr,
                            void **req) {
    (void)mr;
    return post(comm, 0, buf, peer, tag, req);
}

/* With w->lock held and r done: release it and return its status. */
static plait_status finish(treq *r, size_t *bytes) {
    plait_status st = r->status;
    if (bytes) *bytes = r->moved;
    if (st != PLAIT_OK) plait_set_error(st, "%s", r->msg);
    free(r);
    return st;
}

static plait_status t_test(void *comm, void *req, int *done, size_t *bytes) {
    tcomm *c = comm;
    treq *r = req;
    pthread_mutex_lock(&c->w->lock);
    *done = r->state == 2;
    plait_status st = *done ? finish(r, bytes) : PLAIT_OK;
    pthread_mutex_unlock(&c->w->lock);
    return st;
}

static plait_status t_wait(void *comm, void *req, double timeout_s, size_t *bytes) {
    tcomm *c = comm;
    treq *r = req;
    plait_threads_world *w = c->w;
    struct timespec dl = deadline_after(timeout_s);
    pthread_mutex_lock(&w->lock);
    while (r->state != 2) {
        int rc = pthread_cond_timedwait(&w->cond, &w->lock, &dl);
        if (rc == ETIMEDOUT && r->state != 2) {
            pthread_mutex_unlock(&w->lock);
            return plait_set_error(PLAIT_ERR_TIMEOUT, "threads transport: %s rank %d timed out",
                                   r->is_send ? "send to" : "receive from", r->peer);
        }
    }
    plait_status st = finish(r, bytes);
    pthread_mutex_unlock(&w->lock);
    return st;
}

static const plait_comm_ops threads_ops = {
    .struct_size = sizeof(plait_comm_ops),
    .flags = PLAIT_COMM_ASYNC_PROGRESS,
    .mem_kinds = PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST) | PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST_PINNED),
    .init = t_init,
    .derive = t_derive,
    .destroy = t_destroy,
    .abort = t_abort,
    .isend = t_isend,
    .irecv = t_irecv,
    .test = t_test,
    .wait = t_wait,
};

const plait_comm_ops *plait_threads_comm_ops(void) { return &threads_ops; }

/* ---- world and key-value store ----------------------------------------- */

plait_threads_world *plait_threads_world_new(int size, double timeout_s) {
    plait_threads_world *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->size = size;
    w->timeout_s = timeout_s;
    pthread_mutex_init(&w->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &ca);
    pthread_condattr_destroy(&ca);
    return w;
}

void plait_threads_world_free(plait_threads_world *w) {
    if (!w) return;
    for (kv *e = w->store, *next; e; e = next) {
        next = e->next;
        free(e->key);
        free(e->val);
        free(e);
    }
    /* groups still attached belong to leaked communicators */
    for (tgroup *g = w->groups, *next; g; g = next) {
        next = g->next;
        free(g->recvq);
        free(g->sendq);
        free(g->dead);
        free(g);
    }
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
}

static plait_status kv_set(plait_threads_world *w, const char *key, const void *val, size_t len) {
    kv *e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key)) || !(e->val = malloc(len ? len : 1))) {
        if (e) free(e->key);
        free(e);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(e->val, val, len);
    e->len = len;
    pthread_mutex_lock(&w->lock);
    e->next = w->store;
    w->store = e;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    return PLAIT_OK;
}

static plait_status kv_get(plait_threads_world *w, const char *key, void *val, size_t cap, size_t *len) {
    struct timespec dl = deadline_after(w->timeout_s);
    pthread_mutex_lock(&w->lock);
    for (;;) {
        for (kv *e = w->store; e; e = e->next)
            if (strcmp(e->key, key) == 0) {
                memcpy(val, e->val, e->len < cap ? e->len : cap);
                if (len) *len = e->len;
                pthread_mutex_unlock(&w->lock);
                return PLAIT_OK;
            }
        if (pthread_cond_timedwait(&w->cond, &w->lock, &dl) == ETIMEDOUT) {
            pthread_mutex_unlock(&w->lock);
            return plait_set_error(PLAIT_ERR_TIMEOUT, "threads bootstrap: key '%s' did not appear "
                                   "within %g s", key, w->timeout_s);
        }
    }
}

static plait_status b_set(void *ctx, const char *key, const void *value, size_t len) {
    tboot *b = ctx;
    char k[256];
    snprintf(k, sizeof k, "%08x/%s", b->pub.comm_id, key);
    return kv_set(b->w, k, value, len);
}

static plait_status b_get(void *ctx, const char *key, void *value, size_t cap, size_t *len) {
    tboot *b = ctx;
    char k[256];
    snprintf(k, sizeof k, "%08x/%s", b->pub.comm_id, key);
    return kv_get(b->w, k, value, cap, len);
}

static plait_status b_allgather(void *ctx, const void *mine, void *all, size_t bytes) {
    tboot *b = ctx;
    uint64_t round = ++b->round;
    char k[256];
    snprintf(k, sizeof k, "%08x/ag%llu/%d", b->pub.comm_id, (unsigned long long)round, b->pub.rank);
    plait_status st = kv_set(b->w, k, mine, bytes);
    for (int q = 0; st == PLAIT_OK && q < b->pub.size; q++) {
        snprintf(k, sizeof k, "%08x/ag%llu/%d", b->pub.comm_id, (unsigned long long)round, q);
        st = kv_get(b->w, k, (char *)all + (size_t)q * bytes, bytes, NULL);
    }
    return st;
}

static plait_status b_barrier(void *ctx) {
    tboot *b = ctx;
    char one = 1, *all = malloc((size_t)b->pub.size);
    if (!all) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = b_allgather(ctx, &one, all, 1);
    free(all);
    return st;
}

plait_status plait_threads_bootstrap_new(plait_threads_world *w, uint32_t comm_id, int rank, int size,
                                         plait_bootstrap **out) {
    tboot *b = calloc(1, sizeof *b);
    if (!b) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    b->host_of = calloc((size_t)size, sizeof *b->host_of);
    if (!b->host_of) {
        free(b);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    b->magic = BOOT_MAGIC;
    b->w = w;
    b->pub = (plait_bootstrap){.struct_size = sizeof(plait_bootstrap),
                               .rank = rank,
                               .size = size,
                               .local_rank = rank,
                               .local_size = size,
                               .comm_id = comm_id,
                               .timeout_s = w->timeout_s,
                               .ctx = b,
                               .set = b_set,
                               .get = b_get,
                               .allgather = b_allgather,
                               .barrier = b_barrier,
                               .host_of = b->host_of};
    *out = &b->pub;
    return PLAIT_OK;
}

void plait_threads_bootstrap_free(plait_bootstrap *bs) {
    if (!bs) return;
    tboot *b = bs->ctx; /* pub is the first member of the tboot */
    free(b->host_of);
    free(b);
}

static plait_status factory_create(void *ctx, uint32_t comm_id, int rank, int size,
                                   const int *world_ranks, plait_bootstrap **out) {
    (void)world_ranks;
    return plait_threads_bootstrap_new(ctx, comm_id, rank, size, out);
}

static void factory_destroy(void *ctx, plait_bootstrap *bs) {
    (void)ctx;
    plait_threads_bootstrap_free(bs);
}

plait_bootstrap_factory plait_threads_factory(plait_threads_world *w) {
    return (plait_bootstrap_factory){.ctx = w, .create = factory_create, .destroy = factory_destroy};
}

plait_status plait_threads_world_of(plait_threads_world *w, int rank, const plait_comm_ops *ops,
                                    const plait_config *config, const plait_comm_settings *settings,
                                    plait_comm **out) {
    plait_bootstrap *bs = NULL;
    plait_status st = plait_threads_bootstrap_new(w, 0, rank, w->size, &bs);
    if (st != PLAIT_OK) return st;
    plait_bootstrap_factory f = plait_threads_factory(w);
    st = plait_comm_create_world(ops, config, bs, &f, settings, "world", out);
    plait_threads_bootstrap_free(bs);
    return st;
}

plait_status plait_threads_comm_world(plait_threads_world *w, int rank,
                                      const plait_comm_settings *settings, plait_comm **out) {
    return plait_threads_world_of(w, rank, plait_threads_comm_ops(), NULL, settings, out);
}

/* ---- running ranks as threads ------------------------------------------ */

typedef struct run_arg {
    void (*fn)(int, void *);
    void *arg;
    int rank;
} run_arg;

static void *run_main(void *p) {
    run_arg *a = p;
    a->fn(a->rank, a->arg);
    return NULL;
}

plait_status plait_threads_run(int size, void (*fn)(int rank, void *arg), void *arg) {
    pthread_t *t = calloc((size_t)size, sizeof *t);
    run_arg *a = calloc((size_t)size, sizeof *a);
    if (!t || !a) {
        free(t), free(a);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    int started = 0;
    plait_status st = PLAIT_OK;
    for (int i = 0; i < size; i++) {
        a[i] = (run_arg){fn, arg, i};
        int rc = pthread_create(&t[i], NULL, run_main, &a[i]);
        if (rc != 0) {
            st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot start rank thread %d: %s", i, strerror(rc));
            break;
        }
        started++;
    }
    for (int i = 0; i < started; i++) pthread_join(t[i], NULL);
    free(t);
    free(a);
    return st;
}
