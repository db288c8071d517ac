/* `plait bench sweep`: every valid layout measured by `plait bench train`. */
#include "bench/bench_sweep.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"
#include "runtime/self_child.h"

/* cp comes last so that the columns before it keep their numbers for the
 * scripts that read them; a continued sweep matches rows by the layout
 * column, whose name carries cp too ("cp2"). */
#define CSV_HEADER                                                                                                     \
    "layout,dp,tp,pp,schedule,chunks,optim,micro_batch,bucket_mb,comm,status,tokens_per_s,ms_per_step,mfu,"            \
    "compute_ms,comm_ms,idle_ms,dp_mb,tp_mb,pp_mb,peak_mib,pred_tokens_per_s,pred_step_ms,pred_compute_ms,"            \
    "pred_comm_ms,pred_idle_ms,pred_mem_mib,run,cp\n"

plait_status plait_sweep_load_csv(const char *path, plait_sweep_row *rows, size_t n) {
    struct stat sb;
    if (lstat(path, &sb) != 0 && errno == ENOENT) return PLAIT_OK;
    /* appended to later: never through a link, into a FIFO or a file
     * another tool wrote (runtime/out_file.h) */
    plait_status st = plait_out_check_own(path, "layout,", "--csv");
    FILE *f = NULL;
    if (st == PLAIT_OK) st = plait_fopen_regular(path, "--csv file", PLAIT_ERR_INVALID_ARG, &f);
    if (st != PLAIT_OK) return st;
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
            plait_sweep_row *r = &rows[i];
            if (strcmp(name, field[0]) != 0 || r->n_runs == PLAIT_SWEEP_MAX_RUNS) continue;
            plait_sweep_sample *u = &r->runs[r->n_runs++];
            double *dst[] = {&u->tokens_per_s, &u->ms_per_step, &u->mfu, &u->compute_ms, &u->comm_ms,
                             &u->idle_ms, &u->dp_mb, &u->tp_mb, &u->pp_mb, &u->peak_mib};
            for (int j = 0; j < 10; j++) *dst[j] = atof(field[11 + j]);
            r->state = 1;
            snprintf(r->note, sizeof r->note, "from %s:%d", path, lineno);
        }
    }
    fclose(f);
    return PLAIT_OK;
}

/* One run of a layout as a CSV row (its prediction repeated on each). */
static plait_status append_csv(const char *path, const plait_sweep_row *r, const plait_sweep_sample *u, int run) {
    FILE *f = NULL;
    plait_status opened = plait_out_fopen(path, "a", &f); /* never through a link */
    if (opened != PLAIT_OK) return opened;
    if (ftell(f) == 0) fputs(CSV_HEADER, f);
    const plait_cost_layout *l = &r->predicted.layout;
    const plait_cost_time *t = &r->predicted.time;
    char name[128];
    plait_cost_layout_name(l, name, sizeof name);
    fprintf(f,
            "%s,%d,%d,%d,%s,%d,%s,%lld,%d,%s,%s,%.1f,%.3f,%.4f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%.1f,%.3f,%.3f,"
            "%.3f,%.3f,%.1f,%d,%d\n",
            name, l->dp, l->tp, l->pp, l->schedule[0] ? l->schedule : "-", l->chunks, l->optim,
            (long long)l->micro_batch, l->bucket_mb, l->comm, u ? "ok" : "failed", u ? u->tokens_per_s : 0,
            u ? u->ms_per_step : 0, u ? u->mfu : 0, u ? u->compute_ms : 0, u ? u->comm_ms : 0, u ? u->idle_ms : 0,
            u ? u->dp_mb : 0, u ? u->tp_mb : 0, u ? u->pp_mb : 0, u ? u->peak_mib : 0, r->predicted.tokens_per_s,
            1e3 * t->step, 1e3 * t->compute, 1e3 * t->comm, 1e3 * t->idle, r->predicted.mem.total / 1048576.0, run,
            plait_cost_layout_cp(l));
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot append: %s", path, strerror(errno));
    return PLAIT_OK;
}

/* One run of a layout: `plait bench train CONFIG --csv TMP overrides...` as
 * a child. Returns 1 with *u filled, or 0 with r->note saying why not. */
