#include "checkpoint/safetensors.h"

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
#include "runtime/file_signature.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/safetensors_json.h"
#include "runtime/regular_file.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors files are little-endian; plait reads them on little-endian hosts only"
#endif

#define CRC_PREFIX PLAIT_ST_CRC_PREFIX
#define HEADER_CRC_KEY PLAIT_ST_HEADER_CRC_KEY

/* The reader; the writer is in safetensors_writer.c. */

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
    float *converted;         /* float32 copies of the tensors stored otherwise (PLAIT_ST_CONVERT) */
};

const char *plait_st_path(const plait_st_file *f) { return f->path; }
size_t plait_st_count(const plait_st_file *f) { return f->n; }
uint64_t plait_st_data_start(const plait_st_file *f) { return 8 + (uint64_t)f->header_len; }
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
    free(f->converted);
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

/* The dtypes a reader may meet: bytes per element, and whether plait can
 * convert it to float32. */
static int dtype_size(const char *d, int *floating) {
    static const struct {
        const char *name;
        int size, floating;
    } known[] = {{"F32", 4, 1}, {"F16", 2, 1},  {"BF16", 2, 1}, {"F64", 8, 1}, {"F8_E4M3", 1, 0},
                 {"F8_E5M2", 1, 0}, {"I8", 1, 0}, {"U8", 1, 0},   {"I16", 2, 0}, {"U16", 2, 0},
                 {"I32", 4, 0}, {"U32", 4, 0},  {"I64", 8, 0},  {"U64", 8, 0}, {"BOOL", 1, 0}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(d, known[i].name) == 0) {
            *floating = known[i].floating;
            return known[i].size;
        }
    return 0;
}

/* A valid tensor of a dtype plait does not convert to float32. */
static plait_status not_float(const char *path, const char *name, const char *dtype) {
    return plait_set_error(PLAIT_ERR_PROTOCOL,
                           "%s: tensor %s has dtype %s, which plait does not read: plait reads float weights (F32, "
                           "or F16, BF16 and F64 converted); an integer or 8-bit (quantised) model cannot be loaded",
                           path, name, dtype);
}

plait_status plait_st_require_float(const plait_st_file *f, const plait_st_tensor *t) {
    return t->data || !t->numel ? PLAIT_OK : not_float(f->path, t->name, t->dtype);
}

