/* Calling code that may never return, for a bounded time: see bounded_call.h. */
#include "runtime/bounded_call.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/error.h"

typedef struct bounded {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done, abandoned;
    plait_status (*fn)(void *);
    plait_status st;
    char msg[4096];
    size_t arg_size;
    unsigned char arg[]; /* the caller's argument, copied */
} bounded;

static void release(bounded *b) {
    pthread_cond_destroy(&b->cond);
    pthread_mutex_destroy(&b->lock);
    free(b);
}

static void *worker(void *p) {
    bounded *b = p;
    plait_clear_error();
    plait_status st = b->fn(b->arg);
    pthread_mutex_lock(&b->lock);
    b->st = st;
    snprintf(b->msg, sizeof b->msg, "%s", plait_last_error());
    b->done = 1;
    int abandoned = b->abandoned;
    pthread_cond_signal(&b->cond);
    pthread_mutex_unlock(&b->lock);
    if (abandoned) release(b); /* the caller gave up on it: the copy is this thread's */
    return NULL;
}

int plait_bounded_call(plait_status (*fn)(void *arg), void *arg, size_t arg_size, double limit_s, plait_status *st) {
    bounded *b = calloc(1, sizeof *b + arg_size);
    pthread_condattr_t ca;
    if (!b || pthread_condattr_init(&ca) != 0) {
        free(b);
        *st = plait_set_error(PLAIT_ERR_SYSTEM, "out of memory");
        return 0;
    }
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    b->fn = fn;
    b->arg_size = arg_size;
    memcpy(b->arg, arg, arg_size);
    /* joinable: a call that returned leaves no thread behind (the caller
     * joins it); one given up on is detached to end on its own */
    pthread_t t;
    int rc = pthread_create(&t, NULL, worker, b);
    if (rc != 0) {
        release(b);
        *st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot start a thread: %s", strerror(rc));
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    if (limit_s > 0) {
        double whole = (double)(time_t)limit_s;
        until.tv_sec += (time_t)limit_s;
        until.tv_nsec += (long)((limit_s - whole) * 1e9);
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->lock);
    while (!b->done) {
        if (limit_s <= 0) pthread_cond_wait(&b->cond, &b->lock);
        else if (pthread_cond_timedwait(&b->cond, &b->lock, &until) == ETIMEDOUT && !b->done) break;
    }
    if (!b->done) {
        b->abandoned = 1;
        pthread_mutex_unlock(&b->lock);
        pthread_detach(t);
        *st = PLAIT_ERR_TIMEOUT;
        return 0;
    }
    pthread_mutex_unlock(&b->lock);
    pthread_join(t, NULL);
    *st = b->st;
    memcpy(arg, b->arg, arg_size);
    if (b->msg[0]) plait_set_error(b->st, "%s", b->msg);
    else plait_clear_error();
    release(b);
    return 1;
}
