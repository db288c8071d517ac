/*
 * The rank's trace recorder (trace.h): one array of spans claimed by an
 * atomic counter, so threads record at once without a lock and a full
 * buffer costs one add per span, never an allocation.
 */
#include "runtime/trace.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/out_file.h"

#define NAME_CHARS 48
#define TEXT_CHARS 24
/* threads named in the file; a later one is recorded under the last id */
#define MAX_THREADS 64

/* plait_trace_args' integers, in its order */
typedef struct span_ints {
    int64_t bytes, peer, tag, group, members, posted_ns, layer, mb;
} span_ints;

typedef struct span {
    atomic_int done; /* the writer finished it */
    uint8_t cat;
    int32_t tid;
    uint64_t t0, t1;
    span_ints v;
    char name[NAME_CHARS], comm[TEXT_CHARS], detail[TEXT_CHARS];
} span;

atomic_int plait_trace_recording_flag;

static struct {
    span *spans;
    size_t capacity;
    atomic_size_t next;
    atomic_uint_fast64_t dropped;
    int rank;
    char path[4200];
    int64_t offset_ns, uncertainty_ns;
    int rounds;
    atomic_int n_threads;
    char thread_names[MAX_THREADS][TEXT_CHARS];
} tr;

static _Thread_local int my_tid; /* 0: not yet numbered */

static const char *const cat_names[PLAIT_TRACE_CATS] = {"step",  "compute", "instr", "coll",   "p2p",
                                                        "optim", "ckpt",    "wait",  "kernel", "copy"};

const char *plait_trace_cat_name(plait_trace_cat cat) {
    return (unsigned)cat < PLAIT_TRACE_CATS ? cat_names[cat] : "?";
}

/* Names travel in a tab-separated line and a JSON string: tabs, newlines,
 * quotes and backslashes become '_'. */
static void copy_text(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; src && src[i] && i + 1 < cap; i++) {
        char c = src[i];
        dst[i] = (c == '\t' || c == '\n' || c == '\r' || c == '"' || c == '\\' || (unsigned char)c < 0x20) ? '_' : c;
    }
    dst[i] = '\0';
}

/* Named tracks that are no thread (a device's streams): their ids, as
 * threads' are given. Touched by the main thread only. */
#define MAX_TRACKS 4
static struct {
    int id;
    char name[TEXT_CHARS];
} tracks[MAX_TRACKS];
static int n_tracks;

static int new_id(const char *name) {
    int id = atomic_fetch_add(&tr.n_threads, 1) + 1;
    if (id > MAX_THREADS) return MAX_THREADS;
    copy_text(tr.thread_names[id - 1], TEXT_CHARS, name);
    return id;
}

static int track_id(const char *track) {
    for (int i = 0; i < n_tracks; i++)
        if (strcmp(tracks[i].name, track) == 0) return tracks[i].id;
    int id = new_id(track);
    if (n_tracks < MAX_TRACKS) {
        tracks[n_tracks].id = id;
        copy_text(tracks[n_tracks].name, TEXT_CHARS, track);
        n_tracks++;
    }
    return id;
}

static int thread_id(void) {
    if (my_tid) return my_tid;
    char name[16] = "";
    /* the main thread bears the program's name: "main" says more */
    if (syscall(SYS_gettid) == getpid()) snprintf(name, sizeof name, "main");
    else if (pthread_getname_np(pthread_self(), name, sizeof name) != 0 || !*name)
        snprintf(name, sizeof name, "thread");
    my_tid = new_id(name);
    return my_tid;
}

static void put_span(int tid, plait_trace_cat cat, const char *name, uint64_t t0, uint64_t t1,
                     const plait_trace_args *a) {
    size_t i = atomic_fetch_add_explicit(&tr.next, 1, memory_order_relaxed);
    if (i >= tr.capacity) {
        atomic_fetch_add_explicit(&tr.dropped, 1, memory_order_relaxed);
        return;
    }
    span *s = &tr.spans[i];
    static const plait_trace_args none = PLAIT_TRACE_ARGS;
    if (!a) a = &none;
    s->cat = (uint8_t)cat;
    s->tid = tid;
    s->t0 = t0;
    s->t1 = t1 < t0 ? t0 : t1;
    s->v = (span_ints){a->bytes, a->peer, a->tag, a->group, a->members, a->posted_ns, a->layer, a->mb};
    copy_text(s->name, NAME_CHARS, name);
    copy_text(s->comm, TEXT_CHARS, a->comm);
    copy_text(s->detail, TEXT_CHARS, a->detail);
    atomic_store_explicit(&s->done, 1, memory_order_release);
}