static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | man << 13; /* Inf, NaN */
    else if (exp) bits = sign | (exp + 112) << 23 | man << 13;
    else if (!man) bits = sign;
    else { /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Whether a tensor is read through a float32 copy: stored in another float
 * type, or F32 not 4-byte aligned in the file (the format does not require
 * it; plait's own writer aligns). Tensors of other types have no data. */
static int copied(const plait_st_tensor *t) {
    if (!t->bytes) return 0;
    return strcmp(t->dtype, "F32") != 0 || ((uintptr_t)t->raw & 3) != 0;
}

/* Tensors stored in another float type, or unaligned, as float32
 * (PLAIT_ST_CONVERT). */
static plait_status convert_tensors(plait_st_file *f) {
    size_t total = 0;
    for (size_t i = 0; i < f->n; i++)
        if (copied(&f->t[i])) total += f->t[i].numel;
    if (!total) return PLAIT_OK;
    f->converted = malloc(total * sizeof(float));
    if (!f->converted)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory converting %s to float32 (%zu elements)", f->path,
                               total);
    float *out = f->converted;
    for (size_t i = 0; i < f->n; i++) {
        plait_st_tensor *t = &f->t[i];
        if (!copied(t)) continue;
        const uint8_t *p = t->raw;
        for (size_t k = 0; k < t->numel; k++) {
            if (!strcmp(t->dtype, "F32")) {
                memcpy(&out[k], p + 4 * k, 4);
            } else if (!strcmp(t->dtype, "F64")) {
                double d;
                memcpy(&d, p + 8 * k, 8);
                out[k] = (float)d;
            } else {
                uint16_t h = (uint16_t)(p[2 * k] | p[2 * k + 1] << 8);
                if (!strcmp(t->dtype, "F16")) {
                    out[k] = half_to_float(h);
                } else {
                    uint32_t bits = (uint32_t)h << 16;
                    memcpy(&out[k], &bits, 4);
                }
            }
        }
        t->data = out;
        out += t->numel;
    }
    return PLAIT_OK;
}

static int parse_hex32(const char *s, uint32_t *out) {
    uint64_t v;
    if (plait_json_hex(s, 8, &v) != 0) return -1;
    *out = (uint32_t)v;
    return 0;
}

static plait_status parse_tensor(plait_st_file *f, const plait_json *e, plait_st_tensor *t, unsigned flags) {
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
    int floating = 0, esize = dtype_size(dtype->str, &floating);
    if (!esize) return bad(f, "tensor %s has dtype \"%.40s\", which safetensors does not define", e->key, dtype->str);
    /* a valid file of a dtype plait does not read here: said as such (a
     * foreign file's other tensors are kept without data: its reader
     * decides, e.g. an attention mask buffer of U8 or BOOL is ignored) */
    const unsigned any = PLAIT_ST_CONVERT | PLAIT_ST_ANY_DTYPE;
    if (!floating && !(flags & any)) return not_float(f->path, e->key, dtype->str);
    if (esize != 4 && !(flags & any))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: tensor %s has dtype %s: a valid safetensors file, but this reader takes float32 "
                               "(F32) tensors only (plait's checkpoints are F32; [run] init_from converts F16, BF16 "
                               "and F64)",
                               f->path, e->key, dtype->str);
    t->dtype = dtype->str;
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
        if (s->num && numel > (UINT64_MAX / 8) / (uint64_t)s->num)
            return bad(f, "tensor %s: shape overflows", e->key);
        numel *= (uint64_t)s->num;
    }
    if (offs->type != PLAIT_JSON_ARRAY || offs->count != 2 || offs->child->type != PLAIT_JSON_INT ||
        offs->child->next->type != PLAIT_JSON_INT)
        return bad(f, "tensor %s: data_offsets is not a pair of integers", e->key);
    int64_t begin = offs->child->num, end = offs->child->next->num;
    if (begin < 0 || end < begin) return bad(f, "tensor %s: data_offsets [%lld, %lld] are not an interval",
                                             e->key, (long long)begin, (long long)end);
    if ((uint64_t)(end - begin) != (uint64_t)esize * numel)
        return bad(f, "tensor %s: data_offsets [%lld, %lld] hold %lld bytes but its shape needs %llu (%s)",
                   e->key, (long long)begin, (long long)end, (long long)(end - begin),
                   (unsigned long long)((uint64_t)esize * numel), dtype->str);
    if (numel > SIZE_MAX / 4) return bad(f, "tensor %s is too large for this machine", e->key);
    t->numel = (size_t)numel;
    t->offset = (uint64_t)begin;
    t->bytes = floating ? 4 * numel : 0;
    t->stored_bytes = (uint64_t)esize * numel;
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
    uint32_t got = plait_crc32c(0, t->raw, (size_t)t->stored_bytes);
    if (got != t->crc)
        return bad(f, "tensor %s: checksum mismatch (stored %08x, computed %08x): its data was altered",
                   t->name, t->crc, got);
    return PLAIT_OK;
}

/* A file whose first bytes cannot start a safetensors file: what it is. */
static plait_status not_safetensors(const plait_st_file *f) {
    const char *kind = plait_file_signature(f->map, f->map_bytes);
    size_t n = f->map_bytes < PLAIT_SIGNATURE_BYTES ? f->map_bytes : PLAIT_SIGNATURE_BYTES;
    if (!kind && n && plait_looks_like_text(f->map, n)) kind = "text";
    if (!kind) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is %s, not a safetensors file (weights); refusing to load it",
                           f->path, kind);
}

