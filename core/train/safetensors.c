#include "train/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "train/checkpoint_fs.h"
#include "train/safetensors_crc32c.h"
#include "train/safetensors_json.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; plait reads them on little-endian hosts only"
#endif

#define CRC_PREFIX "plait.crc32c."
#define HEADER_CRC_KEY "plait.header_crc32c"

/* ======================================================================== */
/* writer                                                                    */
/* ======================================================================== */

typedef struct wtensor {
    char *name;
    int32_t ndim;
    int64_t shape[PLAIT_ST_MAX_DIMS];
    size_t numel;
    uint64_t offset;
    size_t written;
    uint32_t crc;
} wtensor;

struct plait_st_writer {
    char path[PATH_MAX];
    char tmp[PATH_MAX];
    int fd;
    wtensor *t;
    size_t n, cap;
    char **meta_key, **meta_val;
    size_t n_meta, meta_cap;
    const char *format;      /* value of "format" */
    int header_written;
    size_t header_len;       /* N, padded */
    uint64_t data_bytes;
    int finished;
    size_t hint;             /* last tensor written, to find the next quickly */
    int failed;              /* a write failed: the file is unusable */
};

plait_status plait_st_writer_create(const char *path, plait_st_writer **out) {
    *out = NULL;
    plait_st_writer *w = calloc(1, sizeof *w);
    if (!w) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory creating %s", path);
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", path) >= sizeof w->path ||
        (size_t)snprintf(w->tmp, sizeof w->tmp, "%s.tmp", path) >= sizeof w->tmp) {
        free(w);
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "path too long: %s", path);
    }
    w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) {
        plait_status st = plait_set_error(PLAIT_ERR_SYSTEM, "creating %s: %s", w->tmp, strerror(errno));
        free(w);
        return st;
    }
    w->format = "pt";
    *out = w;
    return PLAIT_OK;
}

const char *plait_st_writer_temp_path(const plait_st_writer *w) { return w->tmp; }

static plait_status too_late(const plait_st_writer *w, const char *what) {
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "%s: %s after tensor data was written (declare everything first)", w->path, what);
}

plait_status plait_st_writer_metadata(plait_st_writer *w, const char *key, const char *value) {
    if (w->header_written) return too_late(w, "metadata");
    if (strncmp(key, CRC_PREFIX, strlen(CRC_PREFIX)) == 0 || strcmp(key, HEADER_CRC_KEY) == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: metadata key \"%s\" is reserved", w->path, key);
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta_key[i], key) == 0)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: metadata key \"%s\" given twice", w->path, key);
    if (w->n_meta == w->meta_cap) {
        size_t cap = w->meta_cap ? 2 * w->meta_cap : 8;
        char **k = realloc(w->meta_key, cap * sizeof *k);
        if (k) w->meta_key = k;
        char **v = realloc(w->meta_val, cap * sizeof *v);
        if (v) w->meta_val = v;
        if (!k || !v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        w->meta_cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    w->meta_key[w->n_meta] = k;
    w->meta_val[w->n_meta++] = v;
    if (strcmp(key, "format") == 0) w->format = NULL; /* the user's entry replaces the default */
    return PLAIT_OK;
}

static wtensor *find_wtensor(plait_st_writer *w, const char *name) {
    for (size_t k = 0; k < w->n; k++) {
        size_t i = (w->hint + k) % w->n;
        if (strcmp(w->t[i].name, name) == 0) {
            w->hint = i;
            return &w->t[i];
        }
    }
    return NULL;
}

int plait_st_writer_has(plait_st_writer *w, const char *name) { return w && find_wtensor(w, name) != NULL; }

plait_status plait_st_writer_declare(plait_st_writer *w, const char *name, int32_t ndim,
                                     const int64_t *shape) {
    if (w->header_written) return too_late(w, "declaring a tensor");
    if (!name || !*name || strcmp(name, "__metadata__") == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: invalid tensor name \"%s\"", w->path, name ? name : "");
    if (ndim < 0 || ndim > PLAIT_ST_MAX_DIMS)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s has %d dims (0..%d allowed)", w->path,
                               name, ndim, PLAIT_ST_MAX_DIMS);
    if (find_wtensor(w, name))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s declared twice", w->path, name);
    size_t numel = 1;
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > SIZE_MAX / 4 / (size_t)shape[d]))
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s has an invalid shape", w->path, name);
        numel *= (size_t)shape[d];
    }
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        wtensor *t = realloc(w->t, cap * sizeof *t);
        if (!t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        w->t = t;
        w->cap = cap;
    }
    wtensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    t->ndim = ndim;
    if (ndim > 0) memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    t->numel = numel;
    t->offset = w->data_bytes;
    w->data_bytes += 4 * (uint64_t)numel;
    w->n++;
    return PLAIT_OK;
}

