/* A checkpoint shard as one block of memory (ckpt_image.h). */
#include "checkpoint/ckpt_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/safetensors_crc32c.h"
#include "runtime/error.h"

#define IMAGE_MAGIC "PLAITIMG"
#define IMAGE_VERSION 1u
#define ALIGN 64u

typedef struct image_header {
    char magic[8];
    uint32_t version;
    uint32_t crc;           /* CRC32C of the image with this field zero */
    uint64_t bytes;         /* the whole image */
    uint64_t n_tensors;
    uint64_t names_off, names_len, data_off;
    int64_t step, optim_step;
    uint64_t seed;
    int64_t data_tokens, data_train_tokens;
    uint32_t data_train_crc32c;
    int32_t stage, stages, dp, tp, pp;
} image_header;

typedef struct image_entry {
    uint64_t name_off;      /* from names_off */
    uint32_t name_len;
    int32_t ndim;
    int64_t shape[PLAIT_ST_MAX_DIMS];
    uint64_t data_off;      /* from the image's start */
    uint64_t numel;
} image_entry;

static size_t align_up(size_t n) { return (n + ALIGN - 1) / ALIGN * ALIGN; }

/* Calls `fn` for every tensor of the stage in order: its name and shape. */
typedef void (*visit_fn)(void *ctx, const char *name, int32_t ndim, const int64_t *shape);

static void visit(const plait_model_spec *spec, const char *const *states, const int32_t *stage_of, int32_t stage,
                  visit_fn fn, void *ctx) {
    for (int32_t g = 0; g < spec->n_params; g++) {
        if (!plait_ckpt_param_stored(spec, g) || stage_of[g] != stage) continue;
        const plait_param *p = &spec->params[g];
        const char *base = plait_ckpt_param_name(spec, g);
        fn(ctx, base, p->ndim, p->shape);
        for (int k = 0; states && states[k]; k++) {
            char name[1024];
            plait_ckpt_optim_name(name, sizeof name, states[k], base);
            fn(ctx, name, p->ndim, p->shape);
        }
    }
}

/* The same over named 1-D tensors. */
static void visit_named(const plait_ckpt_image_tensors *t, visit_fn fn, void *ctx) {
    for (size_t i = 0; i < t->n; i++) {
        int64_t shape[1] = {(int64_t)t->counts[i]};
        fn(ctx, t->names[i], 1, shape);
    }
}

static size_t numel_of_shape(int32_t ndim, const int64_t *shape) {
    size_t n = 1;
    for (int d = 0; d < ndim; d++) n *= (size_t)shape[d];
    return n;
}

typedef struct sizes {
    size_t n, names, data;
} sizes;

static void count(void *ctx, const char *name, int32_t ndim, const int64_t *shape) {
    sizes *s = ctx;
    s->n++;
    s->names += strlen(name);
    s->data += align_up(numel_of_shape(ndim, shape) * sizeof(float));
}

static sizes measure(const plait_model_spec *spec, const char *const *states, const int32_t *stage_of,
                     int32_t stage) {
    sizes s = {0, 0, 0};
    visit(spec, states, stage_of, stage, count, &s);
    return s;
}

static size_t data_start(const sizes *s) {
    return align_up(sizeof(image_header) + s->n * sizeof(image_entry) + s->names);
}

size_t plait_ckpt_image_size(const plait_model_spec *spec, const char *const *state_names, const int32_t *stage_of,
                             int32_t stage) {
    sizes s = measure(spec, state_names, stage_of, stage);
    return data_start(&s) + s.data;
}

typedef struct writer {
    unsigned char *buf;
    image_entry *e;
    size_t i, name_at, data_at;
    uint64_t names_off;
} writer;

static void lay(void *ctx, const char *name, int32_t ndim, const int64_t *shape) {
    writer *w = ctx;
    image_entry *e = &w->e[w->i++];
    memset(e, 0, sizeof *e);
    size_t len = strlen(name);
    e->name_off = w->name_at;
    e->name_len = (uint32_t)len;
    memcpy(w->buf + w->names_off + w->name_at, name, len);
    w->name_at += len;
    e->ndim = ndim;
    for (int d = 0; d < ndim && d < PLAIT_ST_MAX_DIMS; d++) e->shape[d] = shape[d];
    e->numel = numel_of_shape(ndim, shape);
    e->data_off = w->data_at;
    w->data_at += align_up(e->numel * sizeof(float));
}