static plait_status parse_file(plait_st_file *f, unsigned flags) {
    uint64_t n = 0;
    for (int i = 0; i < 8 && (size_t)i < f->map_bytes; i++) n |= (uint64_t)f->map[i] << (8 * i);
    if ((f->map_bytes < 8 || n < 2 || n > f->map_bytes - 8 || f->map[8] != '{') && not_safetensors(f) != PLAIT_OK)
        return PLAIT_ERR_PROTOCOL;
    if (f->map_bytes < 8) return bad(f, "%zu bytes is shorter than the 8-byte header length", f->map_bytes);
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
        st = parse_tensor(f, e, &f->t[f->n], flags);
        if (st != PLAIT_OK) return st;
        f->n++;
    }
    /* Data section: exactly covered, in offset order, nothing left over. */
    qsort(f->t, f->n, sizeof *f->t, cmp_offset);
    uint64_t data_start = 8 + f->header_len, pos = 0;
    for (size_t i = 0; i < f->n; i++) {
        plait_st_tensor *t = &f->t[i];
        if (t->bytes && !strcmp(t->dtype, "F32") && (data_start + t->offset) % 4 &&
            !(flags & (PLAIT_ST_CONVERT | PLAIT_ST_ANY_DTYPE)))
            return bad(f, "tensor %s starts at byte %llu, not 4-byte aligned (plait maps float data in place)",
                       t->name, (unsigned long long)(data_start + t->offset));
        if (t->offset != pos)
            return bad(f, "tensor %s starts at data byte %llu but the previous tensor ends at %llu "
                          "(tensors must cover the data without gaps or overlaps)",
                       t->name, (unsigned long long)t->offset, (unsigned long long)pos);
        pos += t->stored_bytes;
    }
    if (data_start + pos != f->map_bytes) {
        if (data_start + pos > f->map_bytes)
            return bad(f, "the header describes %llu bytes of tensor data but the file holds %llu "
                          "(truncated file)",
                       (unsigned long long)pos, (unsigned long long)(f->map_bytes - data_start));
        return bad(f, "%llu bytes after the last tensor (the file is longer than its header describes)",
                   (unsigned long long)(f->map_bytes - data_start - pos));
    }
    for (size_t i = 0; i < f->n; i++) {
        f->t[i].raw = f->map + data_start + f->t[i].offset;
        /* F32 in place; other floats and unaligned F32 are copied below;
         * other types have none */
        f->t[i].data = f->t[i].bytes && !copied(&f->t[i]) ? (const float *)f->t[i].raw : NULL;
    }

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
    return (flags & PLAIT_ST_ANY_DTYPE) && !(flags & PLAIT_ST_CONVERT) ? PLAIT_OK : convert_tensors(f);
}

void plait_st_release(const plait_st_file *f, const void *data, size_t bytes) {
    const unsigned char *map = f ? f->map : NULL, *p = data;
    if (!map || !p || bytes == 0 || p < map || p >= map + f->map_bytes) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t begin = (uintptr_t)p & ~(page - 1);
    uintptr_t end = (uintptr_t)p +
                    (bytes < (size_t)(map + f->map_bytes - p) ? bytes : (size_t)(map + f->map_bytes - p));
    end = (end + page - 1) & ~(page - 1);
    /* a private read-only mapping no one wrote: DONTNEED drops the pages
     * and a later touch maps the file's again; a failure only leaves them */
    (void)madvise((void *)begin, end - begin, MADV_DONTNEED);
}

plait_status plait_st_open(const char *path, unsigned flags, plait_st_file **out) {
    *out = NULL;
    plait_st_file *f = calloc(1, sizeof *f);
    if (!f) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory opening %s", path);
    snprintf(f->path, sizeof f->path, "%s", path);
    int fd;
    uint64_t size;
    plait_status ost = plait_open_regular(path, "safetensors file", PLAIT_ERR_SYSTEM, &fd, &size);
    if (ost != PLAIT_OK) {
        free(f);
        return ost;
    }
    if (size > SIZE_MAX) {
        close(fd);
        free(f);
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s is too large for this machine", path);
    }
    f->map_bytes = (size_t)size;
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