void plait_trace_span(plait_trace_cat cat, const char *name, uint64_t t0, uint64_t t1, const plait_trace_args *a) {
    if (tr.spans) put_span(thread_id(), cat, name, t0, t1, a);
}

void plait_trace_span_on(const char *track, plait_trace_cat cat, const char *name, uint64_t t0, uint64_t t1,
                         const plait_trace_args *a) {
    if (tr.spans) put_span(track_id(track), cat, name, t0, t1, a);
}

void plait_trace_add_dropped(uint64_t n) { atomic_fetch_add_explicit(&tr.dropped, n, memory_order_relaxed); }

plait_status plait_trace_open(size_t capacity, int rank, const char *path) {
    plait_trace_close();
    tr.spans = calloc(capacity ? capacity : 1, sizeof(span));
    if (!tr.spans)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the trace buffer (%zu spans of %zu bytes)",
                               capacity, sizeof(span));
    tr.capacity = capacity;
    atomic_store(&tr.next, 0);
    atomic_store(&tr.dropped, 0);
    tr.rank = rank;
    tr.offset_ns = tr.uncertainty_ns = 0;
    tr.rounds = 0;
    snprintf(tr.path, sizeof tr.path, "%s", path ? path : "");
    return PLAIT_OK;
}

void plait_trace_set_recording(int on) {
    atomic_store_explicit(&plait_trace_recording_flag, on && tr.spans, memory_order_relaxed);
}

void plait_trace_set_clock(int64_t offset_ns, int64_t uncertainty_ns, int rounds) {
    tr.offset_ns = offset_ns;
    tr.uncertainty_ns = uncertainty_ns;
    tr.rounds = rounds;
}

size_t plait_trace_count(void) {
    size_t n = atomic_load(&tr.next);
    return n < tr.capacity ? n : tr.capacity;
}

uint64_t plait_trace_dropped(void) { return atomic_load(&tr.dropped); }

int plait_trace_is_open(void) { return tr.spans != NULL; }

void plait_trace_close(void) {
    atomic_store(&plait_trace_recording_flag, 0);
    free(tr.spans);
    tr.spans = NULL;
    tr.capacity = 0;
}

plait_status plait_trace_write(void) {
    if (!tr.spans) return PLAIT_OK;
    char tmp[4400];
    FILE *f;
    plait_status st = plait_out_fopen_temp(tr.path, tmp, sizeof tmp, &f);
    if (st != PLAIT_OK) return plait_wrap_error(st, "cannot write the rank's trace");
    size_t n = plait_trace_count();
    int threads = atomic_load(&tr.n_threads);
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    fprintf(f, "plait-trace 1\nrank %d\nclock_offset_ns %lld\nclock_uncertainty_ns %lld\nclock_rounds %d\n"
               "spans %zu\ndropped %llu\ncapacity %zu\n",
            tr.rank, (long long)tr.offset_ns, (long long)tr.uncertainty_ns, tr.rounds, n,
            (unsigned long long)plait_trace_dropped(), tr.capacity);
    for (int t = 0; t < threads; t++) fprintf(f, "thread %d %s\n", t + 1, tr.thread_names[t]);
    for (size_t i = 0; i < n; i++) {
        const span *s = &tr.spans[i];
        if (!atomic_load_explicit(&s->done, memory_order_acquire)) continue;
        fprintf(f, "span\t%d\t%s\t%llu\t%llu\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%s\t%s\t%s\n", s->tid,
                cat_names[s->cat], (unsigned long long)s->t0, (unsigned long long)s->t1, (long long)s->v.bytes,
                (long long)s->v.peer, (long long)s->v.tag, (long long)s->v.group, (long long)s->v.members,
                (long long)s->v.posted_ns, (long long)s->v.layer, (long long)s->v.mb, s->name, s->comm, s->detail);
    }
    int bad = ferror(f);
    bad |= fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, tr.path) != 0) {
        if (!bad) err = errno;
        unlink(tmp);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write the rank's trace %s: %s", tr.path, strerror(err));
    }
    return PLAIT_OK;
}
