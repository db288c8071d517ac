/* Pipeline schedules: see schedule.h for the orders, bounds and formulas. */
#include "schedule.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved", "zb1"};
#define N_KINDS (sizeof kind_names / sizeof kind_names[0])

const char *pp_schedule_name(pp_schedule_kind kind) {
    return (unsigned)kind < N_KINDS ? kind_names[kind] : "?";
}

int pp_schedule_parse(const char *name, pp_schedule_kind *kind) {
    for (int i = 0; name && i < (int)N_KINDS; i++)
        if (strcmp(name, kind_names[i]) == 0) {
            *kind = (pp_schedule_kind)i;
            return 0;
        }
    return -1;
}

static plait_status fail(char *err, size_t err_len, const char *fmt, ...) PLAIT_PRINTF(3, 4);
static plait_status fail(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return PLAIT_ERR_INVALID_ARG;
}

plait_status pp_schedule_check(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m,
                               int32_t v, char *err, size_t err_len) {
    if ((unsigned)kind >= N_KINDS)
        return fail(err, err_len, "unknown pipeline schedule %d", (int)kind);
    if (p < 1 || p > PP_MAX_STAGES)
        return fail(err, err_len, "pipeline stages p = %d: must be in [1, %d]", p, PP_MAX_STAGES);
    if (stage < 0 || stage >= p)
        return fail(err, err_len, "pipeline stage %d is outside [0, %d)", stage, p);
    if (m < 1 || m > PP_MAX_MICRO_BATCHES)
        return fail(err, err_len, "micro-batches m = %d: must be in [1, %d]", m, PP_MAX_MICRO_BATCHES);
    if (v < 1 || v > PP_MAX_CHUNKS)
        return fail(err, err_len, "virtual stages v = %d: must be in [1, %d]", v, PP_MAX_CHUNKS);
    if ((kind == PP_SCHEDULE_1F1B || kind == PP_SCHEDULE_ZB1) && v != 1)
        return fail(err, err_len,
                    "%s runs one model chunk per stage (virtual stages = %d given): "
                    "use the interleaved schedule for v >= 2", kind_names[kind], v);
    if (v > 1 && p < 2)
        return fail(err, err_len,
                    "%d virtual stages need at least 2 pipeline stages (a chunk would send to itself)", v);
    return PLAIT_OK;
}

static int valid(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v) {
    return pp_schedule_check(kind, p, stage, m, v, NULL, 0) == PLAIT_OK;
}

/* Micro-batch groups of the forward and backward orders: n groups whose
 * sizes differ by at most one, the larger first. GPipe: one group of m.
 * Otherwise n = max(1, floor(m / p)), so groups hold p..2p-1 micro-batches
 * when m >= p (exactly p when p divides m) and m when m < p. */
typedef struct groups {
    int64_t n, base, extra; /* `extra` groups of base+1, then n-extra of base */
} groups;

static groups make_groups(pp_schedule_kind kind, int32_t p, int32_t m) {
    int64_t n = kind == PP_SCHEDULE_GPIPE || m < p ? 1 : m / p;
    return (groups){.n = n, .base = m / n, .extra = m % n};
}

/* Size of the largest group: the warm-up must cover one group per extra chunk. */
static int64_t largest_group(pp_schedule_kind kind, int32_t p, int32_t m) {
    groups g = make_groups(kind, p, m);
    return g.base + (g.extra > 0);
}

int64_t pp_schedule_warmup(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v) {
    if (!valid(kind, p, stage, m, v)) return 0;
    int64_t total = (int64_t)m * v;
    if (kind == PP_SCHEDULE_GPIPE) return total;
    int64_t w = (int64_t)(p - stage - 1) + (int64_t)(v - 1) * largest_group(kind, p, m);
    return w < total ? w : total;
}

size_t pp_schedule_length(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v) {
    if (!valid(kind, p, stage, m, v)) return 0;
    int64_t last = (int64_t)v * p - 1;
    size_t per_mb = 0; /* instructions of one micro-batch over all chunks, forward + backward */
    for (int32_t c = 0; c < v; c++) {
        int64_t k = (int64_t)c * p + stage;
        per_mb += 2 * (1 + (k > 0) + (k < last)) + (size_t)pp_schedule_splits_backward(kind);
    }
    return per_mb * (size_t)m + 2;
}

/* The forward (or backward) order's i-th (chunk, mb), 0 <= i < m*v. */
static void order_item(const groups *gr, int32_t v, int backward, int64_t i, int32_t *chunk, int32_t *mb) {
    int64_t big_items = gr->extra * (gr->base + 1) * v, size, first_mb, o;
    if (i < big_items) {
        size = gr->base + 1;
        int64_t g = i / (size * v);
        first_mb = g * size;
        o = i - g * size * v;
    } else {
        size = gr->base;
        int64_t rest = i - big_items, g = rest / (size * v);
        first_mb = gr->extra * (gr->base + 1) + g * size;
        o = rest - g * size * v;
    }
    int32_t c = (int32_t)(o / size);
    *chunk = backward ? v - 1 - c : c;
    *mb = (int32_t)(first_mb + o % size);
}

typedef struct emitter {
    plait_instr *out;
    size_t n;
    int32_t p, stage;
    int64_t last; /* last virtual stage */
} emitter;

static void put(emitter *e, plait_instr_op op, int32_t chunk, int32_t mb) {
    e->out[e->n++] = (plait_instr){.op = (uint16_t)op, .chunk = (uint16_t)chunk, .mb = mb};
}

