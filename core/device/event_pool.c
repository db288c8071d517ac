/* The device event pool of event_pool.h: a stack of idle events under a mutex. */
#include "device/event_pool.h"

#include <pthread.h>
#include <stddef.h>

static struct {
    pthread_mutex_t lock;
    const plait_device_ops *ops; /* whose events `idle` holds; NULL after a drain */
    plait_device_event *idle[PLAIT_EVENT_POOL_IDLE];
    int n;
} g_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

plait_device_event *plait_event_pool_get(const plait_device_ops *ops) {
    pthread_mutex_lock(&g_pool.lock);
    plait_device_event *ev = NULL;
    if (!g_pool.ops) g_pool.ops = ops;
    if (g_pool.ops == ops && g_pool.n > 0) ev = g_pool.idle[--g_pool.n];
    pthread_mutex_unlock(&g_pool.lock);
    /* created outside the lock: a driver call may take a while */
    return ev ? ev : ops->event_create();
}

void plait_event_pool_put(const plait_device_ops *ops, plait_device_event *ev) {
    if (!ev) return;
    pthread_mutex_lock(&g_pool.lock);
    int kept = g_pool.ops == ops && g_pool.n < PLAIT_EVENT_POOL_IDLE;
    if (kept) g_pool.idle[g_pool.n++] = ev;
    pthread_mutex_unlock(&g_pool.lock);
    if (!kept) ops->event_destroy(ev);
}

void plait_event_pool_drain(void) {
    pthread_mutex_lock(&g_pool.lock);
    for (int i = 0; i < g_pool.n; i++) g_pool.ops->event_destroy(g_pool.idle[i]);
    g_pool.n = 0;
    g_pool.ops = NULL;
    pthread_mutex_unlock(&g_pool.lock);
}
