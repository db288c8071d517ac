/*
 * Merging the ranks' trace files into one Chrome trace-event JSON file
 * (trace_merge.h). One event a line, keys in a fixed order, so that
 * `plait trace summary` and a line-oriented tool read it back simply.
 */
#include "runtime/trace_merge.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

#define FIELDS 16 /* "span" and 15 values (trace.c's line) */
/* the largest clock reading or offset a rank file may give (ns, 73 years) */
#define TIME_MAX ((int64_t)1 << 61)
/* the first transfers track's tid (assign_lanes); a rank's own threads are below it */
#define LANE_TID 1000

typedef struct mspan {
    int rank, tid;
    char cat[12];
    int64_t t0, t1; /* rank 0's clock (ns) */
    int64_t bytes, peer, tag, group, members, posted, layer, mb;
    char name[48], comm[24], detail[24];
    int64_t flow; /* p2p: the flow id, or -1 */
    int thread;   /* p2p: the thread that finished it (tid is its lane's track) */
} mspan;

typedef struct rank_file {
    int rank;
    int64_t offset, uncertainty, dropped;
    int rounds;
    int n_threads;
    int lanes; /* p2p tracks used (assign_lanes) */
    int thread_id[64];
    char thread_name[64][24];
} rank_file;

typedef struct merge {
    mspan *s;
    size_t n, cap;
    rank_file *files;
    int n_files;
} merge;

static int split_tabs(char *line, char **field, int max) {
    int n = 0;
    char *p = line;
    while (n < max) {
        field[n++] = p;
        char *tab = strchr(p, '\t');
        if (!tab) break;
        *tab = '\0';
        p = tab + 1;
    }
    return n;
}

static plait_status bad_line(const char *path, int line, const char *what) {
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s:%d: not a plait rank trace line (%s)", path, line, what);
}

static plait_status add_span(merge *m, const mspan *s) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        mspan *grown = realloc(m->s, cap * sizeof *grown);
        if (!grown) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory merging the trace");
        m->s = grown;
        m->cap = cap;
    }
    m->s[m->n++] = *s;
    return PLAIT_OK;
}

static plait_status read_rank_file(merge *m, const char *path, rank_file *rf) {
    FILE *f;
    plait_status st = plait_fopen_regular(path, "rank trace", PLAIT_ERR_INVALID_ARG, &f);
    if (st != PLAIT_OK) return st;
    char line[1024];
    int ln = 0, have_rank = 0;
    memset(rf, 0, sizeof *rf);
    while (st == PLAIT_OK && fgets(line, sizeof line, f)) {
        ln++;
        line[strcspn(line, "\n")] = '\0';
        long long v;
        char text[32];
        if (ln == 1) {
            if (strcmp(line, "plait-trace 1") != 0) st = bad_line(path, ln, "the first line is not 'plait-trace 1'");
        } else if (sscanf(line, "rank %lld", &v) == 1) {
            if (v < 0 || v >= INT_MAX) st = bad_line(path, ln, "a rank from 0 below INT_MAX");
            rf->rank = (int)v;
            have_rank = 1;
        } else if (sscanf(line, "clock_offset_ns %lld", &v) == 1) {
            if (v < -TIME_MAX || v > TIME_MAX) st = bad_line(path, ln, "a clock offset within 2^61 ns");
            rf->offset = v;
        } else if (sscanf(line, "clock_uncertainty_ns %lld", &v) == 1) {
            rf->uncertainty = v;
        } else if (sscanf(line, "clock_rounds %lld", &v) == 1) {
            rf->rounds = (int)v;
        } else if (sscanf(line, "dropped %lld", &v) == 1) {
            rf->dropped = v;
        } else if (sscanf(line, "thread %lld %23[^\n]", &v, text) == 2) {
            if (rf->n_threads < 64) {
                rf->thread_id[rf->n_threads] = (int)v;
                snprintf(rf->thread_name[rf->n_threads], sizeof rf->thread_name[0], "%s", text);
                rf->n_threads++;
            }
        } else if (strncmp(line, "span\t", 5) == 0) {
            char *fl[FIELDS];
            if (split_tabs(line, fl, FIELDS) != FIELDS) {
                st = bad_line(path, ln, "a span has 16 tab-separated fields");
                break;
            }
            long long tid = strtoll(fl[1], NULL, 10);
            mspan s = {.rank = rf->rank, .tid = tid >= 0 && tid < LANE_TID ? (int)tid : -1, .flow = -1};
            snprintf(s.cat, sizeof s.cat, "%s", fl[2]);
            s.t0 = strtoll(fl[3], NULL, 10);
            s.t1 = strtoll(fl[4], NULL, 10);
            int64_t *nums[] = {&s.bytes, &s.peer, &s.tag, &s.group, &s.members, &s.posted, &s.layer, &s.mb};
            for (int k = 0; k < 8; k++) *nums[k] = strtoll(fl[5 + k], NULL, 10);
            /* the clock's nanoseconds: within 2^61 with the offset added,
             * so that every difference the merge takes fits */
            if (s.tid < 0 || s.t0 < 0 || s.t0 > TIME_MAX || s.t1 < s.t0 || s.t1 > TIME_MAX || s.posted > TIME_MAX) {
                st = bad_line(path, ln,
                              "a span's thread from 0 below 1000, its start and end times from 0 to 2^61 "
                              "ns, the end not before the start");
                break;
            }
            s.t0 += rf->offset;
            s.t1 += rf->offset;
            if (s.posted >= 0) s.posted += rf->offset;
            snprintf(s.name, sizeof s.name, "%s", fl[13]);
            snprintf(s.comm, sizeof s.comm, "%s", fl[14]);
            snprintf(s.detail, sizeof s.detail, "%s", fl[15]);
            st = add_span(m, &s);
        } else if (strncmp(line, "spans ", 6) != 0 && strncmp(line, "capacity ", 9) != 0) {
            st = bad_line(path, ln, "unknown line");
        }
    }
    fclose(f);
    if (st == PLAIT_OK && !have_rank) st = bad_line(path, ln, "no 'rank' line");
    return st;
}

