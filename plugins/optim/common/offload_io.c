/*
 * offload_io.h: the ring where it was made, else the thread pool. Each of
 * the pool's requests is one pread or pwrite loop (a transfer may come back
 * short: it continues until every byte is moved, a write that moves nothing
 * is a full disk).
 */
#include "offload_io.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "offload_uring.h"

struct offload_io {
    offload_uring *ring; /* NULL: the threads */
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    offload_req *head, *tail;
    int stop;
    int n_threads;
    pthread_t threads[8];
};

static int transfer(offload_req *r) {
    char *p = r->buf;
    size_t left = r->bytes;
    off_t off = r->off;
    while (left > 0) {
        ssize_t got = r->write ? pwrite(r->fd, p, left, off) : pread(r->fd, p, left, off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return errno;
        if (got == 0) return r->write ? ENOSPC : EIO; /* a read past the end: the file was cut short */
        p += got;
        left -= (size_t)got;
        off += got;
    }
    return 0;
}

static void *worker(void *arg) {
    offload_io *io = arg;
    pthread_mutex_lock(&io->mu);
    for (;;) {
        while (!io->head && !io->stop) pthread_cond_wait(&io->work, &io->mu);
        if (!io->head) break;
        offload_req *r = io->head;
        io->head = r->next;
        if (!io->head) io->tail = NULL;
        pthread_mutex_unlock(&io->mu);
        int err = transfer(r);
        pthread_mutex_lock(&io->mu);
        r->err = err;
        r->done = 1;
        pthread_cond_broadcast(&io->done);
    }
    pthread_mutex_unlock(&io->mu);
    return NULL;
}

offload_io *offload_io_create(int threads, unsigned ring_depth, int *ring_err) {
    offload_io *io = calloc(1, sizeof *io);
    if (!io) return NULL;
    *ring_err = ring_depth > 0 ? offload_uring_create(ring_depth, &io->ring) : 0;
    if (io->ring) return io;
    if (threads < 1) threads = 1;
    if (threads > (int)(sizeof io->threads / sizeof io->threads[0]))
        threads = (int)(sizeof io->threads / sizeof io->threads[0]);
    pthread_mutex_init(&io->mu, NULL);
    pthread_cond_init(&io->work, NULL);
    pthread_cond_init(&io->done, NULL);
    for (int i = 0; i < threads; i++) {
        int e = pthread_create(&io->threads[i], NULL, worker, io);
        if (e != 0) {
            offload_io_destroy(io);
            errno = e;
            return NULL;
        }
        io->n_threads++;
    }
    return io;
}

int offload_io_uses_ring(const offload_io *io) { return io->ring != NULL; }

void offload_io_destroy(offload_io *io) {
    if (!io) return;
    if (io->ring) {
        offload_uring_destroy(io->ring);
        free(io);
        return;
    }
    pthread_mutex_lock(&io->mu);
    io->stop = 1;
    pthread_cond_broadcast(&io->work);
    pthread_mutex_unlock(&io->mu);
    for (int i = 0; i < io->n_threads; i++) pthread_join(io->threads[i], NULL);
    pthread_cond_destroy(&io->work);
    pthread_cond_destroy(&io->done);
    pthread_mutex_destroy(&io->mu);
    free(io);
}

void offload_io_submit(offload_io *io, offload_req *r) {
    if (io->ring) {
        offload_uring_submit(io->ring, r);
        return;
    }
    r->done = r->bytes == 0;
    r->err = 0;
    r->next = NULL;
    if (r->done) return;
    pthread_mutex_lock(&io->mu);
    if (io->tail) io->tail->next = r;
    else io->head = r;
    io->tail = r;
    pthread_cond_signal(&io->work);
    pthread_mutex_unlock(&io->mu);
}

int offload_io_wait(offload_io *io, offload_req *r) {
    if (io->ring) return offload_uring_wait(io->ring, r);
    pthread_mutex_lock(&io->mu);
    while (!r->done) pthread_cond_wait(&io->done, &io->mu);
    int err = r->err;
    pthread_mutex_unlock(&io->mu);
    return err;
}
