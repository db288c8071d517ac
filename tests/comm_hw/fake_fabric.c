/* A loopback fabric for the verbs engine's tests; see fake_fabric.h. */
#include "fake_fabric.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FF_MAX 16

typedef struct ff_reg {
    struct ff_reg *next;
    char *addr;
    size_t len;
    uint32_t key;
} ff_reg;

typedef struct ff_rx {
    uint64_t wr_id;
    char *buf;
    uint32_t len;
} ff_rx;

/* A SEND waiting for a receive buffer at its target. */
typedef struct ff_pending {
    struct ff_pending *next;
    int from;
    uint64_t wr_id;
    uint32_t len;
    char data[];
} ff_pending;

struct ff_ep {
    ff_world *w;
    int rank;
    vb_engine *eng;
    vb_cqe *cq;
    size_t cq_n, cq_cap;
    ff_rx *srq;
    size_t srq_n, srq_cap;
    ff_pending *rnr, *rnr_tail;
    ff_reg *regs;
    int killed[FF_MAX];
    int fail_reads_from[FF_MAX];
    int corrupt_next;
    int sends[8];
    pthread_t thread;
    int running, stop, notify;
    pthread_cond_t cv;
};

struct ff_world {
    int n;
    pthread_mutex_t mu;
    uint32_t next_key;
    ff_ep eps[FF_MAX];
};

ff_world *ff_world_new(int n) {
    if (n > FF_MAX) return NULL;
    ff_world *w = calloc(1, sizeof *w);
    w->n = n;
    w->next_key = 100;
    pthread_mutex_init(&w->mu, NULL);
    for (int i = 0; i < n; i++) {
        w->eps[i].w = w;
        w->eps[i].rank = i;
        pthread_cond_init(&w->eps[i].cv, NULL);
    }
    return w;
}

ff_ep *ff_endpoint(ff_world *w, int rank) { return &w->eps[rank]; }

/* w->mu held */
static void push_cqe(ff_ep *ep, uint64_t wr_id, int peer, int ok, const char *status, uint32_t len) {
    if (ep->cq_n == ep->cq_cap) {
        ep->cq_cap = ep->cq_cap ? 2 * ep->cq_cap : 64;
        ep->cq = realloc(ep->cq, ep->cq_cap * sizeof *ep->cq);
    }
    ep->cq[ep->cq_n++] = (vb_cqe){wr_id, peer, ok, status, ok ? 0u : 0x42u, len};
    ep->notify = 1;
    pthread_cond_signal(&ep->cv);
}

/* Deliver `data` from `from` into a posted buffer of `to`; w->mu held.
 * Returns 0, or -1 when no buffer is posted (RNR). */
static int land(ff_ep *to, int from, uint64_t send_wr, const void *data, uint32_t len) {
    if (to->srq_n == 0) return -1;
    ff_rx rx = to->srq[0];
    memmove(to->srq, to->srq + 1, (to->srq_n - 1) * sizeof *to->srq);
    to->srq_n--;
    memcpy(rx.buf, data, len < rx.len ? len : rx.len);
    push_cqe(to, rx.wr_id, from, 1, "success", len);
    push_cqe(&to->w->eps[from], send_wr, to->rank, 1, "success", 0);
    return 0;
}