/* The header text for the current state; header_crc is the value written for
 * plait.header_crc32c. Padded with spaces so 8 + length is a multiple of 8. */
static int build_header(const plait_st_writer *w, uint32_t header_crc, plait_jbuf *b) {
    plait_jbuf_puts(b, "{\"__metadata__\":{");
    int first = 1;
    if (w->format) {
        plait_jbuf_puts(b, "\"format\":");
        plait_jbuf_string(b, w->format);
        first = 0;
    }
    for (size_t i = 0; i < w->n_meta; i++) {
        if (!first) plait_jbuf_puts(b, ",");
        first = 0;
        plait_jbuf_string(b, w->meta_key[i]);
        plait_jbuf_puts(b, ":");
        plait_jbuf_string(b, w->meta_val[i]);
    }
    for (size_t i = 0; i < w->n; i++) {
        if (!first) plait_jbuf_puts(b, ",");
        first = 0;
        char key[16 + 4096];
        snprintf(key, sizeof key, CRC_PREFIX "%s", w->t[i].name);
        plait_jbuf_string(b, key);
        plait_jbuf_printf(b, ":\"%08x\"", w->t[i].crc);
    }
    if (!first) plait_jbuf_puts(b, ",");
    plait_jbuf_printf(b, "\"" HEADER_CRC_KEY "\":\"%08x\"}", header_crc);
    for (size_t i = 0; i < w->n; i++) {
        const wtensor *t = &w->t[i];
        plait_jbuf_puts(b, ",");
        plait_jbuf_string(b, t->name);
        plait_jbuf_puts(b, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int32_t d = 0; d < t->ndim; d++) plait_jbuf_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        plait_jbuf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->offset,
                          (unsigned long long)(t->offset + 4 * (uint64_t)t->numel));
    }
    plait_jbuf_puts(b, "}");
    while ((8 + b->len) % 8) plait_jbuf_puts(b, " ");
    return b->failed ? -1 : 0;
}

static plait_status write_header(plait_st_writer *w, uint32_t header_crc, uint32_t *crc_of_zeroed) {
    plait_jbuf b = {0};
    if (build_header(w, header_crc, &b) != 0) {
        plait_jbuf_free(&b);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory building the header of %s", w->path);
    }
    if (w->header_written && b.len != w->header_len) {
        plait_jbuf_free(&b);
        return plait_set_error(PLAIT_ERR_INTERNAL, "%s: header length changed while writing", w->path);
    }
    if (crc_of_zeroed) *crc_of_zeroed = plait_crc32c(0, b.data, b.len);
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)b.len >> (8 * i));
    plait_status st = plait_fs_pwrite_all(w->fd, len8, 8, 0, w->tmp);
    if (st == PLAIT_OK) st = plait_fs_pwrite_all(w->fd, b.data, b.len, 8, w->tmp);
    if (st == PLAIT_OK) {
        w->header_len = b.len;
        w->header_written = 1;
    }
    plait_jbuf_free(&b);
    return st;
}