/* The header of an image whose tensors `sz` measured, and *w ready for
 * `lay` to write their entries. */
static plait_status begin(void *buf, size_t bytes, const plait_ckpt_image_state *state, const sizes *sz, writer *w) {
    size_t want = data_start(sz) + sz->data;
    if (bytes != want)
        return plait_set_error(PLAIT_ERR_INTERNAL, "a checkpoint image of stage %d needs %zu bytes, not %zu",
                               (int)state->stage, want, bytes);
    const sizes s = *sz;
    image_header h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, IMAGE_MAGIC, 8);
    h.version = IMAGE_VERSION;
    h.bytes = bytes;
    h.n_tensors = s.n;
    h.names_off = sizeof h + s.n * sizeof(image_entry);
    h.names_len = s.names;
    h.data_off = data_start(&s);
    h.step = state->step;
    h.optim_step = state->optim_step;
    h.seed = state->seed;
    h.data_tokens = state->data_tokens;
    h.data_train_tokens = state->data_train_tokens;
    h.data_train_crc32c = state->data_train_crc32c;
    h.stage = state->stage;
    h.stages = state->stages;
    h.dp = state->dp;
    h.tp = state->tp;
    h.pp = state->pp;
    unsigned char *b = buf;
    memset(b, 0, h.data_off); /* padding included: the CRC covers it */
    memcpy(b, &h, sizeof h);
    *w = (writer){.buf = b, .e = (image_entry *)(b + sizeof h), .names_off = h.names_off, .data_at = h.data_off};
    return PLAIT_OK;
}

plait_status plait_ckpt_image_begin(void *buf, size_t bytes, const plait_ckpt_image_state *state,
                                    const plait_model_spec *spec, const char *const *state_names,
                                    const int32_t *stage_of) {
    sizes s = measure(spec, state_names, stage_of, state->stage);
    writer w = {0};
    plait_status st = begin(buf, bytes, state, &s, &w);
    if (st == PLAIT_OK) visit(spec, state_names, stage_of, state->stage, lay, &w);
    return st;
}

size_t plait_ckpt_image_tensors_size(const plait_ckpt_image_tensors *t) {
    sizes s = {0, 0, 0};
    visit_named(t, count, &s);
    return data_start(&s) + s.data;
}

plait_status plait_ckpt_image_begin_tensors(void *buf, size_t bytes, const plait_ckpt_image_state *state,
                                            const plait_ckpt_image_tensors *t) {
    sizes s = {0, 0, 0};
    visit_named(t, count, &s);
    writer w = {0};
    plait_status st = begin(buf, bytes, state, &s, &w);
    if (st == PLAIT_OK) visit_named(t, lay, &w);
    return st;
}

float *plait_ckpt_image_slot(void *buf, const plait_model_spec *spec, int32_t g, const char *which) {
    char name[1024];
    const char *base = plait_ckpt_param_name(spec, g);
    if (strcmp(which, "param") == 0) snprintf(name, sizeof name, "%s", base);
    else plait_ckpt_optim_name(name, sizeof name, which, base);
    return plait_ckpt_image_slot_named(buf, name);
}

float *plait_ckpt_image_slot_named(void *buf, const char *name) {
    unsigned char *b = buf;
    image_header h;
    memcpy(&h, b, sizeof h);
    const image_entry *e = (const image_entry *)(b + sizeof h);
    size_t len = strlen(name);
    for (uint64_t i = 0; i < h.n_tensors; i++)
        if (e[i].name_len == len && memcmp(b + h.names_off + e[i].name_off, name, len) == 0)
            return (float *)(b + e[i].data_off);
    return NULL;
}

uint32_t plait_ckpt_image_seal(void *buf) {
    image_header h;
    memcpy(&h, buf, sizeof h);
    h.crc = 0;
    memcpy(buf, &h, sizeof h);
    uint32_t crc = plait_crc32c(0, buf, h.bytes);
    h.crc = crc;
    memcpy(buf, &h, sizeof h);
    return crc;
}

static plait_status bad(const char *what, const char *why) {
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is not a valid checkpoint image: %s", what, why);
}

