/*
 * The CUDA emulator's streams (emu_queue.h): singly linked queues of work
 * items, all queues on one list so a device synchronisation can run them
 * all, under one recursive lock that is held while an item runs.
 */
#include "emu_queue.h"

#include <pthread.h>
#include <stdlib.h>

typedef struct item {
    struct item *next;
    uint64_t pos;
    void (*run)(void *);
    void (*drop)(void *);
    void *ctx;
} item;

struct emu_queue {
    emu_queue *next_queue, *prev_queue; /* every live queue */
    item *head, *tail;
    uint64_t queued, ran; /* positions: the last queued, the last run */
    int refs;
};

static pthread_mutex_t g_lock;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static emu_queue *g_queues;

static void init_lock(void) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&g_lock, &a);
    pthread_mutexattr_destroy(&a);
}

/* PLAIT_CUDA_EMU_EAGER=1: every item runs as soon as it is queued (after
 * what its queue holds), as a GPU that is never behind would: work that
 * reads memory another thread has not written yet, because nothing made
 * it wait, then reads it at once instead of whenever a later
 * synchronisation happens to run it. */
static int g_eager;
static pthread_once_t g_eager_once = PTHREAD_ONCE_INIT;

static void read_eager(void) {
    const char *e = getenv("PLAIT_CUDA_EMU_EAGER");
    g_eager = e && e[0] == '1';
}

static void lock(void) {
    pthread_once(&g_once, init_lock);
    pthread_mutex_lock(&g_lock);
}

emu_queue *pc_emu_queue_new(void) {
    emu_queue *q = calloc(1, sizeof *q);
    if (!q) return NULL;
    q->refs = 1;
    lock();
    q->next_queue = g_queues;
    if (g_queues) g_queues->prev_queue = q;
    g_queues = q;
    pthread_mutex_unlock(&g_lock);
    return q;
}

void pc_emu_queue_ref(emu_queue *q) {
    lock();
    q->refs++;
    pthread_mutex_unlock(&g_lock);
}

void pc_emu_queue_unref(emu_queue *q) {
    lock();
    if (--q->refs > 0) {
        pthread_mutex_unlock(&g_lock);
        return;
    }
    /* CUDA lets a stream be destroyed with work queued: the work still runs */
    pc_emu_queue_run(q, UINT64_MAX);
    if (q->prev_queue) q->prev_queue->next_queue = q->next_queue;
    else g_queues = q->next_queue;
    if (q->next_queue) q->next_queue->prev_queue = q->prev_queue;
    pthread_mutex_unlock(&g_lock);
    free(q);
}

uint64_t pc_emu_queue_push(emu_queue *q, void (*run)(void *), void (*drop)(void *), void *ctx) {
    item *it = malloc(sizeof *it);
    if (!it) {
        if (drop) drop(ctx);
        return 0;
    }
    *it = (item){NULL, 0, run, drop, ctx};
    lock();
    it->pos = ++q->queued;
    if (q->tail) q->tail->next = it;
    else q->head = it;
    q->tail = it;
    uint64_t pos = it->pos;
    pthread_once(&g_eager_once, read_eager);
    if (g_eager) pc_emu_queue_run(q, pos);
    pthread_mutex_unlock(&g_lock);
    return pos;
}

uint64_t pc_emu_queue_last(emu_queue *q) {
    lock();
    uint64_t p = q->queued;
    pthread_mutex_unlock(&g_lock);
    return p;
}

int pc_emu_queue_done(emu_queue *q, uint64_t pos) {
    lock();
    int done = q->ran >= pos;
    pthread_mutex_unlock(&g_lock);
    return done;
}

void pc_emu_queue_run(emu_queue *q, uint64_t pos) {
    lock();
    /* an item may itself run other queues (a wait) or queue more work */
    while (q->head && q->head->pos <= pos) {
        item *it = q->head;
        q->head = it->next;
        if (!q->head) q->tail = NULL;
        if (it->run) it->run(it->ctx);
        q->ran = it->pos;
        if (it->drop) it->drop(it->ctx);
        free(it);
    }
    pthread_mutex_unlock(&g_lock);
}

void pc_emu_queue_run_all(void) {
    lock();
    for (int again = 1; again;) {
        again = 0;
        for (emu_queue *q = g_queues; q; q = q->next_queue)
            if (q->head) {
                pc_emu_queue_run(q, UINT64_MAX);
                again = 1;
            }
    }
    pthread_mutex_unlock(&g_lock);
}
