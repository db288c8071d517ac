/*
 * The staging pool and copy thread of a communicator (staging.h). The
 * pool's host buffers are page-locked where the open device offers it
 * (plait_device_alloc_pinned: cudaHostAlloc on cuda), so its copies run at
 * full bus speed and asynchronously; plain host memory otherwise.
 */
#include "staging/staging.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "runtime/error.h"

#define QUEUE 8       /* the pipeline keeps at most three jobs queued */
#define P2P_CACHE 8   /* idle point-to-point buffers kept for reuse */
#define STAGING_ALIGN 4096
#define STAGING_TAG "comm staging"

typedef struct p2p_buf {
    void *ptr;
    size_t bytes;
    int in_use;
} p2p_buf;

struct plait_staging {
    char name[32];
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;         /* queue changed, a job finished */
    plait_staging_copy queue[QUEUE];
    uint64_t posted, done;       /* tickets: queue holds (done, posted] */
    int stopping, running, skip;
    plait_status err;
    char msg[1024];

    char *bufs[4];
    size_t buf_bytes;

    p2p_buf p2p[P2P_CACHE];

    _Atomic uint64_t copy_events; /* +1 at the start and at the end of a copy: odd = copying */
    uint64_t transfer_mark;       /* copy_events when the running transfer started */
    _Atomic uint64_t transfers, overlapped;

    char *dev[2];                /* device scratch (send, recv) */
    size_t dev_bytes[2];
    void (*dev_free)(void *);
};

plait_status plait_staging_copy_now(const plait_staging_copy *j) {
    for (int b = 0; b < j->blocks; b++) {
        char *h = j->host + (size_t)b * j->host_stride, *d = j->dev + (size_t)b * j->dev_stride;
        plait_status st = j->dir == PLAIT_COPY_TO_HOST ? plait_comm_staging_copy(j->device, j->on_comm, h, d, j->bytes, j->dir)
                                                       : plait_comm_staging_copy(j->device, j->on_comm, d, h, j->bytes, j->dir);
        if (st != PLAIT_OK)
            return plait_wrap_error(st, "copying %zu B %s the device", j->bytes,
                                    j->dir == PLAIT_COPY_TO_HOST ? "from" : "to");
    }
    return PLAIT_OK;
}

static void *staging_thread_main(void *arg) {
    plait_staging *s = arg;
    pthread_setname_np(pthread_self(), s->name);
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->stopping && s->done == s->posted) pthread_cond_wait(&s->cond, &s->lock);
        if (s->done == s->posted) break; /* stopping, nothing queued */
        plait_staging_copy job = s->queue[s->done % QUEUE];
        int skip = s->skip || s->err != PLAIT_OK;
        s->running = 1;
        pthread_mutex_unlock(&s->lock);
        if (!skip) atomic_fetch_add(&s->copy_events, 1);
        plait_status st = skip ? PLAIT_OK : plait_staging_copy_now(&job);
        if (!skip) atomic_fetch_add(&s->copy_events, 1);
        pthread_mutex_lock(&s->lock);
        if (st != PLAIT_OK && s->err == PLAIT_OK) {
            s->err = st;
            snprintf(s->msg, sizeof s->msg, "%s", plait_last_error());
        }
        s->running = 0;
        s->done++;
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

plait_status plait_staging_of(plait_comm *comm, plait_staging **out) {
    pthread_mutex_lock(&comm->lock);
    plait_staging *s = comm->staging;
    if (s) {
        pthread_mutex_unlock(&comm->lock);
        *out = s;
        return PLAIT_OK;
    }
    s = calloc(1, sizeof *s);
    if (!s) {
        pthread_mutex_unlock(&comm->lock);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the staging of '%s'", comm->name);
    }
    snprintf(s->name, sizeof s->name, "plait-stg-%.5s", comm->name);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    int rc = pthread_create(&s->thread, NULL, staging_thread_main, s);
    if (rc != 0) {
        pthread_mutex_unlock(&comm->lock);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->cond);
        free(s);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the staging thread of '%s': %s", comm->name,
                               strerror(rc));
    }
    comm->staging = s;
    pthread_mutex_unlock(&comm->lock);
    *out = s;
    return PLAIT_OK;
}

void plait_staging_free(plait_staging *s, int leaked) {
    if (!s) return;
    pthread_mutex_lock(&s->lock);
    s->stopping = 1;
    s->skip = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->cond);
    if (!leaked) {
        for (int i = 0; i < 4; i++) plait_device_free(s->bufs[i]);
        for (int i = 0; i < P2P_CACHE; i++)
            if (!s->p2p[i].in_use) plait_device_free(s->p2p[i].ptr);
        for (int i = 0; i < 2 && s->dev_free; i++) s->dev_free(s->dev[i]);
    }
    free(s);
}

plait_status plait_staging_buffers(plait_staging *s, size_t bytes, char *bufs[4]) {
    if (bytes > s->buf_bytes || !s->bufs[0]) {
        for (int i = 0; i < 4; i++) plait_device_free(s->bufs[i]), s->bufs[i] = NULL;
        s->buf_bytes = 0;
        for (int i = 0; i < 4; i++) {
            s->bufs[i] = plait_device_alloc_pinned(bytes ? bytes : 1, STAGING_ALIGN, STAGING_TAG);
            if (!s->bufs[i])
                return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "staging buffers of %zu B", bytes);
        }
        s->buf_bytes = bytes;
    }
    memcpy(bufs, s->bufs, sizeof s->bufs);
    return PLAIT_OK;
}