plait_status plait_st_writer_write(plait_st_writer *w, const char *name, const float *data, size_t count) {
    if (w->finished || w->failed)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: write after finish or after an error", w->path);
    wtensor *t = find_wtensor(w, name);
    if (!t) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s was not declared", w->path, name);
    if (count > t->numel - t->written)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s: %zu more elements exceed its %zu",
                               w->path, name, count, t->numel);
    if (!w->header_written) {
        plait_status st = write_header(w, 0, NULL);
        if (st != PLAIT_OK) {
            w->failed = 1;
            return st;
        }
    }
    uint64_t pos = 8 + w->header_len + t->offset + 4 * (uint64_t)t->written;
    plait_status st = plait_fs_pwrite_all(w->fd, data, 4 * count, pos, w->tmp);
    if (st != PLAIT_OK) {
        w->failed = 1;
        return st;
    }
    t->crc = plait_crc32c(t->crc, data, 4 * count);
    t->written += count;
    return PLAIT_OK;
}

plait_status plait_st_writer_finish(plait_st_writer *w, uint64_t *file_bytes) {
    if (w->finished) return PLAIT_OK;
    if (w->failed) return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: finish after a failed write", w->path);
    for (size_t i = 0; i < w->n; i++)
        if (w->t[i].written != w->t[i].numel)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s has %zu of its %zu elements written",
                                   w->path, w->t[i].name, w->t[i].written, w->t[i].numel);
    /* Pass 1 sets the length (and computes the CRC with the field zeroed);
     * pass 2 writes the same bytes with the CRC filled in. */
    uint32_t header_crc;
    plait_status st = write_header(w, 0, &header_crc);
    if (st == PLAIT_OK) st = write_header(w, header_crc, NULL);
    uint64_t total = 8 + w->header_len + w->data_bytes;
    if (st == PLAIT_OK && ftruncate(w->fd, (off_t)total) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "sizing %s: %s", w->tmp, strerror(errno));
    if (st == PLAIT_OK && fsync(w->fd) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "syncing %s: %s", w->tmp, strerror(errno));
    if (st == PLAIT_OK) {
        int rc = close(w->fd);
        w->fd = -1;
        if (rc != 0) st = plait_set_error(PLAIT_ERR_SYSTEM, "closing %s: %s", w->tmp, strerror(errno));
    }
    if (st != PLAIT_OK) {
        w->failed = 1;
        return st;
    }
    w->finished = 1;
    if (file_bytes) *file_bytes = total;
    return PLAIT_OK;
}

static void writer_free(plait_st_writer *w) {
    if (w->fd >= 0) close(w->fd);
    for (size_t i = 0; i < w->n; i++) free(w->t[i].name);
    for (size_t i = 0; i < w->n_meta; i++) {
        free(w->meta_key[i]);
        free(w->meta_val[i]);
    }
    free(w->t);
    free(w->meta_key);
    free(w->meta_val);
    free(w);
}

plait_status plait_st_writer_commit(plait_st_writer *w) {
    if (!w->finished) {
        plait_status st = plait_st_writer_finish(w, NULL);
        if (st != PLAIT_OK) return st;
    }
    plait_status st = plait_fs_rename_durable(w->tmp, w->path);
    if (st != PLAIT_OK) return st;
    writer_free(w);
    return PLAIT_OK;
}

void plait_st_writer_abort(plait_st_writer *w) {
    if (!w) return;
    unlink(w->tmp);
    writer_free(w);
}

void plait_st_writer_abandon(plait_st_writer *w) {
    if (w) writer_free(w);
}

/* ======================================================================== */
/* reader                                                                    */
/* ======================================================================== */

struct plait_st_file {
    char path[PATH_MAX];
    const uint8_t *map;
    size_t map_bytes;
    size_t header_len;
    plait_json_doc *doc;
    const plait_json *meta;   /* __metadata__ object or NULL */
    plait_st_tensor *t;       /* by offset */
    size_t n;
    size_t *by_name;          /* indices into t sorted by name */
};

const char *plait_st_path(const plait_st_file *f) { return f->path; }
size_t plait_st_count(const plait_st_file *f) { return f->n; }
const plait_st_tensor *plait_st_tensor_at(const plait_st_file *f, size_t i) { return i < f->n ? &f->t[i] : NULL; }