static int run_layout(const plait_sweep_opts *o, plait_sweep_row *r, size_t index, int run, plait_sweep_sample *u) {
    char logp[1024], csvp[1024], steps[16], warm[16];
    if (run == 1) snprintf(logp, sizeof logp, "%s/%zu.log", o->log_dir, index + 1);
    else snprintf(logp, sizeof logp, "%s/%zu.%d.log", o->log_dir, index + 1, run);
    snprintf(csvp, sizeof csvp, "%s/%zu.csv", o->log_dir, index + 1);
    snprintf(steps, sizeof steps, "%d", o->steps);
    snprintf(warm, sizeof warm, "%d", o->warmup);
    unlink(csvp);
    char ov[16][96];
    int nov = plait_cost_layout_overrides(&r->predicted.layout, o->global_batch, ov);
    /* each layout's trace in a run directory of its own */
    char out_dir[1040] = "", out_over[1100] = "";
    if (o->trace) {
        snprintf(out_dir, sizeof out_dir, "%s/%zu", o->log_dir, index + 1);
        snprintf(out_over, sizeof out_over, "run.out_dir=%s", out_dir);
    }
    const char **argv = calloc((size_t)(o->n_overrides + nov + 16), sizeof *argv);
    if (!argv) {
        snprintf(r->note, sizeof r->note, "out of memory");
        return 0;
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
    if (out_over[0]) argv[a++] = out_over;
    argv[a] = NULL;
    int rc = plait_self_child_run(argv, logp);
    free(argv);
    if (rc < 0) { /* not started: its log refused, or no process */
        snprintf(r->note, sizeof r->note, "%s", plait_last_error());
        return 0;
    }
    if (rc != 0) {
        char last[200];
        plait_file_last_line(logp, last, sizeof last);
        snprintf(r->note, sizeof r->note, "%s (%s)", last[0] ? last : "bench train failed", logp);
        return 0;
    }
    FILE *f = NULL;
    if (plait_fopen_regular(csvp, "bench train's --csv", PLAIT_ERR_INVALID_ARG, &f) != PLAIT_OK) f = NULL;
    char line[2048] = "", row[2048] = "";
    while (f && fgets(line, sizeof line, f)) snprintf(row, sizeof row, "%s", line);
    if (f) fclose(f);
    unlink(csvp);
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
        snprintf(r->note, sizeof r->note, "%s: no result row from bench train (%s)", csvp, logp);
        return 0;
    }
    *u = (plait_sweep_sample){.ms_per_step = v[8], .tokens_per_s = v[9], .mfu = v[10], .compute_ms = v[11],
                           .comm_ms = v[12], .idle_ms = v[13], .dp_mb = v[14] / 1048576.0,
                           .tp_mb = v[15] / 1048576.0, .pp_mb = v[16] / 1048576.0, .peak_mib = v[18]};
    r->note[0] = 0;
    struct stat sb;
    if (o->trace && snprintf(r->trace, sizeof r->trace, "%s/trace.json", out_dir) < (int)sizeof r->trace &&
        stat(r->trace, &sb) != 0)
        r->trace[0] = 0;
    return 1;
}

static void fmt_time(double s, char *buf, size_t len) {
    int t = (int)(s + 0.5);
    if (t >= 3600) snprintf(buf, len, "%dh%02dm", t / 3600, t / 60 % 60);
    else snprintf(buf, len, "%dm%02ds", t / 60, t % 60);
}

static int by_tokens(const void *a, const void *b) {
    const plait_sweep_sample *x = a, *y = b;
    return (x->tokens_per_s > y->tokens_per_s) - (x->tokens_per_s < y->tokens_per_s);
}

/* The row's figures: its median run (the lower middle one of an even
 * number) and the spread of its runs. */
static void summarize(plait_sweep_row *r) {
    if (r->n_runs < 1) return;
    plait_sweep_sample sorted[PLAIT_SWEEP_MAX_RUNS];
    memcpy(sorted, r->runs, (size_t)r->n_runs * sizeof *sorted);
    qsort(sorted, (size_t)r->n_runs, sizeof *sorted, by_tokens);
    const plait_sweep_sample *m = &sorted[(r->n_runs - 1) / 2];
    r->ms_per_step = m->ms_per_step;
    r->tokens_per_s = m->tokens_per_s;
    r->mfu = m->mfu;
    r->compute_ms = m->compute_ms;
    r->comm_ms = m->comm_ms;
    r->idle_ms = m->idle_ms;
    r->dp_mb = m->dp_mb;
    r->tp_mb = m->tp_mb;
    r->pp_mb = m->pp_mb;
    r->peak_mib = m->peak_mib;
    r->tokens_min = sorted[0].tokens_per_s;
    r->tokens_max = sorted[r->n_runs - 1].tokens_per_s;
    r->state = 1;
}

static int wanted(const plait_sweep_row *r) { return r->predicted.valid && r->predicted.fits && r->state != 2; }