plait_status plait_ckpt_image_open(const void *buf, size_t bytes, int verify, const char *what,
                                   plait_ckpt_image *out) {
    memset(out, 0, sizeof *out);
    const unsigned char *b = buf;
    image_header h;
    if (bytes < sizeof h) return bad(what, "shorter than its header");
    memcpy(&h, b, sizeof h);
    if (memcmp(h.magic, IMAGE_MAGIC, 8) != 0) return bad(what, "no PLAITIMG magic");
    if (h.version != IMAGE_VERSION) return bad(what, "an unknown version");
    if (h.bytes != bytes) return bad(what, "its header gives another size");
    if (h.n_tensors > bytes / sizeof(image_entry) || h.names_off != sizeof h + h.n_tensors * sizeof(image_entry) ||
        h.names_len > bytes || h.names_off + h.names_len > bytes || h.data_off > bytes ||
        h.data_off < h.names_off + h.names_len)
        return bad(what, "its tables do not fit");
    if (h.stages < 1 || h.stage < 0 || h.stage >= h.stages) return bad(what, "its stage is out of range");
    if (verify) {
        uint32_t want = h.crc;
        image_header z = h;
        z.crc = 0;
        uint32_t crc = plait_crc32c(0, &z, sizeof z);
        crc = plait_crc32c(crc, b + sizeof z, bytes - sizeof z);
        if (crc != want)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is damaged: its CRC32C is %08x, its header says %08x",
                                   what, (unsigned)crc, (unsigned)want);
    }
    const image_entry *e = (const image_entry *)(b + sizeof h);
    out->tensors = calloc(h.n_tensors ? h.n_tensors : 1, sizeof *out->tensors);
    out->names = malloc(h.names_len + h.n_tensors + 1);
    if (!out->tensors || !out->names) {
        plait_ckpt_image_free(out);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    /* the names are copied one after another, each with its NUL: entries
     * whose names overlap in the table (or repeat one) must still fit */
    size_t at = 0, names_cap = h.names_len + h.n_tensors + 1;
    for (uint64_t i = 0; i < h.n_tensors; i++) {
        image_entry en;
        memcpy(&en, &e[i], sizeof en);
        uint64_t numel = 1;
        int ok = en.ndim >= 0 && en.ndim <= PLAIT_ST_MAX_DIMS && en.name_len > 0 &&
                 en.name_off <= h.names_len && en.name_len <= h.names_len - en.name_off &&
                 en.name_len < names_cap - at;
        for (int d = 0; ok && d < en.ndim; d++) {
            ok = en.shape[d] >= 0 && (en.shape[d] == 0 || numel <= UINT64_MAX / 4 / (uint64_t)en.shape[d]);
            if (ok) numel *= (uint64_t)en.shape[d];
        }
        ok = ok && numel == en.numel && en.data_off >= h.data_off && en.data_off % 4 == 0 &&
             en.data_off <= bytes && numel <= (bytes - en.data_off) / 4;
        if (!ok) {
            plait_ckpt_image_free(out);
            return bad(what, "a tensor entry is out of range");
        }
        plait_st_tensor *t = &out->tensors[i];
        memcpy(out->names + at, b + h.names_off + en.name_off, en.name_len);
        out->names[at + en.name_len] = '\0';
        t->name = out->names + at;
        at += en.name_len + 1;
        t->ndim = en.ndim;
        for (int d = 0; d < en.ndim; d++) t->shape[d] = en.shape[d];
        t->numel = (size_t)numel;
        t->offset = en.data_off;
        t->bytes = numel * 4;
        t->data = (const float *)(b + en.data_off);
    }
    out->n = (size_t)h.n_tensors;
    out->crc = h.crc;
    out->state = (plait_ckpt_image_state){.step = h.step,
                                          .optim_step = h.optim_step,
                                          .seed = h.seed,
                                          .data_tokens = h.data_tokens,
                                          .data_train_tokens = h.data_train_tokens,
                                          .data_train_crc32c = h.data_train_crc32c,
                                          .stage = h.stage,
                                          .stages = h.stages,
                                          .dp = h.dp,
                                          .tp = h.tp,
                                          .pp = h.pp};
    return PLAIT_OK;
}

void plait_ckpt_image_free(plait_ckpt_image *img) {
    free(img->tensors);
    free(img->names);
    memset(img, 0, sizeof *img);
}

const plait_st_tensor *plait_ckpt_image_find(const plait_ckpt_image *img, const char *name) {
    for (size_t i = 0; i < img->n; i++)
        if (strcmp(img->tensors[i].name, name) == 0) return &img->tensors[i];
    return NULL;
}