/* ---- flows: each send to the receive that took it ------------------------ */

typedef struct p2p_key {
    int64_t src, dst, tag, posted;
    size_t idx;
} p2p_key;

static int cmp_key(const void *a, const void *b) {
    const p2p_key *x = a, *y = b;
    if (x->src != y->src) return x->src < y->src ? -1 : 1;
    if (x->dst != y->dst) return x->dst < y->dst ? -1 : 1;
    if (x->tag != y->tag) return x->tag < y->tag ? -1 : 1;
    if (x->posted != y->posted) return x->posted < y->posted ? -1 : 1;
    return 0;
}

static plait_status link_flows(merge *m) {
    p2p_key *sends = malloc((m->n + 1) * sizeof *sends), *recvs = malloc((m->n + 1) * sizeof *recvs);
    if (!sends || !recvs) {
        free(sends);
        free(recvs);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory merging the trace");
    }
    size_t ns = 0, nr = 0;
    for (size_t i = 0; i < m->n; i++) {
        const mspan *s = &m->s[i];
        if (strcmp(s->cat, "p2p") != 0) continue;
        int64_t posted = s->posted >= 0 ? s->posted : s->t0;
        if (strcmp(s->name, "send") == 0) sends[ns++] = (p2p_key){s->rank, s->peer, s->tag, posted, i};
        else if (strcmp(s->name, "recv") == 0) recvs[nr++] = (p2p_key){s->peer, s->rank, s->tag, posted, i};
    }
    qsort(sends, ns, sizeof *sends, cmp_key);
    qsort(recvs, nr, sizeof *recvs, cmp_key);
    int64_t id = 1;
    for (size_t a = 0, b = 0; a < ns && b < nr;) {
        const p2p_key *x = &sends[a], *y = &recvs[b];
        int c = x->src != y->src ? (x->src < y->src ? -1 : 1)
              : x->dst != y->dst ? (x->dst < y->dst ? -1 : 1)
              : x->tag != y->tag ? (x->tag < y->tag ? -1 : 1)
                                 : 0;
        if (c < 0) a++;
        else if (c > 0) b++;
        else {
            m->s[x->idx].flow = m->s[y->idx].flow = id++;
            a++;
            b++;
        }
    }
    free(sends);
    free(recvs);
    return PLAIT_OK;
}

/* ---- transfers' tracks ---------------------------------------------------- */

/* A transfer spans its post to its completion, across the other work of
 * its thread, and several are in flight at once: on the thread's own track
 * their spans would overlap others without nesting, which a trace viewer
 * cuts. Each rank's transfers go to tracks of their own ("transfers N",
 * tid LANE_TID + N), the first free one at each start; the finishing
 * thread stays in args.thread. */
#define MAX_LANES 64

