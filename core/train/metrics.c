#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

/* A temporary file of its own beside `path`, as a stream (out_file.h). */
/* Whether a resume drops this line of the file: a row of a step after
 * `last`, or a line without its line break (a write cut short, by a full
 * disk say: the next row would be glued onto it). */
static int dropped(const char *row, ssize_t len, int line, int64_t last) {
    if (row[len - 1] != '\n') return 1;
    return line > 0 && strtoll(row, NULL, 10) > last;
}

/* Keep the header and the rows of steps <= last (the first column is the
 * step), whole lines only; rewrite the file only when some line goes. */
static plait_status drop_rows_after(const char *path, int64_t last) {
    if (plait_out_is_link(path)) {
        FILE *never;
        return plait_out_fopen(path, "a", &never); /* the error naming the link */
    }
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? PLAIT_OK : plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", path, strerror(errno));
    FILE *in = NULL;
    plait_status opened = plait_fopen_regular(path, "metrics file", PLAIT_ERR_INVALID_ARG, &in);
    if (opened != PLAIT_OK) return opened;
    char *row = NULL;
    size_t cap = 0;
    ssize_t len;
    int line = 0, later = 0;
    while (!later && (len = getline(&row, &cap, in)) > 0) later = dropped(row, len, line++, last);
    plait_status st = PLAIT_OK;
    if (later) {
        char tmp[4200];
        FILE *out = NULL;
        st = plait_out_fopen_temp(path, tmp, sizeof tmp, &out);
        if (st == PLAIT_OK) {
            rewind(in);
            long long gone = 0; /* whole rows of later steps: trained again after this resume */
            for (line = 0; (len = getline(&row, &cap, in)) > 0; line++) {
                if (!dropped(row, len, line, last)) fwrite(row, 1, (size_t)len, out);
                else gone += row[len - 1] == '\n';
            }
            if (gone)
                PLAIT_INFO("train",
                           "metrics: %lld row%s of steps after %lld dropped: the resumed run trains them "
                           "again",
                           gone, gone == 1 ? "" : "s", (long long)last);
            int err = ferror(in) || ferror(out) ? EIO : 0;
            if (fflush(out) != 0 && !err) err = errno;
            if (fclose(out) != 0 && !err) err = errno;
            if (!err && rename(tmp, path) != 0) err = errno;
            if (err) {
                remove(tmp);
                st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot drop the rows after step %lld: %s", path,
                                     (long long)last, strerror(err));
            }
        }
    }
    free(row);
    fclose(in);
    return st;
}

plait_status plait_metrics_open(plait_metrics *m, const char *path, int append, int64_t resumed_step) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < PLAIT_METRICS_MAX_COLUMNS; i++) m->values[i] = NAN;
    snprintf(m->path, sizeof m->path, "%s", path);
    if (append) {
        /* rows are added only to a file of plait's own (first column: step) */
        plait_status own = plait_out_check_own(path, "step,", "the run's metrics file");
        if (own == PLAIT_OK) own = drop_rows_after(path, resumed_step);
        if (own != PLAIT_OK) return own;
    }
    /* a fresh run writes over a metrics.csv of plait's only (an earlier run
     * without checkpoints), never over someone else's */
    plait_status st = append ? PLAIT_OK : plait_out_check_own(path, "step,", "the run's metrics file");
    if (st == PLAIT_OK) st = plait_out_fopen(path, append ? "a+" : "w", &m->file);
    if (st != PLAIT_OK) return plait_wrap_error(st, "cannot open the metrics file");
    if (append) {
        fseek(m->file, 0, SEEK_END);
        m->header_written = ftell(m->file) > 0;
    }
    return PLAIT_OK;
}

int plait_metrics_column(plait_metrics *m, const char *name) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) return i;
    if (m->n == PLAIT_METRICS_MAX_COLUMNS || m->header_written == 2) return -1;
    snprintf(m->names[m->n], sizeof m->names[0], "%s", name);
    return m->n++;
}

void plait_metrics_set(plait_metrics *m, int column, double value) {
    if (column >= 0 && column < m->n) m->values[column] = value;
}

void plait_metrics_set_named(plait_metrics *m, const char *name, double value) {
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->names[i], name) == 0) m->values[i] = value;
}

/* Split a header line into names (in place); returns the count, or -1
 * when a name is longer than 31 bytes or there are more than `max`: cut
 * or dropped, the rewritten header would no longer match the rows. */
static int split_header(char *line, char names[][32], int max) {
    int n = 0;
    line[strcspn(line, "\r\n")] = '\0';
    for (char *save = NULL, *tok = strtok_r(line, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || strlen(tok) >= 32) return -1;
        snprintf(names[n++], 32, "%s", tok);
    }
    return n;
}

/* The existing file's header differs from this run's columns: rewrite the
 * file with the union (old columns, then this run's new ones), old rows
 * padded with empty cells, and order this run's columns (and the values
 * already set) the same way. On failure the file is left as it was and the
 * error is returned (the temporary file removed). */
