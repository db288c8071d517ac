/* The watchdog over comm plugin calls: see comm_watchdog.h. */
#include "commstate/comm_watchdog.h"
#include "commstate/comm_state.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "launch/rank_report.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/log.h"

#define SLOTS 128
#define TICK_NS 200000000L /* how often the watchdog looks */

/* One thread's call in flight. The owning thread writes `call` and then
 * makes `seq` odd (enter), and makes it even again (leave); the watchdog
 * copies `call` between two reads of the same odd `seq`, so a copy torn by
 * a new call is thrown away. */
typedef struct slot {
    _Atomic int owned;
    _Atomic uint64_t seq;
    plait_watched_call call; /* call.comm_name points at comm_name[] */
    char comm_name[48];
} slot;

static slot g_slots[SLOTS];
static _Thread_local slot *t_slot;
static _Thread_local int t_unwatched; /* every slot was taken when this thread asked */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int g_started; /* the watchdog thread was made in this process */
static _Atomic int g_running; /* ... and has reached its loop */
static pthread_key_t g_key;
static int g_key_made;

double plait_watchdog_limit(double timeout_s) {
    if (!(timeout_s > 0) || !isfinite(timeout_s)) return 0;
    return timeout_s + 5.0 + timeout_s / 10;
}

static void release_slot(void *p) {
    slot *s = p;
    atomic_store(&s->seq, (atomic_load(&s->seq) + 1) & ~(uint64_t)1);
    atomic_store(&s->owned, 0);
    /* a later destructor of this thread making a call: unwatched, never
     * in a slot another thread may have taken */
    t_slot = NULL;
    t_unwatched = 1;
}

/* Around fork(): the lock is held across it, so the child's copy is in a
 * known state (unlocked by the child handler below). */
static void before_fork(void) { pthread_mutex_lock(&g_lock); }
static void after_fork_parent(void) { pthread_mutex_unlock(&g_lock); }

/* fork(): the child has only the forking thread. The others' slots are
 * free in it, and it starts its own watchdog thread on its next call. */
static void after_fork_child(void) {
    for (int i = 0; i < SLOTS; i++) {
        if (&g_slots[i] == t_slot) continue;
        atomic_store(&g_slots[i].seq, 0);
        atomic_store(&g_slots[i].owned, 0);
    }
    atomic_store(&g_started, 0);
    atomic_store(&g_running, 0);
    t_unwatched = 0;
    pthread_mutex_unlock(&g_lock);
}

/* What the rule `rule` of plait/comm.h asks, in short. */
static const char *rule_text(const char *rule) {
    if (strcmp(rule, "timeout") == 0) return "wait() whose timeout expires returns PLAIT_ERR_TIMEOUT";
    if (strcmp(rule, "setup") == 0)
        return "init() and derive() return within the bootstrap's timeout (PLAIT_ERR_TIMEOUT for a member that "
               "never comes), destroy() within the communicator's";
    if (strcmp(rule, "loss") == 0) return "abort() fails the communicator's requests at once";
    return "isend, irecv and test return without waiting";
}

/* The message, on stderr and to the launcher, then the end of the process.
 * stderr is written with write(2), not stdio, whose lock the stuck thread
 * may hold; the log file last, under an alarm, for the same reason. */
static void report_and_exit(const plait_watched_call *c, double inside_s) {
    const char *name = plait_plugin_name_of_ops(PLAIT_KIND_COMM, c->ops);
    char plugin[96], given[96] = "", peer[64] = "", msg[1024];
    if (name) snprintf(plugin, sizeof plugin, "the comm plugin '%s'", name);
    else snprintf(plugin, sizeof plugin, "the transport");
    if (strcmp(c->rule, "setup") == 0) snprintf(given, sizeof given, ", past its timeout of %g s", c->timeout_s);
    else if (c->timeout_s > 0) snprintf(given, sizeof given, ", though it was given %g s", c->timeout_s);
    else snprintf(given, sizeof given, ", though it must return at once");
    if (c->peer >= 0) snprintf(peer, sizeof peer, ", waiting on world rank %d", c->peer);
    snprintf(msg, sizeof msg, "%s has been inside %s() for %.1f s%s (communicator '%s'%s); plait/comm.h [%s]: %s. "
             "Its thread cannot be taken back: this rank ends here rather than hang the job",
             plugin, c->fn, inside_s, given, c->comm_name, peer, c->rule, rule_text(c->rule));
    char line[1100];
    int n = snprintf(line, sizeof line, "plait: error: %s\n", msg);
    if (n > 0 && write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {}
    plait_launch_report_error(msg);
    alarm(5); /* a log lock held by the stuck thread ends the process by SIGALRM */
    plait_log_file_only(PLAIT_LOG_ERROR, "watchdog", "%s", msg);
    _exit(1);
}

static void *watch(void *arg) {
    (void)arg;
    uint64_t seen[SLOTS] = {0};
    double inside[SLOTS] = {0};
    struct timespec prev;
    clock_gettime(CLOCK_MONOTONIC, &prev);
    atomic_store(&g_running, 1);
    for (;;) {
        struct timespec tick = {0, TICK_NS}, now;
        nanosleep(&tick, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double dt = (double)(now.tv_sec - prev.tv_sec) + (double)(now.tv_nsec - prev.tv_nsec) * 1e-9;
        prev = now;
        /* a gap far longer than a tick: the process was stopped (SIGSTOP,
         * a suspended job, a debugger), and a call is not stuck for it */
        if (dt > 1.0) dt = TICK_NS * 1e-9;
        for (int i = 0; i < SLOTS; i++) {
            slot *s = &g_slots[i];
            if (!atomic_load_explicit(&s->owned, memory_order_relaxed)) continue;
            uint64_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
            if (!(q & 1) || q != seen[i]) { /* idle, or a new call since the last look */
                seen[i] = q;
                inside[i] = 0;
                continue;
            }
            inside[i] += dt;
            plait_watched_call c = s->call;
            char name[sizeof s->comm_name];
            memcpy(name, s->comm_name, sizeof name);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->seq, memory_order_acquire) != q) continue;
            name[sizeof name - 1] = '\0';
            c.comm_name = name;
            if (c.limit_s > 0 && inside[i] > c.limit_s) report_and_exit(&c, inside[i]);
        }
    }
    return NULL;
}