static int cmp_start(const void *a, const void *b) {
    const mspan *x = *(const mspan *const *)a, *y = *(const mspan *const *)b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

static plait_status assign_lanes(merge *m) {
    mspan **p2p = malloc((m->n + 1) * sizeof *p2p);
    if (!p2p) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory merging the trace");
    size_t n = 0;
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->s[i].cat, "p2p") == 0) p2p[n++] = &m->s[i];
    qsort(p2p, n, sizeof *p2p, cmp_start);
    int64_t lane_end[MAX_LANES];
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || p2p[i]->rank != p2p[i - 1]->rank)
            for (int l = 0; l < MAX_LANES; l++) lane_end[l] = INT64_MIN;
        int l = 0;
        while (l < MAX_LANES - 1 && lane_end[l] > p2p[i]->t0) l++;
        lane_end[l] = p2p[i]->t1;
        p2p[i]->thread = p2p[i]->tid;
        p2p[i]->tid = LANE_TID + l;
        for (int f = 0; f < m->n_files; f++)
            if (m->files[f].rank == p2p[i]->rank && m->files[f].lanes < l + 1) m->files[f].lanes = l + 1;
    }
    free(p2p);
    return PLAIT_OK;
}

/* ---- the JSON file ------------------------------------------------------- */

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void put_num(FILE *f, const char *key, int64_t v, int *first) {
    if (v < 0) return;
    fprintf(f, "%s\"%s\":%lld", *first ? "" : ",", key, (long long)v);
    *first = 0;
}

/* Text from a rank file as a JSON string's characters: quotes, backslashes
 * and control characters escaped, so that a line holds one event whatever
 * a name holds (the summary reads the file line by line). */
static void put_text(FILE *f, const char *v) {
    for (const unsigned char *c = (const unsigned char *)v; *c; c++) {
        if (*c == '"' || *c == '\\') fprintf(f, "\\%c", *c);
        else if (*c < 0x20) fprintf(f, "\\u%04x", *c);
        else fputc(*c, f);
    }
}

static void put_str(FILE *f, const char *key, const char *v, int *first) {
    if (!*v) return;
    fprintf(f, "%s\"%s\":\"", *first ? "" : ",", key);
    put_text(f, v);
    fputc('"', f);
    *first = 0;
}

/* Rank r is process r + 1: Perfetto takes pid 0 for the kernel's idle
 * task and shows it apart. Threads are numbered from 1 likewise. */
#define PID(rank) ((rank) + 1)

static void write_events(FILE *f, const merge *m, int64_t base) {
    fputs(PLAIT_TRACE_JSON_FIRST_LINE "\n", f);
    int first_event = 1;
#define SEP (first_event ? (first_event = 0, "") : ",\n")
    for (int r = 0; r < m->n_files; r++) {
        const rank_file *rf = &m->files[r];
        fprintf(f, "%s{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"process_name\",\"args\":{\"name\":\"rank %d\"}}", SEP,
                PID(rf->rank), rf->rank);
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}}",
                PID(rf->rank), rf->rank);
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":1,\"name\":\"plait_rank\",\"args\":{\"rank\":%d,"
                   "\"clock_offset_ns\":%lld,\"clock_uncertainty_ns\":%lld,\"clock_rounds\":%d,\"dropped\":%lld}}",
                PID(rf->rank), rf->rank, (long long)rf->offset, (long long)rf->uncertainty, rf->rounds,
                (long long)rf->dropped);
        for (int t = 0; t < rf->n_threads; t++) {
            fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"",
                    PID(rf->rank), rf->thread_id[t]);
            put_text(f, rf->thread_name[t]);
            fputs("\"}}", f);
        }
        for (int l = 0; l < rf->lanes; l++)
            fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":\"transfers "
                       "%d\"}}",
                    PID(rf->rank), LANE_TID + l, l + 1);
    }
    for (size_t i = 0; i < m->n; i++) {
        const mspan *s = &m->s[i];
        double ts = (double)(s->t0 - base) / 1e3, dur = (double)(s->t1 - s->t0) / 1e3;
        fprintf(f, "%s{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"cat\":\"", SEP, PID(s->rank),
                s->tid, ts, dur);
        put_text(f, s->cat);
        fputs("\",\"name\":\"", f);
        put_text(f, s->name);
        fputs("\",\"args\":{", f);
        int first = 1;
        put_num(f, "bytes", s->bytes, &first);
        put_num(f, "peer", s->peer, &first);
        put_num(f, strcmp(s->cat, "p2p") == 0 ? "tag" : strcmp(s->cat, "step") == 0 ? "step" : "seq", s->tag, &first);
        put_num(f, "group", s->group, &first);
        put_num(f, "members", s->members, &first);
        if (s->posted >= 0) {
            fprintf(f, "%s\"posted_us\":%.3f", first ? "" : ",", (double)(s->posted - base) / 1e3);
            first = 0;
        }
        put_num(f, strcmp(s->cat, "instr") == 0 ? "chunk" : "layer", s->layer, &first);
        put_num(f, "mb", s->mb, &first);
        put_str(f, "comm", s->comm, &first);
        put_str(f, "detail", s->detail, &first);
        put_num(f, "flow", s->flow, &first);
        if (strcmp(s->cat, "p2p") == 0) put_num(f, "thread", s->thread, &first);
        fputs("}}", f);
        if (s->flow < 0) continue;
        /* the flow leaves the send's span and arrives in the receive's
         * (each at its start, inside the span it binds to) */
        int is_send = strcmp(s->name, "send") == 0;
        fprintf(f, ",\n{\"ph\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"cat\":\"p2p\",\"name\":\"p2p\",\"id\":%lld%s}",
                is_send ? "s" : "f", PID(s->rank), s->tid, ts, (long long)s->flow, is_send ? "" : ",\"bp\":\"e\"");
    }