static plait_status reconcile_header(plait_metrics *m) {
    char line[8192];
    rewind(m->file);
    if (!fgets(line, sizeof line, m->file)) return PLAIT_OK;
    char old[PLAIT_METRICS_MAX_COLUMNS][32];
    char mine_line[8192] = "";
    size_t used = 0;
    for (int i = 0; i < m->n && used < sizeof mine_line; i++)
        used += (size_t)snprintf(mine_line + used, sizeof mine_line - used, "%s%s", i ? "," : "", m->names[i]);
    char copy[8192];
    snprintf(copy, sizeof copy, "%s", line);
    copy[strcspn(copy, "\r\n")] = '\0';
    if (strcmp(copy, mine_line) == 0) return PLAIT_OK;
    /* a header longer than the line read would have its rest copied as a
     * row; plait's own (at most 64 names of 31 bytes) always fits */
    int whole = strchr(line, '\n') || feof(m->file);
    int n_old = whole ? split_header(line, old, PLAIT_METRICS_MAX_COLUMNS) : -1;
    if (n_old < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: its header is not one plait writes (more than %d columns, a name longer than 31 "
                               "bytes or a line longer than %zu); not rewriting it: move it away",
                               m->path, PLAIT_METRICS_MAX_COLUMNS, sizeof line - 1);
    char names[PLAIT_METRICS_MAX_COLUMNS][32];
    double values[PLAIT_METRICS_MAX_COLUMNS];
    int n = 0;
    for (int i = 0; i < n_old; i++) snprintf(names[n++], 32, "%s", old[i]);
    for (int j = 0; j < m->n; j++) {
        int found = 0;
        for (int i = 0; i < n_old && !found; i++) found = strcmp(old[i], m->names[j]) == 0;
        if (found) continue;
        if (n == PLAIT_METRICS_MAX_COLUMNS)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: the old and new columns make more than %d", m->path,
                                   PLAIT_METRICS_MAX_COLUMNS);
        snprintf(names[n++], 32, "%s", m->names[j]);
    }
    for (int i = 0; i < n; i++) {
        values[i] = NAN;
        for (int j = 0; j < m->n; j++)
            if (strcmp(names[i], m->names[j]) == 0) values[i] = m->values[j];
    }
    char tmp[4200];
    FILE *out = NULL;
    plait_status st = plait_out_fopen_temp(m->path, tmp, sizeof tmp, &out);
    if (st != PLAIT_OK) return st;
    for (int i = 0; i < n; i++) fprintf(out, "%s%s", i ? "," : "", names[i]);
    fputc('\n', out);
    char *row = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&row, &cap, m->file)) > 0) {
        while (len > 0 && (row[len - 1] == '\n' || row[len - 1] == '\r')) row[--len] = '\0';
        fputs(row, out);
        for (int i = n_old; i < n; i++) fputc(',', out);
        fputc('\n', out);
    }
    free(row);
    int bad = ferror(m->file) || fflush(out) != 0 || ferror(out);
    if (fclose(out) != 0 || bad || rename(tmp, m->path) != 0) {
        remove(tmp);
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot rewrite with the new columns", m->path);
    }
    fclose(m->file);
    st = plait_out_fopen(m->path, "a", &m->file);
    if (st != PLAIT_OK) return st;
    memcpy(m->names, names, sizeof names[0] * (size_t)n);
    memcpy(m->values, values, sizeof values[0] * (size_t)n);
    m->n = n;
    return PLAIT_OK;
}

plait_status plait_metrics_row(plait_metrics *m) {
    if (!m->file) return PLAIT_OK;
    if (m->header_written == 1) {
        plait_status st = reconcile_header(m);
        if (st != PLAIT_OK) return st;
        if (!m->file) return PLAIT_OK;
        fseek(m->file, 0, SEEK_END);
    }
    if (m->header_written != 2) {
        if (!m->header_written)
            for (int i = 0; i < m->n; i++) fprintf(m->file, "%s%s", i ? "," : "", m->names[i]);
        if (!m->header_written) fputc('\n', m->file);
        m->header_written = 2;
    }
    for (int i = 0; i < m->n; i++) {
        double v = m->values[i];
        if (i) fputc(',', m->file);
        if (isnan(v)) {
        } else if (v == floor(v) && fabs(v) < 1e15) {
            fprintf(m->file, "%.0f", v);
        } else if (strstr(m->names[i], "loss")) {
            fprintf(m->file, "%.17g", v); /* exact: layouts are compared bit for bit */
        } else {
            fprintf(m->file, "%.6g", v);
        }
        m->values[i] = NAN;
    }
    fputc('\n', m->file);
    if (fflush(m->file) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "writing metrics: %s", strerror(errno));
    return PLAIT_OK;
}

void plait_metrics_close(plait_metrics *m) {
    if (m->file) fclose(m->file);
    m->file = NULL;
}
