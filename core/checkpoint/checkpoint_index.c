/* index.json of a sharded checkpoint: written, parsed strictly, and the
 * read of any slice from the slices that hold it (checkpoint_index.h). */
#include "checkpoint/checkpoint_index.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_shard.h"
#include "runtime/error.h"

void plait_ckpt_shard_file_name(char *buf, size_t cap, int rank) {
    snprintf(buf, cap, PLAIT_CKPT_SHARD_PREFIX "%05d.safetensors", rank);
}

static int cut_twice(const plait_ckpt_slice *s) { return s->second.dim > 0 && s->second.parts > 1; }

void plait_ckpt_index_render(plait_jbuf *b, const plait_ckpt_index *ix) {
    int twice = 0;
    for (int32_t i = 0; i < ix->n_tensors; i++)
        for (int32_t k = 0; k < ix->tensors[i].n_slices; k++) twice |= cut_twice(&ix->tensors[i].slices[k]);
    plait_jbuf_printf(b, "{\n  \"format\": \"%s\",\n  \"format_version\": %d,\n  \"step\": %lld,\n  \"files\": [",
                      PLAIT_CKPT_INDEX_FORMAT, twice ? PLAIT_CKPT_INDEX_VERSION_TWICE : PLAIT_CKPT_INDEX_VERSION,
                      (long long)ix->step);
    for (int32_t f = 0; f < ix->n_files; f++) {
        plait_jbuf_puts(b, f ? ",\n    " : "\n    ");
        plait_jbuf_string(b, ix->files[f]);
    }
    plait_jbuf_puts(b, "\n  ],\n  \"tensors\": {");
    for (int32_t i = 0; i < ix->n_tensors; i++) {
        const plait_ckpt_index_tensor *t = &ix->tensors[i];
        plait_jbuf_puts(b, i ? ",\n    " : "\n    ");
        plait_jbuf_string(b, t->name);
        plait_jbuf_puts(b, ": {\"dtype\": \"F32\", \"shape\": [");
        for (int32_t d = 0; d < t->ndim; d++) plait_jbuf_printf(b, "%s%lld", d ? ", " : "", (long long)t->shape[d]);
        plait_jbuf_puts(b, "], \"slices\": [");
        for (int32_t k = 0; k < t->n_slices; k++) {
            const plait_ckpt_slice *s = &t->slices[k];
            plait_jbuf_printf(b,
                              "%s\n      {\"file\": %d, \"dim\": %d, \"parts\": %d, \"index\": %d, \"groups\": %d, "
                              "\"padded_len\": %lld, \"begin\": %llu, \"end\": %llu",
                              k ? "," : "", s->file, s->shard.dim, s->shard.parts, s->shard.index, s->shard.groups,
                              (long long)s->shard.padded_len, (unsigned long long)s->begin, (unsigned long long)s->end);
            if (cut_twice(s))
                plait_jbuf_printf(b, ", \"second_dim\": %d, \"second_parts\": %d, \"second_index\": %d", s->second.dim,
                                  s->second.parts, s->second.index);
            plait_jbuf_puts(b, "}");
        }
        plait_jbuf_puts(b, "]}");
    }
    plait_jbuf_puts(b, "\n  }\n}\n");
}

void plait_ckpt_index_free(plait_ckpt_index *ix) {
    if (!ix) return;
    for (int32_t i = 0; i < ix->n_tensors; i++) free(ix->tensors[i].slices);
    free(ix->tensors);
    free(ix->files);
    plait_json_free(ix->doc);
    free(ix);
}

const plait_ckpt_index_tensor *plait_ckpt_index_find(const plait_ckpt_index *ix, const char *name) {
    for (int32_t i = 0; ix && i < ix->n_tensors; i++)
        if (strcmp(ix->tensors[i].name, name) == 0) return &ix->tensors[i];
    return NULL;
}

static int int_in(const plait_json *obj, const char *key, int64_t lo, int64_t hi, int64_t *out) {
    const plait_json *v = plait_json_get(obj, key);
    if (!v || v->type != PLAIT_JSON_INT || v->num < lo || v->num > hi) return 0;
    *out = v->num;
    return 1;
}

static void count_real(void *ctx, size_t local_at, long long global_at, size_t n) {
    (void)local_at;
    if (global_at >= 0) *(size_t *)ctx += n;
}

