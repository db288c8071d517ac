#include "kernels/kernels_pool.h"
#include "kernels/kernels_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>


#define POOL_MAX_THREADS 256

static struct {
    pthread_mutex_t lock; /* protects everything below except `next` */
    pthread_cond_t wake;  /* workers: a new job was posted (or quit) */
    pthread_cond_t idle;  /* caller: the last worker left the job */
    pthread_mutex_t busy; /* held by the one thread running a job or resizing */
    pthread_t workers[POOL_MAX_THREADS];
    int n_workers;
    int quit;
    /* generation and active are written under the lock, and read without
     * it by a thread that yields while it waits (pool_yield) */
    atomic_uint_fast64_t generation;
    /* the current job */
    int open; /* workers may still join */
    atomic_int active;
    plait_pool_fn fn;
    void *ctx;
    int64_t n_items;
    atomic_int_fast64_t next;
} g_pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
            PTHREAD_MUTEX_INITIALIZER};

static void run_items(plait_pool_fn fn, void *ctx, int64_t n) {
    for (;;) {
        int64_t i = atomic_fetch_add_explicit(&g_pool.next, 1, memory_order_relaxed);
        if (i >= n) return;
        fn(ctx, i);
    }
}

/* How long a thread that waits on the pool yields its core before it
 * sleeps: a step's jobs follow each other within microseconds, and waking
 * a sleeping thread takes longer (the kernel's wake-ups and sleeps were
 * 10-12% of a small bf16 step's samples). Each check gives the core to any
 * other thread that wants it (sched_yield), so that a rank sharing its
 * cores with others (oversubscribed ranks, tests side by side) costs them
 * a yield, not the core, and sleeps after this long anyway. */
#define POOL_YIELD_NS 50000

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Yields until done(arg) or POOL_YIELD_NS pass; the caller then takes the
 * lock and checks for itself. */
static void pool_yield(int (*done)(uint64_t), uint64_t arg) {
    int64_t end = now_ns() + POOL_YIELD_NS;
    for (int i = 1; !done(arg); i++) {
        sched_yield();
        if (i % 8 == 0 && now_ns() >= end) return;
    }
}

static int job_posted(uint64_t seen) { return atomic_load(&g_pool.generation) != seen; }
static int workers_done(uint64_t unused) {
    (void)unused;
    return atomic_load(&g_pool.active) == 0;
}

static void *worker_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_pool.lock);
    uint64_t seen = g_pool.generation;
    for (;;) {
        while (!g_pool.quit && g_pool.generation == seen) pthread_cond_wait(&g_pool.wake, &g_pool.lock);
        if (g_pool.quit) break;
        seen = g_pool.generation;
        if (!g_pool.open) continue;
        g_pool.active++;
        plait_pool_fn fn = g_pool.fn;
        void *ctx = g_pool.ctx;
        int64_t n = g_pool.n_items;
        pthread_mutex_unlock(&g_pool.lock);
        run_items(fn, ctx, n);
        pthread_mutex_lock(&g_pool.lock);
        if (--g_pool.active == 0) pthread_cond_signal(&g_pool.idle);
        if (g_pool.quit || g_pool.generation != seen) continue;
        pthread_mutex_unlock(&g_pool.lock);
        pool_yield(job_posted, seen);
        pthread_mutex_lock(&g_pool.lock);
    }
    pthread_mutex_unlock(&g_pool.lock);
    return NULL;
}

void plait_pool_run(int64_t n_items, plait_pool_fn fn, void *ctx) {
    if (n_items <= 0) return;
    if (n_items == 1 || pthread_mutex_trylock(&g_pool.busy) != 0) {
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i);
        return;
    }
    if (g_pool.n_workers == 0) {
        pthread_mutex_unlock(&g_pool.busy);
        for (int64_t i = 0; i < n_items; i++) fn(ctx, i);
        return;
    }
    pthread_mutex_lock(&g_pool.lock);
    g_pool.fn = fn;
    g_pool.ctx = ctx;
    g_pool.n_items = n_items;
    atomic_store_explicit(&g_pool.next, 0, memory_order_relaxed);
    g_pool.open = 1;
    g_pool.generation++;
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);

    run_items(fn, ctx, n_items);

    pthread_mutex_lock(&g_pool.lock);
    g_pool.open = 0;
    if (g_pool.active > 0) {
        pthread_mutex_unlock(&g_pool.lock);
        pool_yield(workers_done, 0);
        pthread_mutex_lock(&g_pool.lock);
    }
    /* Workers that joined finish the items they took; waiting is bounded by
     * their compute time (no communication happens inside a job). */
    while (g_pool.active > 0) pthread_cond_wait(&g_pool.idle, &g_pool.lock);
    pthread_mutex_unlock(&g_pool.lock);
    pthread_mutex_unlock(&g_pool.busy);
}

typedef struct range_job {
    plait_pool_range_fn fn;
    void *ctx;
    int64_t n, chunk;
} range_job;

static void range_item(void *vj, int64_t item) {
    const range_job *j = vj;
    int64_t lo = item * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    j->fn(j->ctx, lo, hi);
}

void plait_pool_for(int64_t n, int64_t chunk, plait_pool_range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (chunk < 1) chunk = 1;
    if (n <= chunk) {
        fn(ctx, 0, n);
        return;
    }
    range_job j = {fn, ctx, n, chunk};
    plait_pool_run((n + chunk - 1) / chunk, range_item, &j);
}

static void stop_workers(void) {
    pthread_mutex_lock(&g_pool.lock);
    g_pool.quit = 1;
    pthread_cond_broadcast(&g_pool.wake);
    pthread_mutex_unlock(&g_pool.lock);
    for (int i = 0; i < g_pool.n_workers; i++) pthread_join(g_pool.workers[i], NULL);
    pthread_mutex_lock(&g_pool.lock);
    g_pool.quit = 0;
    g_pool.n_workers = 0;
    pthread_mutex_unlock(&g_pool.lock);
}

void plait_pool_set_threads(int threads) {
    if (threads < 1) threads = 1;
    if (threads > POOL_MAX_THREADS) threads = POOL_MAX_THREADS;
    pthread_mutex_lock(&g_pool.busy);
    if (g_pool.n_workers != threads - 1) {
        stop_workers();
        for (int i = 0; i < threads - 1; i++) {
            int rc = pthread_create(&g_pool.workers[i], NULL, worker_main, NULL);
            if (rc != 0) {
                plait_kernels_warn("cannot start math thread %d of %d (%s); continuing with %d", i + 2,
                          threads, strerror(rc), i + 1);
                break;
            }
            pthread_mutex_lock(&g_pool.lock);
            g_pool.n_workers++;
            pthread_mutex_unlock(&g_pool.lock);
        }
    }
    pthread_mutex_unlock(&g_pool.busy);
}

int plait_pool_threads(void) {
    pthread_mutex_lock(&g_pool.lock);
    int n = g_pool.n_workers + 1;
    pthread_mutex_unlock(&g_pool.lock);
    return n;
}
