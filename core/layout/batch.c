#include "layout/batch.h"

#include <inttypes.h>
#include <stdio.h>

#include "runtime/error.h"

#define DEFAULT_MICRO_BATCH 8

static plait_status contradiction(int64_t g, int64_t b, int64_t a, int64_t dp, const char *why) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "[data] global_batch = %" PRId64 ", micro_batch = %" PRId64
                           ", accumulation_steps = %" PRId64 " with dp = %" PRId64
                           ": %s (global_batch must equal dp x micro_batch x accumulation_steps; give "
                           "any two and plait derives the third)",
                           g, b, a, dp, why);
}

plait_status plait_batch_solve(int64_t g, int64_t b, int64_t a, int64_t dp, plait_batch *out) {
    if (dp < 1) return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "dp must be at least 1");
    int given = (g > 0) + (b > 0) + (a > 0);
    if (given <= 1) {
        if (g > 0) {
            a = 1;
        } else {
            if (b <= 0) b = DEFAULT_MICRO_BATCH;
            if (a <= 0) a = 1;
        }
    }
    if (g > 0 && b > 0 && a > 0) {
        if (g != dp * b * a) return contradiction(g, b, a, dp, "the three do not agree");
    } else if (g > 0 && b > 0) {
        if (g % (dp * b) != 0)
            return contradiction(g, b, 0, dp, "global_batch is not a multiple of dp x micro_batch");
        a = g / (dp * b);
    } else if (g > 0 && a > 0) {
        if (g % (dp * a) != 0)
            return contradiction(g, 0, a, dp, "global_batch is not a multiple of dp x accumulation_steps");
        b = g / (dp * a);
    } else {
        g = dp * b * a;
    }
    out->global_batch = g;
    out->micro_batch = b;
    out->accumulation = a;
    out->dp = dp;
    return PLAIT_OK;
}

plait_status plait_batch_from_config(plait_config *cfg, plait_batch *out) {
    int64_t g = plait_config_int(cfg, "data", "global_batch");
    int64_t b = plait_config_int(cfg, "data", "micro_batch");
    int64_t a = plait_config_int(cfg, "data", "accumulation_steps");
    int64_t dp = plait_config_int(cfg, "parallel", "dp");
    plait_status st = plait_batch_solve(g, b, a, dp, out);
    if (st != PLAIT_OK) return st;
    char text[32], why[128];
    snprintf(why, sizeof why, "dp %" PRId64 " x micro_batch x accumulation_steps", dp);
    if (g != out->global_batch) {
        snprintf(text, sizeof text, "%" PRId64, out->global_batch);
        if ((st = plait_config_set_derived(cfg, "data", "global_batch", text, why)) != PLAIT_OK) return st;
    }
    if (b != out->micro_batch) {
        snprintf(text, sizeof text, "%" PRId64, out->micro_batch);
        if ((st = plait_config_set_derived(cfg, "data", "micro_batch", text, why)) != PLAIT_OK) return st;
    }
    if (a != out->accumulation) {
        snprintf(text, sizeof text, "%" PRId64, out->accumulation);
        if ((st = plait_config_set_derived(cfg, "data", "accumulation_steps", text, why)) != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}
