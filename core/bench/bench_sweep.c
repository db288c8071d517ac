/* `plait bench sweep`: every valid layout measured by `plait bench train`. */
#include "bench/bench_sweep.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/self_child.h"


#define CSV_HEADER                                                                                          \
    "layout,dp,tp,pp,schedule,chunks,optim,micro_batch,bucket_mb,comm,status,tokens_per_s,ms_per_step,mfu,"  \
    "compute_ms,comm_ms,idle_ms,dp_mb,tp_mb,pp_mb,peak_mib,pred_tokens_per_s,pred_step_ms,pred_compute_ms," \
    "pred_comm_ms,pred_idle_ms,pred_mem_mib\n"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Fill rows that the CSV already measured (matched by layout name). */
static plait_status load_csv(const char *path, plait_sweep_row *rows, size_t n) {
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? PLAIT_OK : plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot read: %s", path, strerror(errno));
    char line[2048];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        if (++lineno == 1) {
            if (strncmp(line, "layout,", 7) != 0) {
                fclose(f);
                return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                       "%s:1: not a sweep CSV (its header does not start with 'layout,'); "
                                       "give another --csv",
                                       path);
            }
            continue;
        }
        char *field[32];
        int k = 0;
        for (char *p = line; k < 32;) {
            field[k++] = p;
            char *c = strchr(p, ',');
            if (!c) break;
            *c = 0;
            p = c + 1;
        }
        if (k < 27 || strcmp(field[10], "ok") != 0) continue;
        for (size_t i = 0; i < n; i++) {
            char name[128];
            plait_cost_layout_name(&rows[i].predicted.layout, name, sizeof name);
            if (strcmp(name, field[0]) != 0) continue;
            plait_sweep_row *r = &rows[i];
            r->state = 1;
            double *dst[] = {&r->tokens_per_s, &r->ms_per_step, &r->mfu, &r->compute_ms, &r->comm_ms,
                             &r->idle_ms, &r->dp_mb, &r->tp_mb, &r->pp_mb, &r->peak_mib};
            for (int j = 0; j < 10; j++) *dst[j] = atof(field[11 + j]);
            snprintf(r->note, sizeof r->note, "from %s:%d", path, lineno);
        }
    }
    fclose(f);
    return PLAIT_OK;
}

static plait_status append_csv(const char *path, const plait_sweep_row *r) {
    FILE *f = fopen(path, "a");
    if (!f) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot append: %s", path, strerror(errno));
    if (ftell(f) == 0) fputs(CSV_HEADER, f);
    const plait_cost_layout *l = &r->predicted.layout;
    const plait_cost_time *t = &r->predicted.time;
    char name[128];
    plait_cost_layout_name(l, name, sizeof name);
    fprintf(f, "%s,%d,%d,%d,%s,%d,%s,%lld,%d,%s,%s,%.1f,%.3f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.3f,%.3f,"
               "%.3f,%.3f,%.1f\n",
            name, l->dp, l->tp, l->pp, l->schedule[0] ? l->schedule : "-", l->chunks, l->optim,
            (long long)l->micro_batch, l->bucket_mb, l->comm, r->state == 1 ? "ok" : "failed", r->tokens_per_s,
            r->ms_per_step, r->mfu, r->compute_ms, r->comm_ms, r->idle_ms, r->dp_mb, r->tp_mb, r->pp_mb, r->peak_mib,
            r->predicted.tokens_per_s, 1e3 * t->step, 1e3 * t->compute, 1e3 * t->comm, 1e3 * t->idle,
            r->predicted.mem.total / 1048576.0);
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot append: %s", path, strerror(errno));
    return PLAIT_OK;
}