static void emit_forward(emitter *e, int32_t chunk, int32_t mb) {
    int64_t k = (int64_t)chunk * e->p + e->stage;
    if (k > 0) put(e, PLAIT_INSTR_RECV_ACT, chunk, mb);
    put(e, PLAIT_INSTR_FORWARD, chunk, mb);
    if (k < e->last) put(e, PLAIT_INSTR_SEND_ACT, chunk, mb);
}

/* The backward (op BACKWARD), or its input half (BACKWARD_INPUT), with its
 * transfers. */
static void emit_backward_op(emitter *e, plait_instr_op op, int32_t chunk, int32_t mb) {
    int64_t k = (int64_t)chunk * e->p + e->stage;
    if (k < e->last) put(e, PLAIT_INSTR_RECV_GRAD, chunk, mb);
    put(e, op, chunk, mb);
    if (k > 0) put(e, PLAIT_INSTR_SEND_GRAD, chunk, mb);
}

static void emit_backward(emitter *e, int32_t chunk, int32_t mb) {
    emit_backward_op(e, PLAIT_INSTR_BACKWARD, chunk, mb);
}

/* ZB-H1 (schedule.h): 1F1B's order with each backward split, the weight
 * halves of stage s trailing its input halves by up to s micro-batches. */
static void build_zb1(emitter *e, int32_t m, int64_t warmup) {
    int32_t f = 0, b = 0, w = 0; /* next forward, input half, weight half */
    for (; f < warmup; f++) emit_forward(e, 0, f);
    for (; f < m; f++) {
        emit_forward(e, 0, f);
        emit_backward_op(e, PLAIT_INSTR_BACKWARD_INPUT, 0, b++);
        if (b - w > e->stage) put(e, PLAIT_INSTR_BACKWARD_WEIGHT, 0, w++);
    }
    while (b < m) {
        emit_backward_op(e, PLAIT_INSTR_BACKWARD_INPUT, 0, b++);
        put(e, PLAIT_INSTR_BACKWARD_WEIGHT, 0, w++);
    }
    while (w < m) put(e, PLAIT_INSTR_BACKWARD_WEIGHT, 0, w++);
}

plait_status pp_schedule_build(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m,
                               int32_t v, plait_instr *out, size_t cap, size_t *n, char *err,
                               size_t err_len) {
    plait_status st = pp_schedule_check(kind, p, stage, m, v, err, err_len);
    if (st != PLAIT_OK) return st;
    size_t need = pp_schedule_length(kind, p, stage, m, v);
    if (!out || cap < need) {
        *n = need;
        if (err && err_len)
            snprintf(err, err_len, "the %s schedule of stage %d needs %zu instructions, room for %zu",
                     pp_schedule_name(kind), stage, need, out ? cap : 0);
        return PLAIT_ERR_NO_MEMORY;
    }
    groups gr = make_groups(kind, p, m);
    int64_t total = (int64_t)m * v;
    int64_t warmup = pp_schedule_warmup(kind, p, stage, m, v);
    emitter e = {.out = out, .n = 0, .p = p, .stage = stage, .last = (int64_t)v * p - 1};
    int64_t f = 0, b = 0; /* next positions in the forward and backward orders */
    int32_t c, j;
    if (kind == PP_SCHEDULE_ZB1) {
        build_zb1(&e, m, warmup);
        f = b = total;
    }
    for (; f < warmup; f++) {
        order_item(&gr, v, 0, f, &c, &j);
        emit_forward(&e, c, j);
    }
    for (; f < total; f++, b++) {
        order_item(&gr, v, 0, f, &c, &j);
        emit_forward(&e, c, j);
        order_item(&gr, v, 1, b, &c, &j);
        emit_backward(&e, c, j);
    }
    for (; b < total; b++) {
        order_item(&gr, v, 1, b, &c, &j);
        emit_backward(&e, c, j);
    }
    put(&e, PLAIT_INSTR_REDUCE_GRADS, 0, -1);
    put(&e, PLAIT_INSTR_OPTIM_STEP, 0, -1);
    *n = e.n;
    return PLAIT_OK;
}

int64_t pp_schedule_idle_steps(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v) {
    if (!valid(kind, p, 0, m, v)) return 0;
    if (kind == PP_SCHEDULE_ZB1) return (int64_t)(p - 1) + (p > m ? p - m : 0);
    return (int64_t)(p - 1) + (int64_t)(v - 1) * (p > m ? p - m : 0);
}

double pp_schedule_bubble(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v) {
    if (!valid(kind, p, 0, m, v)) return 0.0;
    int64_t idle = pp_schedule_idle_steps(kind, p, m, v);
    /* busy time in the idle count's unit: zb1 counts passes, three per micro-batch */
    int64_t busy = kind == PP_SCHEDULE_ZB1 ? 3 * (int64_t)m : (int64_t)m * v;
    return (double)idle / (double)(busy + idle);
}

const char *pp_schedule_bubble_formula(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v) {
    if (kind == PP_SCHEDULE_ZB1) return m >= p ? "(p-1)/(3m+p-1)" : "(2p-m-1)/(2m+2p-1)";
    if (v <= 1) return "(p-1)/(m+p-1)";
    if (m >= p) return "(p-1)/(v*m+p-1)";
    return "(v*(p-m)+m-1)/(v*p+m-1)";
}

int64_t pp_schedule_peak_live(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v) {
    if (!valid(kind, p, stage, m, v)) return 0;
    int64_t total = (int64_t)m * v;
    if (kind == PP_SCHEDULE_GPIPE) return total;
    if (kind == PP_SCHEDULE_ZB1) return p < m ? p : m; /* live until the weight half */
    /* The warm-up forwards plus the first steady-state forward are live
     * when the first backward starts; nothing is live longer after that. */
    int64_t bound = (int64_t)(p - stage) + (int64_t)(v - 1) * largest_group(kind, p, m);
    return bound < total ? bound : total;
}