#undef SEP
    fputs("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"plait\"}}\n", f);
}

plait_status plait_trace_json_write(const char *path, const char *what, void (*write)(FILE *f, void *ctx), void *ctx) {
    plait_status st = plait_out_check_own(path, PLAIT_TRACE_JSON_FIRST_LINE, what);
    if (st != PLAIT_OK) return st;
    char tmp[4400];
    FILE *f;
    st = plait_out_fopen_temp(path, tmp, sizeof tmp, &f);
    if (st != PLAIT_OK) return st;
    write(f, ctx);
    int bad = ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0;
    int err = errno;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        if (!bad) err = errno;
        unlink(tmp);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s %s: %s", what, path, strerror(err));
    }
    return PLAIT_OK;
}

typedef struct merged_out {
    const merge *m;
    int64_t base;
} merged_out;

static void write_merged(FILE *f, void *ctx) {
    const merged_out *o = ctx;
    write_events(f, o->m, o->base);
}

static plait_status write_json(const char *path, const merge *m) {
    int64_t base = INT64_MAX;
    for (size_t i = 0; i < m->n; i++) {
        if (m->s[i].t0 < base) base = m->s[i].t0;
        if (m->s[i].posted >= 0 && m->s[i].posted < base) base = m->s[i].posted;
    }
    if (base == INT64_MAX) base = 0;
    merged_out o = {m, base};
    return plait_trace_json_write(path, "the merged trace", write_merged, &o);
}

static int is_rank_file(const char *name, int *rank) {
    char tail[16];
    return sscanf(name, "rank-%d.%15s", rank, tail) == 2 && strcmp(tail, "trace") == 0;
}

plait_status plait_trace_merge(const char *out_dir, int *ranks) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/trace", out_dir);
    DIR *d = opendir(dir);
    if (!d)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "cannot read the ranks' traces in %s: %s (was the run traced, "
                                                      "[run] trace?)", dir, strerror(errno));
    int *found = NULL, n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int r;
        if (!is_rank_file(e->d_name, &r) || r < 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            int *grown = realloc(found, sizeof(int) * (size_t)cap);
            if (!grown) {
                free(found);
                closedir(d);
                return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory merging the trace");
            }
            found = grown;
        }
        found[n++] = r;
    }
    closedir(d);
    if (n == 0) {
        free(found);
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s holds no rank trace (rank-NNNNN.trace): nothing to merge",
                               dir);
    }
    qsort(found, (size_t)n, sizeof(int), cmp_int);
    if (found[n - 1] + 1 != n)
        PLAIT_WARN("trace", "%s holds %d rank traces of ranks 0..%d: the missing ranks wrote none (they stopped "
                   "before the traced steps' end)", dir, n, found[n - 1]);
    merge m = {.files = calloc((size_t)n, sizeof(rank_file)), .n_files = n};
    plait_status st = m.files ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory merging the trace");
    for (int i = 0; st == PLAIT_OK && i < n; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/rank-%05d.trace", dir, found[i]);
        st = read_rank_file(&m, path, &m.files[i]);
    }
    if (st == PLAIT_OK) st = link_flows(&m);
    if (st == PLAIT_OK) st = assign_lanes(&m);
    char out[4200];
    snprintf(out, sizeof out, "%s/trace.json", out_dir);
    if (st == PLAIT_OK) st = write_json(out, &m);
    free(found);
    free(m.s);
    free(m.files);
    if (st == PLAIT_OK && ranks) *ranks = n;
    return st;
}