/* The last line of a file (a failed layout's last words). */
/* One layout: `plait bench train CONFIG --csv TMP overrides...` as a child. */
static void run_layout(const plait_sweep_opts *o, plait_sweep_row *r, size_t index) {
    char logp[1024], csvp[1024], steps[16], warm[16];
    snprintf(logp, sizeof logp, "%s/%zu.log", o->log_dir, index + 1);
    snprintf(csvp, sizeof csvp, "%s/%zu.csv", o->log_dir, index + 1);
    snprintf(steps, sizeof steps, "%d", o->steps);
    snprintf(warm, sizeof warm, "%d", o->warmup);
    unlink(csvp);
    char ov[16][96];
    int nov = plait_cost_layout_overrides(&r->predicted.layout, o->global_batch, ov);
    const char **argv = calloc((size_t)(o->n_overrides + nov + 16), sizeof *argv);
    if (!argv) {
        r->state = 2;
        snprintf(r->note, sizeof r->note, "out of memory");
        return;
    }
    int a = 0;
    argv[a++] = "plait";
    argv[a++] = "bench";
    argv[a++] = "train";
    argv[a++] = o->config;
    argv[a++] = "--steps";
    argv[a++] = steps;
    argv[a++] = "--warmup";
    argv[a++] = warm;
    argv[a++] = "--csv";
    argv[a++] = csvp;
    for (int i = 0; i < o->n_overrides; i++) argv[a++] = o->overrides[i];
    for (int i = 0; i < nov; i++) argv[a++] = ov[i];
    argv[a++] = "run.progress=off";
    argv[a] = NULL;
    int rc = plait_self_child_run(argv, logp);
    free(argv);
    if (rc != 0) {
        r->state = 2;
        char last[200];
        plait_file_last_line(logp, last, sizeof last);
        snprintf(r->note, sizeof r->note, "%s (%s)", last[0] ? last : "bench train failed", logp);
        return;
    }
    FILE *f = fopen(csvp, "r");
    char line[2048] = "", row[2048] = "";
    while (f && fgets(line, sizeof line, f)) snprintf(row, sizeof row, "%s", line);
    if (f) fclose(f);
    /* bench train's row: config,dp,tp,pp,parallel,optim,ranks,threads, then
     * ms_per_step,tokens_per_s,mfu,compute_ms,comm_ms,idle_ms,dp_bytes,
     * tp_bytes,pp_bytes,optim_bytes,peak_rss_mb */
    double v[19] = {0};
    int k = 0;
    for (char *p = row; *p && k < 19; k++) {
        v[k] = atof(p);
        char *c = strchr(p, ',');
        if (!c) {
            k++;
            break;
        }
        p = c + 1;
    }
    if (k < 19) {
        r->state = 2;
        snprintf(r->note, sizeof r->note, "%s: no result row from bench train (%s)", csvp, logp);
        return;
    }
    r->state = 1;
    r->ms_per_step = v[8];
    r->tokens_per_s = v[9];
    r->mfu = v[10];
    r->compute_ms = v[11];
    r->comm_ms = v[12];
    r->idle_ms = v[13];
    r->dp_mb = v[14] / 1048576.0;
    r->tp_mb = v[15] / 1048576.0;
    r->pp_mb = v[16] / 1048576.0;
    r->peak_mib = v[18];
    r->note[0] = 0;
}

static void fmt_time(double s, char *buf, size_t len) {
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%dh%02dm", t / 3600, t / 60 % 60);
    else snprintf(buf, len, "%dm%02ds", t / 60, t % 60);
}