static void nap_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

/* Make the watchdog's thread, retrying a while where the process is out
 * of threads for now (EAGAIN); 0 when none could be made. */
static int make_thread(void) {
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&at, 256 << 10);
    int rc = 0;
    for (int i = 0; i < 50; i++) {
        pthread_t th;
        if ((rc = pthread_create(&th, &at, watch, NULL)) != EAGAIN) break;
        nap_ms(20);
    }
    pthread_attr_destroy(&at);
    if (rc != 0) {
        PLAIT_WARN("comm",
                   "the watchdog over comm plugin calls could not start its thread (%s): calls are unwatched "
                   "until a later call starts it, and a stuck plugin would hang this rank",
                   strerror(rc));
        return 0;
    }
    return 1;
}

void plait_watchdog_start(void) {
    pthread_mutex_lock(&g_lock);
    if (!g_key_made) {
        g_key_made = pthread_key_create(&g_key, release_slot) == 0 ? 1 : -1;
        if (g_key_made == 1) pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    }
    if (!atomic_load(&g_started) && make_thread()) {
        atomic_store(&g_started, 1);
        /* return once the thread runs its loop: a fork() or a call right
         * after this finds a watchdog that looks, not one still starting
         * (a thread forked away mid-start, in a runtime that takes locks
         * there, would never start in the child) */
        for (int i = 0; i < 2000 && !atomic_load(&g_running); i++) nap_ms(1);
        if (!atomic_load(&g_running))
            PLAIT_WARN("comm", "the watchdog over comm plugin calls has not started running after 2 s; calls are "
                               "watched once it does");
    }
    pthread_mutex_unlock(&g_lock);
}

static slot *my_slot(void) {
    if (t_slot) { /* a child forked by this thread: its own watchdog */
        if (!atomic_load_explicit(&g_started, memory_order_relaxed)) plait_watchdog_start();
        return t_slot;
    }
    if (t_unwatched) return NULL;
    plait_watchdog_start();
    for (int i = 0; i < SLOTS && !t_slot && g_key_made == 1; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&g_slots[i].owned, &free_slot, 1)) t_slot = &g_slots[i];
    }
    if (t_slot && pthread_setspecific(g_key, t_slot) != 0) { /* it could not be given back at exit */
        release_slot(t_slot);
        t_slot = NULL;
    }
    if (!t_slot) t_unwatched = 1;
    return t_slot;
}

void plait_watchdog_enter(const plait_watched_call *call) {
    if (!(call->limit_s > 0)) return;
    slot *s = my_slot();
    if (!s) return;
    /* the seqlock's writer: the even sequence number of the last leave is
     * visible before any field of this call (the watchdog's acquire fence
     * pairs with this), so a copy mixing two calls is never accepted */
    atomic_thread_fence(memory_order_release);
    s->call = *call;
    size_t n = 0;
    for (const char *p = call->comm_name ? call->comm_name : "?"; *p && n + 1 < sizeof s->comm_name; p++)
        s->comm_name[n++] = *p;
    s->comm_name[n] = '\0';
    s->call.comm_name = s->comm_name;
    atomic_store_explicit(&s->seq, atomic_load_explicit(&s->seq, memory_order_relaxed) | 1, memory_order_release);
}

void plait_watchdog_leave(void) {
    slot *s = t_slot;
    if (!s) return;
    uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    if (q & 1) atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

void plait_watchdog_enter_comm(const plait_comm *comm, const char *fn, int peer, double timeout_s) {
    plait_watched_call c = {.ops = comm->ops, .fn = fn, .rule = timeout_s > 0 ? "timeout" : "progress",
                            .comm_name = comm->name, .timeout_s = timeout_s,
                            .peer = peer >= 0 && peer < comm->size && comm->world_ranks ? comm->world_ranks[peer] : -1,
                            .limit_s = plait_watchdog_limit(timeout_s > 0 ? timeout_s : comm->settings.timeout_s)};
    plait_watchdog_enter(&c);
}

void plait_watchdog_enter_setup(plait_plugin_call *call, const plait_comm_ops *ops, const char *fn,
                                const char *comm_name, double timeout_s) {
    plait_plugin_call_enter(call, PLAIT_KIND_COMM, ops, fn);
    plait_watched_call c = {.ops = ops, .fn = fn, .rule = "setup", .comm_name = comm_name, .peer = -1,
                            .timeout_s = timeout_s, .limit_s = plait_watchdog_limit(timeout_s)};
    plait_watchdog_enter(&c);
}

plait_status plait_watchdog_leave_setup(plait_plugin_call *call, plait_status st) {
    plait_watchdog_leave();
    return plait_plugin_call_leave(call, st);
}

void plait_watchdog_destroy(const plait_comm_ops *ops, void *plugin_comm, const char *comm_name, double timeout_s) {
    plait_plugin_call call;
    plait_watchdog_enter_setup(&call, ops, "destroy", comm_name, timeout_s);
    ops->destroy(plugin_comm);
    if (plait_watchdog_leave_setup(&call, PLAIT_OK) != PLAIT_OK) PLAIT_WARN("comm", "%s", plait_last_error());
}