/* The block of tensor `t` a slice cut twice takes its second split from:
 * the shape with dimension 0 cut by the first. */
static void first_block(const plait_ckpt_index_tensor *t, const plait_ckpt_slice *s, int64_t *shape) {
    memcpy(shape, t->shape, sizeof t->shape);
    shape[0] = t->shape[0] / s->shard.parts;
}

/* A version 2 slice's second split ("second_*"), checked: the first one
 * on dimension 0, unpadded, one group, and the second on another
 * dimension that it divides. */
static plait_status parse_second(const plait_json *v, const plait_ckpt_index_tensor *t, const char *what,
                                 plait_ckpt_slice *s) {
    int64_t dim, parts, index;
    const plait_shard *f = &s->shard;
    if (!int_in(v, "second_dim", 1, t->ndim - 1, &dim) || !int_in(v, "second_parts", 2, INT32_MAX, &parts) ||
        !int_in(v, "second_index", 0, parts - 1, &index) || f->dim != 0 || f->groups != 1 || f->parts < 1 ||
        f->padded_len != t->shape[0] || t->shape[0] % f->parts != 0 || t->shape[dim] % parts != 0)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s: a slice cut twice needs its first split on dimension 0 (unpadded, one "
                               "group) and \"second_dim\" (1 to %d), \"second_parts\" (2 or more, dividing that "
                               "dimension) and \"second_index\" (below second_parts)",
                               what, t->name, t->ndim - 1);
    s->second = (plait_shard){(int32_t)dim, (int32_t)parts, (int32_t)index, 1, t->shape[dim]};
    return PLAIT_OK;
}

/* One slice record of tensor `t`, checked against its shape and files
 * (version 2: with its second split, when it has one). */
static plait_status parse_slice(const plait_json *v, const plait_ckpt_index *ix, const plait_ckpt_index_tensor *t,
                                const char *what, int64_t version, plait_ckpt_slice *s, size_t *real) {
    int64_t file, dim, parts, index, groups, padded, begin, end;
    const int keys = v && v->type == PLAIT_JSON_OBJECT ? (int)v->count : 0;
    if (!v || v->type != PLAIT_JSON_OBJECT || (keys != 8 && (version < 2 || keys != 11)) ||
        !int_in(v, "file", 0, ix->n_files - 1, &file) || !int_in(v, "dim", -1, t->ndim - 1, &dim) ||
        !int_in(v, "parts", 1, INT32_MAX, &parts) || !int_in(v, "index", 0, parts - 1, &index) ||
        !int_in(v, "groups", 1, INT32_MAX, &groups) || !int_in(v, "padded_len", 0, INT64_MAX, &padded) ||
        !int_in(v, "begin", 0, INT64_MAX, &begin) || !int_in(v, "end", begin, INT64_MAX, &end))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s: a slice must be {\"file\" (0 to %d), \"dim\" (-1 to %d), \"parts\", "
                               "\"index\" (below parts), \"groups\", \"padded_len\", \"begin\", \"end\" (>= begin)}",
                               what, t->name, ix->n_files - 1, t->ndim - 1);
    *s = (plait_ckpt_slice){.file = (int32_t)file,
                            .shard = {(int32_t)dim, (int32_t)parts, (int32_t)index, (int32_t)groups, padded},
                            .second = {-1, 1, 0, 1, 0},
                            .begin = (uint64_t)begin,
                            .end = (uint64_t)end,
                            .data = NULL};
    if (keys == 11) {
        plait_status st = parse_second(v, t, what, s);
        if (st != PLAIT_OK) return st;
    }
    size_t n;
    const plait_status nst = plait_shard_numel(t->ndim, t->shape, &s->shard, &n);
    if (nst == PLAIT_OK && cut_twice(s)) n /= (size_t)s->second.parts;
    if (nst != PLAIT_OK || (uint64_t)end > n)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s: a slice in %s (dim %lld, %lld parts, groups %lld, padded_len %lld, "
                               "elements [%lld, %lld)) does not fit its shape",
                               what, t->name, ix->files[file], (long long)dim, (long long)parts, (long long)groups,
                               (long long)padded, (long long)begin, (long long)end);
    if (cut_twice(s)) *real += (size_t)(s->end - s->begin); /* both splits unpadded: every element real */
    else (void)plait_shard_walk(t->ndim, t->shape, &s->shard, s->begin, s->end - s->begin, count_real, real);
    return PLAIT_OK;
}