plait_status plait_sweep_run(const plait_sweep_opts *o, plait_sweep_row *rows, size_t n, FILE *progress) {
    plait_status st = load_csv(o->csv, rows, n);
    if (st != PLAIT_OK) return st;
    if (mkdir(o->log_dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot create: %s", o->log_dir, strerror(errno));
    size_t todo = 0, done = 0, failed = 0;
    for (size_t i = 0; i < n; i++) todo += rows[i].predicted.valid && rows[i].predicted.fits && rows[i].state == 0;
    double start = now_s();
    for (size_t i = 0; i < n; i++) {
        plait_sweep_row *r = &rows[i];
        if (!r->predicted.valid || !r->predicted.fits || r->state != 0) continue;
        double elapsed = now_s() - start;
        char name[128], el[32], eta[32];
        plait_cost_layout_name(&r->predicted.layout, name, sizeof name);
        if (o->max_minutes > 0 && elapsed > 60 * o->max_minutes) {
            snprintf(r->note, sizeof r->note, "not run: --max-minutes %.1f reached", o->max_minutes);
            continue;
        }
        fmt_time(elapsed, el, sizeof el);
        if (done) fmt_time(elapsed / (double)done * (double)(todo - done), eta, sizeof eta);
        else snprintf(eta, sizeof eta, "--");
        fprintf(progress, "sweep %zu/%zu | %-40s | elapsed %s | ETA %s\n", done + 1, todo, name, el, eta);
        fflush(progress);
        run_layout(o, r, i);
        done++;
        if (r->state == 2) {
            failed++;
            fprintf(progress, "sweep: %s failed: %s\n", name, r->note);
        }
        st = append_csv(o->csv, r);
        if (st != PLAIT_OK) return st;
    }
    char el[32];
    fmt_time(now_s() - start, el, sizeof el);
    fprintf(progress, "sweep: %zu layout%s measured, %zu failed, in %s; results %s%s\n", done - failed,
            done - failed == 1 ? "" : "s", failed, el, o->csv_is_scratch ? "below" : "in ",
            o->csv_is_scratch ? "" : o->csv);
    return PLAIT_OK;
}

int plait_sweep_row_view(const plait_sweep_row *r, plait_sweep_view *v) {
    if (r->state != 1) return 0;
    plait_cost_layout_name(&r->predicted.layout, v->name, sizeof v->name);
    v->pred_ms = 1e3 * r->predicted.time.step;
    v->pred_mib = r->predicted.mem.total / 1048576.0;
    v->step_err = r->ms_per_step > 0 ? (v->pred_ms - r->ms_per_step) / r->ms_per_step : 0;
    v->mem_err = r->peak_mib > 0 ? (v->pred_mib - r->peak_mib) / r->peak_mib : 0;
    return 1;
}

/* measured first, fastest first; ties by name, so the order is the same
 * on every run */
static int by_measured(const void *a, const void *b) {
    const plait_sweep_row *x = a, *y = b;
    int kx = x->state == 1, ky = y->state == 1;
    if (kx != ky) return ky - kx;
    if (kx && x->tokens_per_s != y->tokens_per_s) return x->tokens_per_s < y->tokens_per_s ? 1 : -1;
    char nx[128], ny[128];
    plait_cost_layout_name(&x->predicted.layout, nx, sizeof nx);
    plait_cost_layout_name(&y->predicted.layout, ny, sizeof ny);
    return strcmp(nx, ny);
}

void plait_sweep_rank(plait_sweep_row *rows, size_t n) { qsort(rows, n, sizeof *rows, by_measured); }

static void ranks_of(const double *x, size_t n, double *rank) {
    for (size_t i = 0; i < n; i++) {
        double below = 0, equal = 0;
        for (size_t j = 0; j < n; j++) {
            below += x[j] < x[i];
            equal += x[j] == x[i];
        }
        rank[i] = below + (equal + 1) / 2.0; /* average rank of a tie */
    }
}

double plait_spearman(const double *x, const double *y, size_t n) {
    if (n < 2) return NAN;
    double *rx = malloc(n * sizeof *rx), *ry = malloc(n * sizeof *ry);
    if (!rx || !ry) {
        free(rx);
        free(ry);
        return NAN;
    }
    ranks_of(x, n, rx);
    ranks_of(y, n, ry);
    double mx = 0, my = 0, sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        mx += rx[i] / (double)n;
        my += ry[i] / (double)n;
    }
    for (size_t i = 0; i < n; i++) {
        sxy += (rx[i] - mx) * (ry[i] - my);
        sxx += (rx[i] - mx) * (rx[i] - mx);
        syy += (ry[i] - my) * (ry[i] - my);
    }
    free(rx);
    free(ry);
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

void plait_sweep_print(FILE *out, const plait_sweep_row *rows, size_t n) {
    fprintf(out, "# %-4s %-36s %9s %6s %8s %8s %7s %7s %7s %7s %7s %8s | %9s %8s %7s %8s %7s\n", "rank", "layout",
            "tokens/s", "MFU", "step_ms", "compute", "comm", "idle", "dp_MB", "tp_MB", "pp_MB", "peak_MiB",
            "pred_tok/s", "pred_ms", "err", "pred_MiB", "err");
    size_t k = 0;
    double *pt = malloc((n + 1) * sizeof *pt), *mt = malloc((n + 1) * sizeof *mt);
    double worst_t = 0, worst_m = 0;
    for (size_t i = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        plait_sweep_view v;
        if (!plait_sweep_row_view(r, &v)) continue;
        if (fabs(v.step_err) > fabs(worst_t)) worst_t = v.step_err;
        if (fabs(v.mem_err) > fabs(worst_m)) worst_m = v.mem_err;
        fprintf(out,
                "  %-4zu %-36s %9.0f %5.1f%% %8.1f %8.1f %7.1f %7.1f %7.2f %7.2f %7.2f %8.1f | %9.0f %8.1f %+6.1f%% "
                "%8.1f %+6.1f%%\n",
                k + 1, v.name, r->tokens_per_s, 100 * r->mfu, r->ms_per_step, r->compute_ms, r->comm_ms, r->idle_ms,
                r->dp_mb, r->tp_mb, r->pp_mb, r->peak_mib, r->predicted.tokens_per_s, v.pred_ms, 100 * v.step_err,
                v.pred_mib, 100 * v.mem_err);
        if (pt && mt) {
            pt[k] = r->predicted.tokens_per_s;
            mt[k] = r->tokens_per_s;
        }
        k++;
    }
    for (size_t i = 0; i < n; i++) {
        char name[128];
        plait_cost_layout_name(&rows[i].predicted.layout, name, sizeof name);
        if (!rows[i].predicted.valid) fprintf(out, "# skipped: %s: %s\n", name, rows[i].predicted.why);
        else if (!rows[i].predicted.fits) fprintf(out, "# skipped: %s: %s\n", name, rows[i].predicted.why);
        else if (rows[i].state != 1) fprintf(out, "# not measured: %s: %s\n", name, rows[i].note);
    }
    if (k >= 2 && pt && mt)
        fprintf(out, "# plan vs measurement over %zu layouts: Spearman rho of tokens/s %.3f; largest step-time error "
                     "%+.1f%%; largest peak-memory error %+.1f%%\n",
                k, plait_spearman(pt, mt, k), 100 * worst_t, 100 * worst_m);
    free(pt);
    free(mt);
}