/* qsort has no context argument: the tensors being sorted, per thread. */
static _Thread_local const plait_st_tensor *sort_tensors;

static int cmp_offset(const void *a, const void *b) {
    const plait_st_tensor *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : (x->bytes > y->bytes) - (x->bytes < y->bytes);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(sort_tensors[*(const size_t *)a].name, sort_tensors[*(const size_t *)b].name);
}

const plait_st_tensor *plait_st_find(const plait_st_file *f, const char *name) {
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        int c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

const char *plait_st_metadata(const plait_st_file *f, const char *key) {
    const plait_json *v = plait_json_get(f->meta, key);
    return v ? v->str : NULL;
}

void plait_st_close(plait_st_file *f) {
    if (!f) return;
    if (f->map) munmap((void *)f->map, f->map_bytes);
    plait_json_free(f->doc);
    free(f->t);
    free(f->by_name);
    free(f);
}

static plait_status bad(const plait_st_file *f, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static plait_status bad(const plait_st_file *f, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s: %s; the file is damaged or not a safetensors file, "
                           "refusing to load it", f->path, msg);
}

static int parse_hex32(const char *s, uint32_t *out) {
    if (strlen(s) != 8) return -1;
    uint32_t v = 0;
    for (int i = 0; i < 8; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static plait_status parse_tensor(plait_st_file *f, const plait_json *e, plait_st_tensor *t) {
    if (e->type != PLAIT_JSON_OBJECT) return bad(f, "header entry \"%s\" is not an object", e->key);
    const plait_json *dtype = NULL, *shape = NULL, *offs = NULL;
    for (const plait_json *m = e->child; m; m = m->next) {
        if (strcmp(m->key, "dtype") == 0) dtype = m;
        else if (strcmp(m->key, "shape") == 0) shape = m;
        else if (strcmp(m->key, "data_offsets") == 0) offs = m;
        else return bad(f, "tensor %s has an unknown field \"%s\"", e->key, m->key);
    }
    if (!dtype || !shape || !offs) return bad(f, "tensor %s lacks dtype, shape or data_offsets", e->key);
    if (dtype->type != PLAIT_JSON_STRING) return bad(f, "tensor %s: dtype is not a string", e->key);
    if (strcmp(dtype->str, "F32") != 0)
        return bad(f, "tensor %s has dtype %s; plait reads float32 (F32) tensors only", e->key, dtype->str);
    if (shape->type != PLAIT_JSON_ARRAY) return bad(f, "tensor %s: shape is not an array", e->key);
    if (shape->count > PLAIT_ST_MAX_DIMS)
        return bad(f, "tensor %s has %zu dimensions (at most %d)", e->key, shape->count, PLAIT_ST_MAX_DIMS);
    t->name = e->key;
    t->ndim = (int32_t)shape->count;
    uint64_t numel = 1;
    int d = 0;
    for (const plait_json *s = shape->child; s; s = s->next, d++) {
        if (s->type != PLAIT_JSON_INT || s->num < 0)
            return bad(f, "tensor %s: shape[%d] is not a non-negative integer", e->key, d);
        t->shape[d] = s->num;
        if (s->num && numel > (UINT64_MAX / 4) / (uint64_t)s->num)
            return bad(f, "tensor %s: shape overflows", e->key);
        numel *= (uint64_t)s->num;
    }
    if (offs->type != PLAIT_JSON_ARRAY || offs->count != 2 || offs->child->type != PLAIT_JSON_INT ||
        offs->child->next->type != PLAIT_JSON_INT)
        return bad(f, "tensor %s: data_offsets is not a pair of integers", e->key);
    int64_t begin = offs->child->num, end = offs->child->next->num;
    if (begin < 0 || end < begin) return bad(f, "tensor %s: data_offsets [%lld, %lld] are not an interval",
                                             e->key, (long long)begin, (long long)end);
    if ((uint64_t)(end - begin) != 4 * numel)
        return bad(f, "tensor %s: data_offsets [%lld, %lld] hold %lld bytes but its shape needs %llu",
                   e->key, (long long)begin, (long long)end, (long long)(end - begin),
                   (unsigned long long)(4 * numel));
    if (numel > SIZE_MAX) return bad(f, "tensor %s is too large for this machine", e->key);
    t->numel = (size_t)numel;
    t->offset = (uint64_t)begin;
    t->bytes = 4 * numel;
    return PLAIT_OK;
}

static plait_status verify_header_crc(plait_st_file *f, const plait_json *v) {
    uint32_t want;
    if (v->type != PLAIT_JSON_STRING || parse_hex32(v->str, &want) != 0)
        return bad(f, "metadata " HEADER_CRC_KEY " is not 8 lower-case hex digits");
    /* The value's 8 digits sit right after its opening quote (no escapes in hex). */
    char *copy = malloc(f->header_len);
    if (!copy) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory checking %s", f->path);
    memcpy(copy, f->map + 8, f->header_len);
    memset(copy + v->pos + 1, '0', 8);
    uint32_t got = plait_crc32c(0, copy, f->header_len);
    free(copy);
    if (got != want)
        return bad(f, "header checksum mismatch (stored %08x, computed %08x): the JSON header was altered",
                   want, got);
    return PLAIT_OK;
}

plait_status plait_st_verify_tensor(const plait_st_file *f, const plait_st_tensor *t) {
    if (!t->has_crc) return PLAIT_OK;
    uint32_t got = plait_crc32c(0, t->data, (size_t)t->bytes);
    if (got != t->crc)
        return bad(f, "tensor %s: checksum mismatch (stored %08x, computed %08x): its data was altered",
                   t->name, t->crc, got);
    return PLAIT_OK;
}

static plait_status parse_file(plait_st_file *f, unsigned flags) {
    if (f->map_bytes < 8) return bad(f, "%zu bytes is shorter than the 8-byte header length", f->map_bytes);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)f->map[i] << (8 * i);
    if (n > PLAIT_ST_MAX_HEADER) return bad(f, "header length %llu exceeds the %u-byte limit", (unsigned long long)n,
                                            PLAIT_ST_MAX_HEADER);
    if (n < 2 || 8 + n > f->map_bytes)
        return bad(f, "header length %llu does not fit in the file's %zu bytes (truncated?)",
                   (unsigned long long)n, f->map_bytes);
    f->header_len = (size_t)n;
    const char *h = (const char *)f->map + 8;
    if (h[0] != '{') return bad(f, "the header does not start with '{'");
    /* Trailing padding is spaces only; the JSON ends at the last '}'. */
    size_t json_len = f->header_len;
    while (json_len > 0 && h[json_len - 1] == ' ') json_len--;
    char what[PATH_MAX + 16];
    snprintf(what, sizeof what, "%s: JSON header", f->path);
    plait_status st = plait_json_parse(h, json_len, what, &f->doc);
    if (st != PLAIT_OK) return plait_wrap_error(st, "refusing to load %s", f->path);
    const plait_json *root = plait_json_root(f->doc);
    if (root->type != PLAIT_JSON_OBJECT) return bad(f, "the header is not a JSON object");
    if (root->end != json_len) return bad(f, "bytes after the header's JSON object are not spaces");

    f->t = calloc(root->count ? root->count : 1, sizeof *f->t);
    if (!f->t) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", f->path);
    for (const plait_json *e = root->child; e; e = e->next) {
        if (strcmp(e->key, "__metadata__") == 0) {
            if (e->type != PLAIT_JSON_OBJECT) return bad(f, "__metadata__ is not an object");
            for (const plait_json *m = e->child; m; m = m->next)
                if (m->type != PLAIT_JSON_STRING) return bad(f, "__metadata__ value \"%s\" is not a string", m->key);
            f->meta = e;
            continue;
        }
        st = parse_tensor(f, e, &f->t[f->n]);
        if (st != PLAIT_OK) return st;
        f->n++;
    }
    /* Data section: exactly covered, in offset order, nothing left over. */
    qsort(f->t, f->n, sizeof *f->t, cmp_offset);
    uint64_t data_start = 8 + f->header_len, pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        plait_st_tensor *t = &f->t[i];
        if (t->bytes && (data_start + t->offset) % 4)
            return bad(f, "tensor %s starts at byte %llu, not 4-byte aligned (plait maps float data in place)",
                       t->name, (unsigned long long)(data_start + t->offset));
        if (t->offset != pos)
            return bad(f, "tensor %s starts at data byte %llu but the previous tensor ends at %llu "
                          "(tensors must cover the data without gaps or overlaps)",
                       t->name, (unsigned long long)t->offset, (unsigned long long)pos);
        pos += t->bytes;
    }
    if (data_start + pos != f->map_bytes) {
        if (data_start + pos > f->map_bytes)
            return bad(f, "the header describes %llu bytes of tensor data but the file holds %llu "
                          "(truncated file)",
                       (unsigned long long)pos, (unsigned long long)(f->map_bytes - data_start));
        return bad(f, "%llu bytes after the last tensor (the file is longer than its header describes)",
                   (unsigned long long)(f->map_bytes - data_start - pos));
    }
    for (size_t i = 0; i < f->n; i++) f->t[i].data = (const float *)(f->map + data_start + f->t[i].offset);

    f->by_name = malloc((f->n ? f->n : 1) * sizeof *f->by_name);
    if (!f->by_name) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", f->path);
    for (size_t i = 0; i < f->n; i++) f->by_name[i] = i;
    sort_tensors = f->t;
    qsort(f->by_name, f->n, sizeof *f->by_name, cmp_name);
    sort_tensors = NULL;

    /* Checksums written by plait. */
    const plait_json *hcrc = plait_json_get(f->meta, HEADER_CRC_KEY);
    if (f->meta)
        for (const plait_json *m = f->meta->child; m; m = m->next) {
            if (strncmp(m->key, CRC_PREFIX, strlen(CRC_PREFIX)) != 0) continue;
            const char *tname = m->key + strlen(CRC_PREFIX);
            plait_st_tensor *t = (plait_st_tensor *)plait_st_find(f, tname);
            if (!t) return bad(f, "metadata has a checksum for tensor %s, which the file does not hold", tname);
            if (parse_hex32(m->str, &t->crc) != 0)
                return bad(f, "metadata %s is not 8 lower-case hex digits", m->key);
            t->has_crc = 1;
        }
    /* A file with any plait checksum must have all of them: a damaged key
     * must not turn verification off. */
    int any_crc = 0;
    for (size_t i = 0; i < f->n; i++) any_crc |= f->t[i].has_crc;
    if (any_crc && !hcrc) return bad(f, "metadata " HEADER_CRC_KEY " is missing although tensors have checksums");
    if (hcrc)
        for (size_t i = 0; i < f->n; i++)
            if (!f->t[i].has_crc) return bad(f, "tensor %s has no checksum although the file has plait checksums",
                                             f->t[i].name);
    if (flags & PLAIT_ST_VERIFY) {
        if (hcrc) {
            st = verify_header_crc(f, hcrc);
            if (st != PLAIT_OK) return st;
        }
        for (size_t i = 0; i < f->n; i++) {
            st = plait_st_verify_tensor(f, &f->t[i]);
            if (st != PLAIT_OK) return st;
        }
    }
    return PLAIT_OK;
}

plait_status plait_st_open(const char *path, unsigned flags, plait_st_file **out) {
    *out = NULL;
    plait_st_file *f = calloc(1, sizeof *f);
    if (!f) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory opening %s", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        plait_status st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
        free(f);
        return st;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        free(f);
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s is not a readable regular file", path);
    }
    f->map_bytes = (size_t)sb.st_size;
    if (f->map_bytes > 0) {
        void *p = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            free(f);
            return plait_set_error(PLAIT_ERR_SYSTEM, "cannot map %s: %s", path, strerror(err));
        }
        f->map = p;
    }
    close(fd);
    plait_status st = parse_file(f, flags);
    if (st != PLAIT_OK) {
        plait_st_close(f);
        return st;
    }
    *out = f;
    return PLAIT_OK;
}
