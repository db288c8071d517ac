/*
 * offload = host's copies on the communication stream (offload_copy.h).
 *
 * The thread copies each posted piece in (gradient, then parameter), after
 * making the communication stream wait for its post's event, and counts
 * the pieces in; between those it copies back the parameters of the pieces
 * the training thread has released, in the order released (copies in
 * first: the host's update waits for them), each followed by a mark of
 * the `done` event, so a layer's forward can wait for the copies back so
 * far. copy_on to or from page-locked memory returns once the
 * mirror may be read or reused, so a piece counted in is there. The mirrors
 * are whole (the elements this rank updates), not a ring of chunks: the
 * walk never waits for a slot to drain, and a piece copied during the
 * backward stays until the step, at 8 bytes of page-locked memory per
 * element (config check and plan count them, core/cost/memory.c).
 */
#include "offload_copy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/device.h>

/* A queued piece and the post it came with. */
typedef struct queued {
    offload_piece p;
    size_t post;
} queued;

struct offload_copy {
    const plait_host *host;
    const plait_device_ops *dev;
    const char *who;
    float *mir_g, *mir_p;
    plait_device_event **ev; /* one per post of a step, reused step after step */
    size_t n_ev, cap_ev;
    plait_device_event *done;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    int quit;
    queued *q;
    size_t *back;         /* the pieces released for the copy back, in that order (room for cap) */
    size_t n, cap, posts; /* pieces and posts this step */
    size_t in, out;       /* copied in; copied back (of back[]) */
    size_t n_back;        /* released */
    int deferred;         /* the step finished with its copies back still running */
    plait_status err;
    char msg[512];
};