plait_status plait_sweep_run(const plait_sweep_opts *o, plait_sweep_row *rows, size_t n, FILE *progress) {
    plait_status st = plait_sweep_load_csv(o->csv, rows, n);
    if (st != PLAIT_OK) return st;
    if (mkdir(o->log_dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot create: %s", o->log_dir, strerror(errno));
    /* the layouts' logs and CSVs are written and removed in it: a link
     * there (to a directory elsewhere) is not followed */
    struct stat sb;
    if (lstat(o->log_dir, &sb) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot read: %s", o->log_dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s is %s, not the directory of the sweep's logs plait makes: "
                               "remove it or give another --csv", o->log_dir,
                               S_ISLNK(sb.st_mode) ? "a symbolic link" : plait_file_kind(sb.st_mode));
    int repeat = o->repeat < 1 ? 1 : o->repeat > PLAIT_SWEEP_MAX_RUNS ? PLAIT_SWEEP_MAX_RUNS : o->repeat;
    size_t todo = 0, done = 0, failed = 0, layouts = 0;
    for (size_t i = 0; i < n; i++)
        if (wanted(&rows[i]) && rows[i].n_runs < repeat) todo += (size_t)(repeat - rows[i].n_runs), layouts++;
    double start = plait_clock_now();
    int stopped = 0;
    for (int round = 1; round <= repeat && !stopped; round++) {
        for (size_t i = 0; i < n; i++) {
            plait_sweep_row *r = &rows[i];
            if (!wanted(r) || r->n_runs >= round) continue;
            double elapsed = plait_clock_now() - start;
            char name[128], el[32], eta[32];
            plait_cost_layout_name(&r->predicted.layout, name, sizeof name);
            if (o->max_minutes > 0 && elapsed > 60 * o->max_minutes) {
                stopped = 1;
                break;
            }
            fmt_time(elapsed, el, sizeof el);
            if (done) fmt_time(elapsed / (double)done * (double)(todo - done), eta, sizeof eta);
            else snprintf(eta, sizeof eta, "--");
            if (repeat > 1)
                fprintf(progress, "sweep %zu/%zu | %-40s | run %d of %d | elapsed %s | ETA %s\n", done + 1, todo, name,
                        round, repeat, el, eta);
            else
                fprintf(progress, "sweep %zu/%zu | %-40s | elapsed %s | ETA %s\n", done + 1, todo, name, el, eta);
            fflush(progress);
            plait_sweep_sample u;
            int ok = run_layout(o, r, i, round, &u);
            done++;
            if (ok) {
                r->runs[r->n_runs++] = u;
                r->state = 1;
            } else {
                r->state = 2;
                failed++;
                fprintf(progress, "sweep: %s failed: %s\n", name, r->note);
            }
            st = append_csv(o->csv, r, ok ? &u : NULL, round);
            if (st != PLAIT_OK) return st;
        }
    }
    for (size_t i = 0; i < n; i++) {
        plait_sweep_row *r = &rows[i];
        if (r->state != 2) summarize(r);
        if (stopped && r->predicted.valid && r->predicted.fits && r->state == 0)
            snprintf(r->note, sizeof r->note, "not run: --max-minutes %.1f reached", o->max_minutes);
        else if (stopped && r->state == 1 && r->n_runs < repeat)
            snprintf(r->note, sizeof r->note, "%d of %d runs: --max-minutes %.1f reached", r->n_runs, repeat,
                     o->max_minutes);
    }
    char el[32];
    fmt_time(plait_clock_now() - start, el, sizeof el);
    fprintf(progress, "sweep: %zu run%s of %zu layout%s measured, %zu failed, in %s; results %s%s\n", done - failed,
            done - failed == 1 ? "" : "s", layouts, layouts == 1 ? "" : "s", failed, el,
            o->csv_is_scratch ? "below" : "in ", o->csv_is_scratch ? "" : o->csv);
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

size_t plait_sweep_groups(const plait_sweep_row *rows, size_t n, int *group) {
    size_t groups = 0, k = 0;
    const plait_sweep_row *above = NULL;
    for (size_t i = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        if (r->state != 1 || r->n_runs < 1) {
            group[i] = 0;
            continue;
        }
        k++;
        /* ranked best first: the row above reaches down to its lowest run */
        int overlap = above && r->n_runs > 1 && above->n_runs > 1 && r->tokens_max >= above->tokens_min;
        if (overlap) {
            group[i] = group[above - rows];
        } else {
            group[i] = (int)k;
            groups++;
        }
        above = r;
    }
    return groups;
}

void plait_sweep_print(FILE *out, const plait_sweep_row *rows, size_t n) {
    fprintf(out, "# %-4s %-36s %9s %13s %4s %6s %8s %8s %7s %7s %7s %7s %7s %8s | %9s %8s %7s %8s %7s\n", "rank",
            "layout", "tokens/s", "spread", "grp", "MFU", "step_ms", "compute", "comm", "idle", "dp_MB", "tp_MB",
            "pp_MB", "peak_MiB", "pred_tok/s", "pred_ms", "err", "pred_MiB", "err");
    size_t k = 0;
    double *pt = malloc((n + 1) * sizeof *pt), *mt = malloc((n + 1) * sizeof *mt);
    int *group = calloc(n + 1, sizeof *group);
    if (group) plait_sweep_groups(rows, n, group);
    double worst_t = 0, worst_m = 0, best = 0, worst = 0, best_pred = -1;
    int runs = 0;
    size_t first_choice = n;
    for (size_t i = 0; i < n; i++) {
        const plait_sweep_row *r = &rows[i];
        plait_sweep_view v;
        if (!plait_sweep_row_view(r, &v)) continue;
        if (fabs(v.step_err) > fabs(worst_t)) worst_t = v.step_err;
        if (fabs(v.mem_err) > fabs(worst_m)) worst_m = v.mem_err;
        char spread[32] = "1 run";
        if (r->n_runs > 1 && r->tokens_per_s > 0)
            snprintf(spread, sizeof spread, "%+.1f/%+.1f%%", 100 * (r->tokens_min / r->tokens_per_s - 1),
                     100 * (r->tokens_max / r->tokens_per_s - 1));
        fprintf(out,
                "  %-4zu %-36s %9.0f %13s %4d %5.1f%% %8.1f %8.1f %7.1f %7.1f %7.2f %7.2f %7.2f %8.1f | %9.0f %8.1f "
                "%+6.1f%% %8.1f %+6.1f%%\n",
                k + 1, v.name, r->tokens_per_s, spread, group ? group[i] : 0, 100 * r->mfu, r->ms_per_step,
                r->compute_ms, r->comm_ms, r->idle_ms, r->dp_mb, r->tp_mb, r->pp_mb, r->peak_mib,
                r->predicted.tokens_per_s, v.pred_ms, 100 * v.step_err, v.pred_mib, 100 * v.mem_err);
        if (pt && mt) {
            pt[k] = r->predicted.tokens_per_s;
            mt[k] = r->tokens_per_s;
        }
        if (k == 0) best = r->tokens_per_s;
        worst = r->tokens_per_s;
        if (r->predicted.tokens_per_s > best_pred) {
            best_pred = r->predicted.tokens_per_s;
            first_choice = i;
        }
        if (r->n_runs > runs) runs = r->n_runs;
        k++;
    }
    for (size_t i = 0; i < n; i++) {
        char name[128];
        plait_cost_layout_name(&rows[i].predicted.layout, name, sizeof name);
        if (!rows[i].predicted.valid) fprintf(out, "# skipped: %s: %s\n", name, rows[i].predicted.why);
        else if (!rows[i].predicted.fits) fprintf(out, "# skipped: %s: %s\n", name, rows[i].predicted.why);
        else if (rows[i].state != 1) fprintf(out, "# not measured: %s: %s\n", name, rows[i].note);
        else if (rows[i].note[0] && strncmp(rows[i].note, "from ", 5) != 0) fprintf(out, "# %s: %s\n", name, rows[i].note);
    }
    if (k >= 1 && runs > 1 && group) {
        fprintf(out, "# %d runs per layout, the median shown; spread = its lowest and highest run; rows with the same "
                     "grp cannot be told apart (their spreads overlap):", runs);
        for (size_t i = 0, shown = 0; i < n; i++) {
            if (rows[i].state != 1 || group[i] == 0) continue;
            size_t members = 0;
            for (size_t j = 0; j < n; j++) members += group[j] == group[i];
            /* name each group of two or more once, at its first row */
            if (members > 1 && (i == 0 || group[i - 1] != group[i]))
                fprintf(out, "%s ranks %d-%d", shown++ ? ";" : "", group[i], group[i] + (int)members - 1);
        }
        fprintf(out, "\n");
    } else if (k >= 2) {
        fprintf(out, "# one run per layout: no spread, so no layout can be called indistinguishable (--repeat 3)\n");
    }
    if (k >= 2 && worst > 0)
        fprintf(out, "# measured throughputs span %.2fx (best median / worst median)\n", best / worst);
    if (k >= 2 && first_choice < n) {
        const plait_sweep_row *c = &rows[first_choice];
        char name[128];
        plait_cost_layout_name(&c->predicted.layout, name, sizeof name);
        int same = group && group[first_choice] == group[0] && runs > 1;
        fprintf(out, "# the model's first choice, %s, measured %.0f tokens/s: %.1f%% below the measured best%s\n", name,
                c->tokens_per_s, best > 0 ? 100 * (1 - c->tokens_per_s / best) : 0,
                first_choice == 0 ? " (it is the best)" : same ? " (indistinguishable from it)" : "");
    }
    if (k >= 2 && pt && mt)
        fprintf(out, "# model vs measurement over %zu layouts: Spearman rho of tokens/s %.3f; largest step-time "
                     "error %+.1f%%; largest peak-memory error %+.1f%%\n",
                k, plait_spearman(pt, mt, k), 100 * worst_t, 100 * worst_m);
    free(group);
    free(pt);
    free(mt);
}