plait_status plait_staging_device_buffers(plait_staging *s, const plait_comm_device *dev, size_t send_bytes,
                                        size_t recv_bytes, char *out[2]) {
    size_t want[2] = {send_bytes ? send_bytes : 1, recv_bytes ? recv_bytes : 1};
    for (int i = 0; i < 2; i++) {
        if (s->dev[i] && s->dev_bytes[i] >= want[i] && s->dev_free == dev->free) continue;
        if (s->dev[i] && s->dev_free) s->dev_free(s->dev[i]);
        s->dev[i] = NULL;
        s->dev_bytes[i] = 0;
        s->dev_free = dev->free;
        size_t bytes = want[i] < 4096 ? 4096 : want[i];
        if (!(s->dev[i] = dev->alloc(bytes, STAGING_TAG)))
            return plait_wrap_error(PLAIT_ERR_NO_MEMORY, "device scratch of %zu B for host buffers", bytes);
        s->dev_bytes[i] = bytes;
    }
    out[0] = s->dev[0];
    out[1] = s->dev[1];
    return PLAIT_OK;
}

plait_status plait_staging_post(plait_staging *s, const plait_staging_copy *job, uint64_t *ticket) {
    pthread_mutex_lock(&s->lock);
    while (s->posted - s->done >= QUEUE) pthread_cond_wait(&s->cond, &s->lock);
    s->queue[s->posted % QUEUE] = *job;
    *ticket = ++s->posted;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return PLAIT_OK;
}

void plait_staging_mark_transfer(plait_staging *s, int on) {
    uint64_t e = atomic_load(&s->copy_events);
    if (on) {
        s->transfer_mark = e;
        return;
    }
    atomic_fetch_add(&s->transfers, 1);
    if ((s->transfer_mark & 1) || e != s->transfer_mark) atomic_fetch_add(&s->overlapped, 1);
}

void plait_staging_counts(const plait_staging *s, uint64_t *transfers, uint64_t *overlapped) {
    plait_staging *m = (plait_staging *)(uintptr_t)s;
    *transfers = atomic_load(&m->transfers);
    *overlapped = atomic_load(&m->overlapped);
}

uint64_t plait_staging_posted(const plait_staging *s) {
    plait_staging *m = (plait_staging *)(uintptr_t)s;
    pthread_mutex_lock(&m->lock);
    uint64_t p = m->posted;
    pthread_mutex_unlock(&m->lock);
    return p;
}

plait_status plait_staging_wait(plait_staging *s, uint64_t ticket) {
    pthread_mutex_lock(&s->lock);
    while (s->done < ticket && s->err == PLAIT_OK) pthread_cond_wait(&s->cond, &s->lock);
    plait_status st = s->err;
    if (st != PLAIT_OK) plait_set_error(st, "%s", s->msg);
    pthread_mutex_unlock(&s->lock);
    return st;
}

void plait_staging_cancel(plait_staging *s) {
    pthread_mutex_lock(&s->lock);
    s->skip = 1;
    while (s->done < s->posted) pthread_cond_wait(&s->cond, &s->lock);
    s->skip = 0;
    s->err = PLAIT_OK;
    s->msg[0] = 0;
    pthread_mutex_unlock(&s->lock);
}

void *plait_staging_borrow(plait_staging *s, size_t bytes) {
    pthread_mutex_lock(&s->lock);
    int best = -1, empty = -1;
    for (int i = 0; i < P2P_CACHE; i++) {
        p2p_buf *b = &s->p2p[i];
        if (b->in_use) continue;
        if (!b->ptr) {
            if (empty < 0) empty = i;
        } else if (b->bytes >= bytes && (best < 0 || b->bytes < s->p2p[best].bytes)) {
            best = i;
        }
    }
    if (best >= 0) {
        s->p2p[best].in_use = 1;
        void *p = s->p2p[best].ptr;
        pthread_mutex_unlock(&s->lock);
        return p;
    }
    if (empty < 0) /* the cache is full of smaller idle buffers: drop one */
        for (int i = 0; i < P2P_CACHE && empty < 0; i++)
            if (!s->p2p[i].in_use) {
                plait_device_free(s->p2p[i].ptr);
                s->p2p[i].ptr = NULL;
                empty = i;
            }
    if (empty >= 0) s->p2p[empty].in_use = 1; /* reserve the entry */
    pthread_mutex_unlock(&s->lock);
    void *p = plait_device_alloc_pinned(bytes ? bytes : 1, STAGING_ALIGN, STAGING_TAG);
    pthread_mutex_lock(&s->lock);
    if (empty >= 0) {
        s->p2p[empty].ptr = p;
        s->p2p[empty].bytes = bytes;
        s->p2p[empty].in_use = p != NULL;
    }
    pthread_mutex_unlock(&s->lock);
    if (!p) plait_wrap_error(PLAIT_ERR_NO_MEMORY, "a staging buffer of %zu B", bytes);
    return p; /* with every entry busy: uncached, freed by give_back */
}

void plait_staging_give_back(plait_staging *s, void *buf) {
    if (!buf) return;
    pthread_mutex_lock(&s->lock);
    for (int i = 0; i < P2P_CACHE; i++)
        if (s->p2p[i].ptr == buf) {
            s->p2p[i].in_use = 0;
            pthread_mutex_unlock(&s->lock);
            return;
        }
    pthread_mutex_unlock(&s->lock);
    plait_device_free(buf);
}
