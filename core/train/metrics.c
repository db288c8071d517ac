#include "train/metrics.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "runtime/error.h"

plait_status plait_metrics_open(plait_metrics *m, const char *path, int append) {
    memset(m, 0, sizeof *m);
    for (int i = 0; i < PLAIT_METRICS_MAX_COLUMNS; i++) m->values[i] = NAN;
    m->file = fopen(path, append ? "a+" : "w");
    if (!m->file) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: cannot open metrics file: %s", path, strerror(errno));
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

plait_status plait_metrics_row(plait_metrics *m) {
    if (!m->file) return PLAIT_OK;
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