static plait_status parse_tensor(const plait_json *v, const plait_ckpt_index *ix, const char *what, int64_t version,
                                 plait_ckpt_index_tensor *t) {
    t->name = v->key;
    const plait_json *dtype = plait_json_get(v, "dtype"), *shape = plait_json_get(v, "shape");
    const plait_json *slices = plait_json_get(v, "slices");
    if (v->type != PLAIT_JSON_OBJECT || v->count != 3 || !dtype || dtype->type != PLAIT_JSON_STRING ||
        strcmp(dtype->str, "F32") != 0 || !shape || shape->type != PLAIT_JSON_ARRAY ||
        shape->count > PLAIT_ST_MAX_DIMS || !slices || slices->type != PLAIT_JSON_ARRAY || slices->count == 0 ||
        slices->count > 1u << 20)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s must be {\"dtype\": \"F32\", \"shape\": [at most %d sizes], "
                               "\"slices\": [one or more]}",
                               what, t->name, PLAIT_ST_MAX_DIMS);
    t->numel = 1;
    for (const plait_json *d = shape->child; d; d = d->next) {
        if (d->type != PLAIT_JSON_INT || d->num < 0 || d->num > (int64_t)1 << 40 ||
            (d->num && t->numel > ((size_t)1 << 48) / (size_t)d->num))
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: tensor %s: shape entries must be sizes (0 to 2^40, "
                                   "2^48 elements in all)",
                                   what, t->name);
        t->shape[t->ndim++] = d->num;
        t->numel *= (size_t)d->num;
    }
    t->slices = calloc(slices->count, sizeof *t->slices);
    if (!t->slices) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", what);
    size_t real = 0;
    for (const plait_json *s = slices->child; s; s = s->next) {
        plait_status st = parse_slice(s, ix, t, what, version, &t->slices[t->n_slices++], &real);
        if (st != PLAIT_OK) return st;
    }
    if (real != t->numel)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s: its slices hold %zu elements but its shape has %zu (the index does "
                               "not match the save: slices missing or repeated)",
                               what, t->name, real, t->numel);
    return PLAIT_OK;
}