static int f_post_send(void *fab, int peer, uint64_t wr_id, const void *buf, uint32_t len, uint32_t lkey) {
    (void)lkey;
    ff_ep *ep = fab;
    ff_world *w = ep->w;
    pthread_mutex_lock(&w->mu);
    ff_ep *to = &w->eps[peer];
    vb_hdr h;
    memcpy(&h, buf, sizeof h);
    if (h.type < 8) ep->sends[h.type]++;
    if (ep->killed[peer]) {
        push_cqe(ep, wr_id, peer, 0, "Work Request Flushed Error", 0);
    } else if (to->killed[ep->rank]) {
        push_cqe(ep, wr_id, peer, 0, "transport retry counter exceeded", 0);
    } else {
        char tmp[65536];
        memcpy(tmp, buf, len);
        if (ep->corrupt_next) {
            ep->corrupt_next = 0;
            tmp[0] ^= 0x55; /* magic */
        }
        /* order per sender: anything already waiting goes first */
        int queued = 0;
        for (ff_pending *p = to->rnr; p; p = p->next) queued |= p->from == ep->rank;
        if (queued || land(to, ep->rank, wr_id, tmp, len) != 0) {
            ff_pending *p = malloc(sizeof *p + len);
            p->next = NULL;
            p->from = ep->rank;
            p->wr_id = wr_id;
            p->len = len;
            memcpy(p->data, tmp, len);
            if (to->rnr_tail) to->rnr_tail->next = p;
            else to->rnr = p;
            to->rnr_tail = p;
        }
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static const ff_reg *find_reg(const ff_ep *ep, uint32_t key, uint64_t addr, uint32_t len) {
    for (const ff_reg *r = ep->regs; r; r = r->next)
        if (r->key == key && addr >= (uint64_t)(uintptr_t)r->addr &&
            addr + len <= (uint64_t)(uintptr_t)r->addr + r->len)
            return r;
    return NULL;
}

static int f_post_read(void *fab, int peer, uint64_t wr_id, void *local, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                       uint32_t len) {
    ff_ep *ep = fab;
    ff_world *w = ep->w;
    pthread_mutex_lock(&w->mu);
    ff_ep *owner = &w->eps[peer];
    if (ep->killed[peer]) {
        push_cqe(ep, wr_id, peer, 0, "Work Request Flushed Error", 0);
    } else if (owner->killed[ep->rank] || ep->fail_reads_from[peer]) {
        push_cqe(ep, wr_id, peer, 0, "transport retry counter exceeded", 0);
    } else if (!find_reg(owner, rkey, raddr, len) || !find_reg(ep, lkey, (uint64_t)(uintptr_t)local, len)) {
        push_cqe(ep, wr_id, peer, 0, "remote access error", 0);
    } else {
        memcpy(local, (const void *)(uintptr_t)raddr, len);
        push_cqe(ep, wr_id, peer, 1, "success", 0);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static int f_post_recv(void *fab, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey) {
    (void)lkey;
    ff_ep *ep = fab;
    ff_world *w = ep->w;
    pthread_mutex_lock(&w->mu);
    if (ep->srq_n == ep->srq_cap) {
        ep->srq_cap = ep->srq_cap ? 2 * ep->srq_cap : 64;
        ep->srq = realloc(ep->srq, ep->srq_cap * sizeof *ep->srq);
    }
    ep->srq[ep->srq_n++] = (ff_rx){wr_id, buf, len};
    /* a waiting SEND lands now */
    ff_pending *p = ep->rnr;
    if (p && land(ep, p->from, p->wr_id, p->data, p->len) == 0) {
        ep->rnr = p->next;
        if (!ep->rnr) ep->rnr_tail = NULL;
        free(p);
    }
    pthread_mutex_unlock(&w->mu);
    return 0;
}

static int f_poll(void *fab, vb_cqe *out, int max) {
    ff_ep *ep = fab;
    pthread_mutex_lock(&ep->w->mu);
    int n = (int)ep->cq_n < max ? (int)ep->cq_n : max;
    if (n > 0) {
        memcpy(out, ep->cq, (size_t)n * sizeof *out);
        memmove(ep->cq, ep->cq + n, (ep->cq_n - (size_t)n) * sizeof *ep->cq);
        ep->cq_n -= (size_t)n;
    }
    pthread_mutex_unlock(&ep->w->mu);
    return n;
}

static int f_reg(void *fab, void *addr, size_t len, vb_mr *out) {
    ff_ep *ep = fab;
    ff_reg *r = calloc(1, sizeof *r);
    if (!r) return ENOMEM;
    pthread_mutex_lock(&ep->w->mu);
    r->addr = addr;
    r->len = len;
    r->key = ep->w->next_key++;
    r->next = ep->regs;
    ep->regs = r;
    pthread_mutex_unlock(&ep->w->mu);
    out->handle = r;
    out->lkey = out->rkey = r->key;
    return 0;
}

static void f_dereg(void *fab, vb_mr *mr) {
    ff_ep *ep = fab;
    pthread_mutex_lock(&ep->w->mu);
    for (ff_reg **pp = &ep->regs; *pp; pp = &(*pp)->next)
        if (*pp == mr->handle) {
            ff_reg *r = *pp;
            *pp = r->next;
            free(r);
            break;
        }
    pthread_mutex_unlock(&ep->w->mu);
    mr->handle = NULL;
}

static void f_kill_peer(void *fab, int peer) {
    ff_ep *ep = fab;
    pthread_mutex_lock(&ep->w->mu);
    ep->killed[peer] = 1;
    /* our SENDs still waiting at the peer are flushed back to us */
    ff_ep *to = &ep->w->eps[peer];
    for (ff_pending **pp = &to->rnr; *pp;) {
        ff_pending *p = *pp;
        if (p->from != ep->rank) {
            pp = &p->next;
            continue;
        }
        *pp = p->next;
        push_cqe(ep, p->wr_id, peer, 0, "Work Request Flushed Error", 0);
        free(p);
    }
    to->rnr_tail = NULL;
    for (ff_pending *p = to->rnr; p; p = p->next) to->rnr_tail = p;
    pthread_mutex_unlock(&ep->w->mu);
}

static void f_describe_peer(void *fab, int peer, char *buf, size_t cap) {
    (void)fab;
    snprintf(buf, cap, "fake%d port 1", peer);
}

const vb_fabric_ops ff_ops = {f_post_send, f_post_read, f_post_recv, f_poll,
                              f_reg,       f_dereg,     f_kill_peer, f_describe_peer};

static void *ff_thread(void *arg) {
    ff_ep *ep = arg;
    ff_world *w = ep->w;
    pthread_mutex_lock(&w->mu);
    while (!ep->stop) {
        if (!ep->notify) {
            pthread_cond_wait(&ep->cv, &w->mu);
            continue;
        }
        ep->notify = 0;
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_lock(&ep->eng->mu);
        vb_progress(ep->eng);
        pthread_mutex_unlock(&ep->eng->mu);
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

void ff_start(ff_ep *ep, vb_engine *e) {
    ep->eng = e;
    ep->running = 1;
    pthread_create(&ep->thread, NULL, ff_thread, ep);
}

void ff_stop_all(ff_world *w) {
    for (int i = 0; i < w->n; i++) {
        ff_ep *ep = &w->eps[i];
        if (!ep->running) continue;
        pthread_mutex_lock(&w->mu);
        ep->stop = 1;
        pthread_cond_signal(&ep->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(ep->thread, NULL);
        ep->running = 0;
    }
}

void ff_world_free(ff_world *w) {
    if (!w) return;
    ff_stop_all(w);
    for (int i = 0; i < w->n; i++) {
        ff_ep *ep = &w->eps[i];
        free(ep->cq);
        free(ep->srq);
        for (ff_pending *p = ep->rnr, *nx; p; p = nx) {
            nx = p->next;
            free(p);
        }
        for (ff_reg *r = ep->regs, *nx; r; r = nx) {
            nx = r->next;
            free(r);
        }
        pthread_cond_destroy(&ep->cv);
    }
    pthread_mutex_destroy(&w->mu);
    free(w);
}

void ff_fail_reads_from(ff_world *w, int reader, int owner) {
    pthread_mutex_lock(&w->mu);
    w->eps[reader].fail_reads_from[owner] = 1;
    pthread_mutex_unlock(&w->mu);
}

void ff_corrupt_next_send(ff_world *w, int from) {
    pthread_mutex_lock(&w->mu);
    w->eps[from].corrupt_next = 1;
    pthread_mutex_unlock(&w->mu);
}

void ff_break_link(ff_world *w, int from, int to) {
    pthread_mutex_lock(&w->mu);
    w->eps[to].killed[from] = 1; /* `from`'s next work fails with retry exceeded */
    pthread_mutex_unlock(&w->mu);
}

int ff_sends(ff_world *w, int from, int type) {
    pthread_mutex_lock(&w->mu);
    int n = w->eps[from].sends[type];
    pthread_mutex_unlock(&w->mu);
    return n;
}

int ff_live_registrations(ff_world *w, int rank) {
    pthread_mutex_lock(&w->mu);
    int n = 0;
    for (ff_reg *r = w->eps[rank].regs; r; r = r->next) n++;
    pthread_mutex_unlock(&w->mu);
    return n;
}
