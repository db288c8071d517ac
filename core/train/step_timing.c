#include "train/step_timing.h"

#include <stdlib.h>

#include "runtime/error.h"

plait_status plait_stage_timing_open(plait_stage_timing *st, int32_t pp) {
    *st = (plait_stage_timing){.pp = pp};
    st->stage_idle_s = calloc((size_t)pp, sizeof(double));
    st->stage_idle_sum = calloc((size_t)pp, sizeof(double));
    if (!st->stage_idle_s || !st->stage_idle_sum) {
        plait_stage_timing_close(st);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the stage timing of %d stages", (int)pp);
    }
    return PLAIT_OK;
}

void plait_stage_timing_close(plait_stage_timing *st) {
    free(st->stage_idle_s);
    free(st->stage_idle_sum);
    st->stage_idle_s = st->stage_idle_sum = NULL;
}

void plait_stage_times_put(double *times, int32_t pp, int32_t stage, double share, const plait_step_timing *t) {
    times[stage] = t->fb_s * share;
    times[pp + stage] = t->pipe_end_s * share;
}

/* As tests/pp's simulator counts the bubble. */
void plait_stage_timing_take(plait_stage_timing *st, const double *times, plait_step_result *res) {
    int32_t pp = st->pp;
    double span = 0, share = 0;
    for (int32_t s = 0; s < pp; s++)
        if (times[pp + s] > span) span = times[pp + s];
    for (int32_t s = 0; s < pp; s++) {
        double idle = span - times[s];
        st->stage_idle_s[s] = idle > 0 ? idle : 0;
        share += span > 0 ? st->stage_idle_s[s] / span : 0;
    }
    res->pipe_span_s = span;
    res->bubble = share / pp;
    /* the run's first step warms caches and allocates activations: the
     * end-of-run average leaves it out */
    if (st->bubble_steps++ > 0) {
        st->pipe_span_sum += span;
        for (int32_t s = 0; s < pp; s++) st->stage_idle_sum[s] += st->stage_idle_s[s];
    }
}