static plait_status parse_body(const plait_json *root, const char *what, plait_ckpt_index *ix) {
    const plait_json *fmt = plait_json_get(root, "format"), *files = plait_json_get(root, "files");
    const plait_json *tensors = plait_json_get(root, "tensors");
    int64_t version, step;
    if (!root || root->type != PLAIT_JSON_OBJECT || root->count != 5 || !fmt || fmt->type != PLAIT_JSON_STRING ||
        strcmp(fmt->str, PLAIT_CKPT_INDEX_FORMAT) != 0 || !int_in(root, "format_version", 0, INT64_MAX, &version) ||
        !int_in(root, "step", 0, INT64_MAX, &step) || !files || files->type != PLAIT_JSON_ARRAY ||
        files->count > 1u << 20 || !tensors || tensors->type != PLAIT_JSON_OBJECT)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: not a plait sharded checkpoint index (it must hold \"format\": \"%s\", "
                               "\"format_version\", \"step\", \"files\" and \"tensors\")",
                               what, PLAIT_CKPT_INDEX_FORMAT);
    if (version != PLAIT_CKPT_INDEX_VERSION && version != PLAIT_CKPT_INDEX_VERSION_TWICE)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: format_version %lld is not %d or %d (written by another plait)",
                               what, (long long)version, PLAIT_CKPT_INDEX_VERSION, PLAIT_CKPT_INDEX_VERSION_TWICE);
    ix->step = step;
    ix->files = calloc(files->count + 1, sizeof *ix->files);
    ix->tensors = calloc(tensors->count + 1, sizeof *ix->tensors);
    if (!ix->files || !ix->tensors) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", what);
    for (const plait_json *f = files->child; f; f = f->next) {
        /* a file name of the checkpoint directory itself, never a path */
        if (f->type != PLAIT_JSON_STRING || strncmp(f->str, PLAIT_CKPT_SHARD_PREFIX, 6) != 0 || strchr(f->str, '/') ||
            f->str_len != strlen(f->str) || f->str_len > 255)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: \"files\" entry %d is not a shard file name (shard-<rank>.safetensors)", what,
                                   ix->n_files);
        for (int32_t k = 0; k < ix->n_files; k++)
            if (strcmp(ix->files[k], f->str) == 0)
                return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: file %s is listed twice", what, f->str);
        ix->files[ix->n_files++] = f->str;
    }
    for (const plait_json *t = tensors->child; t; t = t->next) {
        plait_status st = parse_tensor(t, ix, what, version, &ix->tensors[ix->n_tensors++]);
        if (st != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

plait_status plait_ckpt_index_parse(const char *text, size_t len, const char *what, plait_ckpt_index **out) {
    *out = NULL;
    plait_ckpt_index *ix = calloc(1, sizeof *ix);
    if (!ix) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", what);
    plait_status st = plait_json_parse(text, len, what, &ix->doc);
    if (st == PLAIT_OK) st = parse_body(plait_json_root(ix->doc), what, ix);
    if (st != PLAIT_OK) {
        plait_ckpt_index_free(ix);
        return st;
    }
    *out = ix;
    return PLAIT_OK;
}

typedef struct read_ctx {
    const plait_ckpt_index_tensor *t;
    const char *what;
    float *dst;
    size_t base;
    int32_t last; /* the slice that held the previous run: the next most likely holds it too */
    plait_status st;
} read_ctx;

/* plait_shard_locate for a slice, cut once or twice: a slice cut twice
 * holds global element `at` when the first split's block does and the
 * block's element lies in the second's part, the run the shorter one. */
static int locate(const plait_ckpt_index_tensor *t, const plait_ckpt_slice *s, size_t at, size_t *local, size_t *run) {
    if (!cut_twice(s)) return plait_shard_locate(t->ndim, t->shape, &s->shard, at, local, run);
    size_t in_block, run1;
    if (!plait_shard_locate(t->ndim, t->shape, &s->shard, at, &in_block, &run1)) return 0;
    int64_t block[PLAIT_ST_MAX_DIMS];
    first_block(t, s, block);
    if (!plait_shard_locate(t->ndim, block, &s->second, in_block, local, run)) return 0;
    if (run1 < *run) *run = run1;
    return 1;
}

/* Elements [at, at+n) of the global tensor into out, from whichever slices hold them. */
static plait_status gather_run(read_ctx *c, size_t at, size_t n, float *out) {
    const plait_ckpt_index_tensor *t = c->t;
    while (n) {
        int32_t k = c->last, found = 0;
        size_t local = 0, run = 0;
        for (int32_t tries = 0; tries < t->n_slices && !found; tries++, k = (k + 1) % t->n_slices) {
            const plait_ckpt_slice *s = &t->slices[k];
            found = locate(t, s, at, &local, &run) && local >= s->begin && local < s->end;
            if (found) break;
        }
        if (!found)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: no slice of tensor %s holds its element %zu (the index does not match the "
                                   "save)",
                                   c->what, t->name, at);
        const plait_ckpt_slice *s = &t->slices[k];
        const float *src = s->data;
        if (!src)
            return plait_set_error(PLAIT_ERR_INTERNAL, "%s: the file of a slice of tensor %s is not open", c->what,
                                   t->name);
        size_t m = run < n ? run : n;
        if (m > s->end - local) m = (size_t)(s->end - local);
        memcpy(out, src + (local - s->begin), m * sizeof *out);
        c->last = k;
        at += m, out += m, n -= m;
    }
    return PLAIT_OK;
}

static void read_run(void *ctx, size_t local_at, long long global_at, size_t n) {
    read_ctx *c = ctx;
    float *out = c->dst + (local_at - c->base);
    if (c->st != PLAIT_OK) return;
    if (global_at < 0) memset(out, 0, n * sizeof *out);
    else c->st = gather_run(c, (size_t)global_at, n, out);
}

plait_status plait_ckpt_index_read(const plait_ckpt_index_tensor *t, const plait_shard *want, size_t offset,
                                   size_t count, float *dst, const char *what) {
    read_ctx c = {.t = t, .what = what, .dst = dst, .base = offset, .st = PLAIT_OK};
    plait_status st = plait_shard_walk(t->ndim, t->shape, want, offset, count, read_run, &c);
    return st != PLAIT_OK ? st : c.st;
}