static void *mirror(const plait_host *h, size_t n, const char *tag) {
    float *p = h->alloc((n ? n : 1) * sizeof(float), PLAIT_MEM_HOST_PINNED, 4096, tag);
    if (p) memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

/* The first failure, its message kept for the training thread. Called
 * with mu held. */
static void fail(offload_copy *c, plait_status st, const char *what, size_t at) {
    const char *m = c->host->last_error ? c->host->last_error() : "";
    if (c->err == PLAIT_OK) {
        c->err = st;
        snprintf(c->msg, sizeof c->msg, "%s: offload: %s of state elements from %zu: %s", c->who, what, at, m);
    }
}

/* Piece e in: its post's event waited for first (on the device) when it
 * opens the post. */
static plait_status copy_in(offload_copy *c, const queued *e, int first_of_post, plait_device_event *ev) {
    const plait_device_ops *d = c->dev;
    plait_status st = first_of_post ? d->event_wait(ev, PLAIT_STREAM_COMM) : PLAIT_OK;
    size_t bytes = e->p.n * sizeof(float);
    if (st == PLAIT_OK) st = d->copy_on(PLAIT_STREAM_COMM, c->mir_g + e->p.at, e->p.grad, bytes, PLAIT_COPY_TO_HOST);
    if (st == PLAIT_OK && e->p.param)
        st = d->copy_on(PLAIT_STREAM_COMM, c->mir_p + e->p.at, e->p.param, bytes, PLAIT_COPY_TO_HOST);
    return st;
}

/* Piece e's updated parameters back, and the `done` event marked after
 * them. */
static plait_status copy_back(offload_copy *c, const queued *e) {
    const plait_device_ops *d = c->dev;
    plait_status st = d->copy_on(PLAIT_STREAM_COMM, e->p.param, c->mir_p + e->p.at, e->p.n * sizeof(float),
                                 PLAIT_COPY_TO_DEVICE);
    return st == PLAIT_OK ? d->event_record(c->done, PLAIT_STREAM_COMM) : st;
}

/* The thread: copies in first, then copies back; mu is released around
 * every device call. */
static void *copier(void *arg) {
    offload_copy *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        while (!c->quit && c->in == c->n && c->out == c->n_back) pthread_cond_wait(&c->cv, &c->mu);
        if (c->in < c->n) {
            size_t i = c->in;
            queued e = c->q[i];
            int first = i == 0 || c->q[i - 1].post != e.post, skip = c->err != PLAIT_OK;
            plait_device_event *ev = c->ev[e.post];
            pthread_mutex_unlock(&c->mu);
            plait_status st = skip ? PLAIT_OK : copy_in(c, &e, first, ev);
            pthread_mutex_lock(&c->mu);
            if (st != PLAIT_OK) fail(c, st, "copying gradients and parameters to the host", e.p.at);
            c->in = i + 1;
        } else if (c->out < c->n_back) {
            queued e = c->q[c->back[c->out]];
            int skip = c->err != PLAIT_OK || !e.p.param;
            pthread_mutex_unlock(&c->mu);
            plait_status st = skip ? PLAIT_OK : copy_back(c, &e);
            pthread_mutex_lock(&c->mu);
            if (st != PLAIT_OK) fail(c, st, "copying the updated parameters to the device", e.p.at);
            c->out++;
        } else if (c->quit) {
            break;
        }
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

offload_copy *offload_copy_open(const plait_host *host, const char *who, size_t numel, int with_param) {
    offload_copy *c = calloc(1, sizeof *c);
    if (!c) {
        host->set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory", who);
        return NULL;
    }
    c->host = host;
    c->dev = host->device;
    c->who = who;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    int ok = (c->mir_g = mirror(host, numel, "offload gradient mirror")) != NULL;
    if (ok && with_param) ok = (c->mir_p = mirror(host, numel, "offload parameter mirror")) != NULL;
    if (ok) ok = (c->done = c->dev->event_create()) != NULL;
    if (ok && pthread_create(&c->th, NULL, copier, c) != 0) {
        host->set_error(PLAIT_ERR_SYSTEM, "%s: offload: cannot start the copy thread", who);
        ok = 0;
    }
    c->started = ok;
    if (!ok) {
        offload_copy_close(c);
        return NULL;
    }
    return c;
}

void offload_copy_close(offload_copy *c) {
    if (!c) return;
    if (c->started) {
        pthread_mutex_lock(&c->mu);
        c->quit = 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
        pthread_join(c->th, NULL);
    }
    for (size_t i = 0; i < c->n_ev; i++) c->dev->event_destroy(c->ev[i]);
    if (c->done) c->dev->event_destroy(c->done);
    free(c->ev);
    free(c->q);
    free(c->back);
    c->host->free(c->mir_g);
    c->host->free(c->mir_p);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

float *offload_copy_grad(offload_copy *c) { return c->mir_g; }
float *offload_copy_param(offload_copy *c) { return c->mir_p; }

/* The event of post number k, made the first time a step has k + 1 posts
 * (called with mu held: the thread reads c->ev under it). */
static plait_device_event *post_event(offload_copy *c, size_t k) {
    if (k < c->n_ev) return c->ev[k];
    if (k >= c->cap_ev) {
        size_t cap = c->cap_ev ? 2 * c->cap_ev : 16;
        plait_device_event **ev = realloc(c->ev, cap * sizeof *ev);
        if (!ev) return NULL;
        c->ev = ev, c->cap_ev = cap;
    }
    plait_device_event *e = c->dev->event_create();
    if (e) c->ev[c->n_ev++] = e;
    return e;
}

/* Room for `need` pieces in the queue and the release order (mu held). */
static int grow(offload_copy *c, size_t need) {
    if (need <= c->cap) return 1;
    size_t cap = 2 * c->cap > need ? 2 * c->cap : need < 64 ? 64 : need; /* amortised: at least double */
    queued *q = realloc(c->q, cap * sizeof *q);
    if (q) c->q = q;
    size_t *b = q ? realloc(c->back, cap * sizeof *b) : NULL;
    if (b) c->back = b, c->cap = cap;
    return b != NULL;
}

plait_status offload_copy_post(offload_copy *c, const offload_piece *pieces, size_t n) {
    if (!n) return PLAIT_OK;
    plait_status st = offload_copy_drain(c); /* the last step's copies back, before this one's numbering */
    if (st != PLAIT_OK) return st;
    pthread_mutex_lock(&c->mu);
    size_t k = c->posts;
    plait_device_event *ev = post_event(c, k);
    st = ev ? PLAIT_OK : PLAIT_ERR_NO_MEMORY;
    if (st == PLAIT_OK && !grow(c, c->n + n)) st = PLAIT_ERR_NO_MEMORY;
    /* the pieces' gradients are final once what the compute stream holds
     * now has run */
    if (st == PLAIT_OK) st = c->dev->event_record(ev, PLAIT_STREAM_COMPUTE);
    if (st == PLAIT_OK) {
        for (size_t i = 0; i < n; i++) c->q[c->n + i] = (queued){pieces[i], k};
        c->n += n;
        c->posts = k + 1;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    if (st == PLAIT_ERR_NO_MEMORY) return c->host->set_error(st, "%s: offload: out of memory queueing copies", c->who);
    return st;
}

int offload_copy_piece(offload_copy *c, size_t i, offload_piece *out) {
    pthread_mutex_lock(&c->mu);
    int have = i < c->n;
    if (have) *out = c->q[i].p;
    pthread_mutex_unlock(&c->mu);
    return have;
}

static plait_status take_error(offload_copy *c) {
    plait_status st = c->err;
    return st == PLAIT_OK ? PLAIT_OK : c->host->set_error(st, "%s", c->msg);
}

plait_status offload_copy_wait_in(offload_copy *c, size_t i) {
    pthread_mutex_lock(&c->mu);
    while (c->in <= i && c->err == PLAIT_OK) pthread_cond_wait(&c->cv, &c->mu);
    plait_status st = take_error(c);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void offload_copy_release(offload_copy *c, size_t i) {
    pthread_mutex_lock(&c->mu);
    if (i < c->n && c->n_back < c->n) c->back[c->n_back++] = i; /* back[] has room for every piece */
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

/* Every copy in and every released copy back run (a piece not released,
 * after a failure, stays where it was: its parameters were not updated),
 * the compute stream ordered after them, the numbering restarted. */
static plait_status drain_all(offload_copy *c) {
    pthread_mutex_lock(&c->mu);
    while (c->in < c->n || c->out < c->n_back) pthread_cond_wait(&c->cv, &c->mu);
    plait_status st = take_error(c);
    c->n = c->posts = c->in = c->out = c->n_back = 0;
    c->deferred = 0;
    c->err = PLAIT_OK;
    pthread_mutex_unlock(&c->mu);
    if (st != PLAIT_OK) return st;
    /* the next kernel reading a parameter waits on the device, not here */
    return c->dev->event_wait(c->done, PLAIT_STREAM_COMPUTE);
}

plait_status offload_copy_finish(offload_copy *c, int defer) {
    pthread_mutex_lock(&c->mu);
    while (c->in < c->n && c->err == PLAIT_OK) pthread_cond_wait(&c->cv, &c->mu);
    /* deferred only when every piece went well and was released */
    c->deferred = defer && c->err == PLAIT_OK && c->n_back == c->n;
    int deferred = c->deferred;
    pthread_mutex_unlock(&c->mu);
    return deferred ? PLAIT_OK : drain_all(c);
}

/* 1 if a released piece of `layer` has not gone back yet (mu held). */
static int layer_pending(const offload_copy *c, int32_t layer) {
    for (size_t j = c->out; j < c->n_back; j++)
        if (c->q[c->back[j]].p.layer == layer) return 1;
    return 0;
}

plait_status offload_copy_ready(offload_copy *c, int32_t layer) {
    pthread_mutex_lock(&c->mu);
    int deferred = c->deferred;
    while (deferred && c->err == PLAIT_OK && layer_pending(c, layer)) pthread_cond_wait(&c->cv, &c->mu);
    plait_status st = take_error(c);
    pthread_mutex_unlock(&c->mu);
    if (st != PLAIT_OK || !deferred) return st;
    /* the host saw the copies return; on a device where a copy from
     * page-locked memory may still run after that, the kernels wait for it */
    return c->dev->event_wait(c->done, PLAIT_STREAM_COMPUTE);
}

plait_status offload_copy_drain(offload_copy *c) {
    pthread_mutex_lock(&c->mu);
    int deferred = c->deferred;
    pthread_mutex_unlock(&c->mu);
    return deferred ? drain_all(c) : PLAIT_OK;
}
