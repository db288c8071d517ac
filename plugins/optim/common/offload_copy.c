/*
 * offload = host's copies on the communication stream (offload_copy.h).
 *
 * The thread copies every piece in (gradient, then parameter) and
 * publishes how many are in; then copies each piece's parameters back as
 * the training thread releases it. copy_on to or from page-locked memory
 * returns once the mirror may be read or reused, so "in" is exact when it
 * is published. The mirrors are whole (the elements this rank updates),
 * not a ring of chunks: the host's walk never waits for a slot to drain,
 * at 8 bytes of page-locked memory per element (config check and plan
 * count them, core/cost/memory.c).
 */
#include "offload_copy.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/device.h>

struct offload_copy {
    const plait_host *host;
    const plait_device_ops *dev;
    const char *who;
    float *mir_g, *mir_p;
    plait_device_event *ready, *done;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    int quit, job;           /* job: a step's copies are running */
    const offload_piece *pc; /* the step's pieces */
    size_t n, in, out_ok;    /* pieces; copied in; released for the copy back */
    plait_status err;
    char msg[512];
};

static void *mirror(const plait_host *h, size_t n, const char *tag) {
    float *p = h->alloc((n ? n : 1) * sizeof(float), PLAIT_MEM_HOST_PINNED, 4096, tag);
    if (p) memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}

/* The first failure, its message kept for the training thread. */
static void fail(offload_copy *c, plait_status st, const char *what, size_t at) {
    const char *m = c->host->last_error ? c->host->last_error() : "";
    pthread_mutex_lock(&c->mu);
    if (c->err == PLAIT_OK) {
        c->err = st;
        snprintf(c->msg, sizeof c->msg, "%s: offload: %s of state elements from %zu: %s", c->who, what, at, m);
    }
    pthread_mutex_unlock(&c->mu);
}

static void copy_in(offload_copy *c) {
    const plait_device_ops *d = c->dev;
    plait_status st = d->event_wait(c->ready, PLAIT_STREAM_COMM);
    if (st != PLAIT_OK) fail(c, st, "ordering the copies after the backward", 0);
    for (size_t i = 0; i < c->n; i++) {
        const offload_piece *p = &c->pc[i];
        size_t bytes = p->n * sizeof(float);
        if (c->err == PLAIT_OK) {
            st = d->copy_on(PLAIT_STREAM_COMM, c->mir_g + p->at, p->grad, bytes, PLAIT_COPY_TO_HOST);
            if (st == PLAIT_OK && p->param)
                st = d->copy_on(PLAIT_STREAM_COMM, c->mir_p + p->at, p->param, bytes, PLAIT_COPY_TO_HOST);
            if (st != PLAIT_OK) fail(c, st, "copying gradients and parameters to the host", p->at);
        }
        pthread_mutex_lock(&c->mu);
        c->in = i + 1;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
}

static void copy_out(offload_copy *c) {
    const plait_device_ops *d = c->dev;
    for (size_t i = 0; i < c->n; i++) {
        pthread_mutex_lock(&c->mu);
        while (c->out_ok <= i) pthread_cond_wait(&c->cv, &c->mu);
        int skip = c->err != PLAIT_OK;
        pthread_mutex_unlock(&c->mu);
        const offload_piece *p = &c->pc[i];
        if (skip || !p->param) continue;
        plait_status st = d->copy_on(PLAIT_STREAM_COMM, p->param, c->mir_p + p->at, p->n * sizeof(float),
                                     PLAIT_COPY_TO_DEVICE);
        if (st != PLAIT_OK) fail(c, st, "copying the updated parameters to the device", p->at);
    }
    plait_status st = d->event_record(c->done, PLAIT_STREAM_COMM);
    if (st != PLAIT_OK) fail(c, st, "marking the end of the copies back", 0);
}

static void *copier(void *arg) {
    offload_copy *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->job && !c->quit) pthread_cond_wait(&c->cv, &c->mu);
        int quit = c->quit && !c->job;
        pthread_mutex_unlock(&c->mu);
        if (quit) return NULL;
        copy_in(c);
        copy_out(c);
        pthread_mutex_lock(&c->mu);
        c->job = 0;
        pthread_cond_broadcast(&c->cv);
        pthread_mutex_unlock(&c->mu);
    }
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
    if (ok) ok = (c->ready = c->dev->event_create()) != NULL && (c->done = c->dev->event_create()) != NULL;
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
    if (c->ready) c->dev->event_destroy(c->ready);
    if (c->done) c->dev->event_destroy(c->done);
    c->host->free(c->mir_g);
    c->host->free(c->mir_p);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

float *offload_copy_grad(offload_copy *c) { return c->mir_g; }
float *offload_copy_param(offload_copy *c) { return c->mir_p; }

plait_status offload_copy_begin(offload_copy *c, const offload_piece *pieces, size_t n) {
    /* the gradients are final once what the compute stream has queued ran */
    plait_status st = c->dev->event_record(c->ready, PLAIT_STREAM_COMPUTE);
    if (st != PLAIT_OK) return st;
    pthread_mutex_lock(&c->mu);
    c->pc = pieces;
    c->n = n;
    c->in = c->out_ok = 0;
    c->err = PLAIT_OK;
    c->job = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return PLAIT_OK;
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
    c->out_ok = i + 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

plait_status offload_copy_finish(offload_copy *c) {
    pthread_mutex_lock(&c->mu);
    c->out_ok = c->n; /* after a failure: let the thread run out */
    pthread_cond_broadcast(&c->cv);
    while (c->job) pthread_cond_wait(&c->cv, &c->mu);
    plait_status st = take_error(c);
    pthread_mutex_unlock(&c->mu);
    if (st != PLAIT_OK) return st;
    /* the next kernel reading a parameter waits on the device, not here */
    return c->dev->event_wait(c->done, PLAIT_STREAM_COMPUTE);
}
