/* The safetensors writer (safetensors.h); the reader is in safetensors.c. */
#include "checkpoint/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/out_file.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/safetensors_json.h"
#include "checkpoint/string_pairs.h"

#define CRC_PREFIX PLAIT_ST_CRC_PREFIX
#define HEADER_CRC_KEY PLAIT_ST_HEADER_CRC_KEY

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
    plait_string_pairs meta; /* the header's "__metadata__", besides "format" */
    const char *format;      /* value of "format" */
    int header_written;
    size_t header_len;       /* N, padded */
    uint64_t data_bytes;
    int finished;
    size_t hint;             /* last tensor written, to find the next quickly */
    int failed;              /* a write failed: the file is unusable */
    plait_st_dtype dtype;    /* every tensor's */
    unsigned esize;          /* its bytes an element */
};

static const char *dtype_name(plait_st_dtype d) {
    return d == PLAIT_ST_BF16 ? "BF16" : d == PLAIT_ST_F16 ? "F16" : "F32";
}

plait_status plait_st_writer_create(const char *path, plait_st_writer **out) {
    *out = NULL;
    plait_st_writer *w = calloc(1, sizeof *w);
    if (!w) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory creating %s", path);
    if ((size_t)snprintf(w->path, sizeof w->path, "%s", path) >= sizeof w->path) {
        free(w);
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "path too long: %s", path);
    }
    plait_status st = plait_out_temp(path, w->tmp, sizeof w->tmp, &w->fd);
    if (st != PLAIT_OK) {
        free(w);
        return st;
    }
    w->format = "pt";
    w->esize = 4;
    *out = w;
    return PLAIT_OK;
}

plait_status plait_st_writer_dtype(plait_st_writer *w, plait_st_dtype dtype) {
    if (w->n > 0 || w->header_written)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: the dtype is set before any tensor is declared", w->path);
    if (dtype != PLAIT_ST_F32 && dtype != PLAIT_ST_BF16 && dtype != PLAIT_ST_F16)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: dtype %d is none of F32, BF16, F16", w->path, (int)dtype);
    w->dtype = dtype;
    w->esize = dtype == PLAIT_ST_F32 ? 4 : 2;
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
    if (plait_string_pairs_find(&w->meta, key) >= 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: metadata key \"%s\" given twice", w->path, key);
    plait_status st = plait_string_pairs_append(&w->meta, key, value);
    if (st != PLAIT_OK) return st;
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
    if (!name || !*name || strcmp(name, "__metadata__") == 0 || strlen(name) > PLAIT_ST_MAX_NAME)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: invalid tensor name \"%.64s\" (empty, reserved, or "
                               "longer than %d bytes)", w->path, name ? name : "", PLAIT_ST_MAX_NAME);
    if (ndim < 0 || ndim > PLAIT_ST_MAX_DIMS)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s has %d dims (0..%d allowed)", w->path,
                               name, ndim, PLAIT_ST_MAX_DIMS);
    if (find_wtensor(w, name))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s declared twice", w->path, name);
    size_t numel = 1;
    for (int32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && numel > SIZE_MAX / w->esize / (size_t)shape[d]))
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
    w->data_bytes += w->esize * (uint64_t)numel;
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
    for (size_t i = 0; i < w->meta.n; i++) {
        if (!first) plait_jbuf_puts(b, ",");
        first = 0;
        plait_jbuf_string(b, w->meta.key[i]);
        plait_jbuf_puts(b, ":");
        plait_jbuf_string(b, w->meta.val[i]);
    }
    for (size_t i = 0; i < w->n; i++) {
        if (!first) plait_jbuf_puts(b, ",");
        first = 0;
        char key[sizeof CRC_PREFIX + PLAIT_ST_MAX_NAME];
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
        plait_jbuf_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", dtype_name(w->dtype));
        for (int32_t d = 0; d < t->ndim; d++) plait_jbuf_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        plait_jbuf_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->offset,
                          (unsigned long long)(t->offset + w->esize * (uint64_t)t->numel));
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

/* x as bfloat16: the top half of its bits, rounded to nearest, ties to
 * even (a NaN kept a quiet NaN of its sign). */
static uint16_t to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* x as IEEE float16, rounded to nearest, ties to even; *over set where a
 * finite x rounds past 65504 (infinity is stored). */
static uint16_t to_f16(float x, int *over) {
    uint32_t u;
    memcpy(&u, &x, 4);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  /* NaN */
    if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u); /* infinity */
    if (a >= 0x477ff000u) {                                  /* 65520 and up round to infinity */
        *over = 1;
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) {           /* normal in float16: 2^-14 and up */
        uint32_t m = a - 0x38000000u; /* the exponent rebased by 127 - 15 */
        m += 0xfffu + ((m >> 13) & 1u);
        return (uint16_t)(sign | (m >> 13));
    }
    if (a < 0x33000000u) return sign; /* below half the least subnormal: zero */
    /* subnormal: the significand with its implicit bit, shifted into place */
    const uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

/* The next `count` elements of t, stored already (w->esize bytes each), at
 * their place in the file and in the tensor's checksum. */
static plait_status put_elements(plait_st_writer *w, wtensor *t, const void *stored, size_t count) {
    const uint64_t pos = 8 + w->header_len + t->offset + w->esize * (uint64_t)t->written;
    plait_status st = plait_fs_pwrite_all(w->fd, stored, w->esize * count, pos, w->tmp);
    if (st != PLAIT_OK) {
        w->failed = 1;
        return st;
    }
    t->crc = plait_crc32c(t->crc, stored, w->esize * count);
    t->written += count;
    return PLAIT_OK;
}

/* The next `count` elements of t, converted to the writer's 2-byte dtype
 * a chunk at a time. */
static plait_status write_halves(plait_st_writer *w, wtensor *t, const float *data, size_t count) {
    uint16_t buf[4096];
    while (count > 0) {
        const size_t n = count < 4096 ? count : 4096;
        int over = 0;
        size_t bad = 0;
        for (size_t k = 0; k < n; k++) {
            const int before = over;
            buf[k] = w->dtype == PLAIT_ST_BF16 ? to_bf16(data[k]) : to_f16(data[k], &over);
            if (over && !before) bad = k;
        }
        if (over) {
            w->failed = 1;
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "%s: tensor %s holds %g at element %zu, past float16's range (65504): store it "
                                   "as bfloat16 or float32",
                                   w->path, t->name, (double)data[bad], t->written + bad);
        }
        plait_status st = put_elements(w, t, buf, n);
        if (st != PLAIT_OK) return st;
        data += n;
        count -= n;
    }
    return PLAIT_OK;
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
    return w->dtype == PLAIT_ST_F32 ? put_elements(w, t, data, count) : write_halves(w, t, data, count);
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
    free(w->t);
    plait_string_pairs_free(&w->meta);
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

