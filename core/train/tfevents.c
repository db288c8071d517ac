/* TensorBoard's event files (tfevents.h). */
#include "train/tfevents.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/safetensors_crc32c.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

/* A growing buffer that stops (ok = 0) rather than overrun. */
typedef struct pb {
    uint8_t *p;
    size_t n, cap;
    int ok;
} pb;

static void put(pb *b, const void *src, size_t n) {
    if (!b->ok || n > b->cap - b->n) {
        b->ok = 0;
        return;
    }
    if (b->p) memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void varint(pb *b, uint64_t v) {
    uint8_t out[10];
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    put(b, out, n);
}

static void le(pb *b, uint64_t v, size_t bytes) {
    uint8_t out[8];
    for (size_t i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
    put(b, out, bytes);
}

static void f64(pb *b, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    le(b, u, 8);
}

static void f32(pb *b, float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    le(b, u, 4);
}

static uint32_t masked_crc(const void *data, size_t n) {
    uint32_t c = plait_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static int kept(const char *name, double v) { return !isnan(v) && strcmp(name, "step") != 0; }

/* Event{wall_time, step, summary{value{tag, simple_value}...}} or, with
 * names NULL, Event{wall_time, file_version}. */
static void event(pb *b, int64_t step, double wall_time, int n, const char (*names)[32], const double *values) {
    put(b, "\x09", 1);
    f64(b, wall_time);
    if (!names) {
        static const char version[] = "brain.Event:2";
        put(b, "\x1a", 1);
        varint(b, sizeof version - 1);
        put(b, version, sizeof version - 1);
        return;
    }
    put(b, "\x10", 1);
    varint(b, (uint64_t)step);
    size_t summary = 0; /* the summary's length: each value's, framed */
    for (int i = 0; i < n; i++) {
        if (!kept(names[i], values[i])) continue;
        size_t tag = strnlen(names[i], sizeof names[i]), value = 1 + 1 + tag + 1 + 4; /* tag < 128 bytes */
        summary += 1 + 1 + value;
    }
    put(b, "\x2a", 1);
    varint(b, summary);
    for (int i = 0; i < n; i++) {
        if (!kept(names[i], values[i])) continue;
        size_t tag = strnlen(names[i], sizeof names[i]);
        put(b, "\x0a", 1);
        varint(b, 1 + 1 + tag + 1 + 4);
        put(b, "\x0a", 1);
        varint(b, tag);
        put(b, names[i], tag);
        put(b, "\x15", 1);
        f32(b, (float)values[i]);
    }
}

/* The record framing around an event. */
static size_t record(uint8_t *out, size_t cap, int64_t step, double wall_time, int n, const char (*names)[32],
                     const double *values) {
    pb sizing = {NULL, 0, SIZE_MAX, 1};
    event(&sizing, step, wall_time, n, names, values);
    size_t len = sizing.n;
    if (cap < len + 16) return 0;
    pb b = {out, 0, cap, 1};
    le(&b, len, 8);
    le(&b, masked_crc(out, 8), 4);
    event(&b, step, wall_time, n, names, values);
    le(&b, masked_crc(out + 12, len), 4);
    return b.ok ? b.n : 0;
}

size_t plait_tfevents_record(uint8_t *out, size_t cap, int64_t step, double wall_time, int n, const char (*names)[32],
                             const double *values) {
    int any = 0;
    for (int i = 0; i < n; i++) any |= kept(names[i], values[i]);
    return any ? record(out, cap, step, wall_time, n, names, values) : 0;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static plait_status write_all(plait_tfevents *t, const uint8_t *buf, size_t n) {
    if (fwrite(buf, 1, n, t->file) != n || fflush(t->file) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "[run] tensorboard: cannot write %s: %s", t->path, strerror(errno));
    return PLAIT_OK;
}

plait_status plait_tfevents_open(plait_tfevents *t, const char *out_dir) {
    memset(t, 0, sizeof *t);
    char dir[4200], host[64] = "host";
    snprintf(dir, sizeof dir, "%s/tensorboard", out_dir);
    struct stat sb;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "[run] tensorboard: cannot create %s: %s", dir, strerror(errno));
    if (lstat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] tensorboard: %s is in the way of the event files (not a directory, or a link): "
                               "remove it or choose another [run] out_dir",
                               dir);
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "host");
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    snprintf(t->path, sizeof t->path, "%s/events.out.tfevents.%lld.%s.%d", dir, (long long)time(NULL), host,
             (int)getpid());
    plait_status st = plait_out_fopen(t->path, "w", &t->file);
    if (st != PLAIT_OK) return plait_wrap_error(st, "[run] tensorboard: cannot open an event file");
    uint8_t buf[64];
    size_t n = record(buf, sizeof buf, 0, wall_now(), 0, NULL, NULL);
    st = write_all(t, buf, n);
    if (st != PLAIT_OK) plait_tfevents_close(t);
    return st;
}

plait_status plait_tfevents_scalars(plait_tfevents *t, int64_t step, double wall_time, int n, const char (*names)[32],
                                    const double *values) {
    if (!t->file) return PLAIT_OK;
    uint8_t buf[8192]; /* at most 64 columns of 31-byte names: 64 * 42 bytes */
    size_t len = plait_tfevents_record(buf, sizeof buf, step, wall_time > 0 ? wall_time : wall_now(), n, names, values);
    return len ? write_all(t, buf, len) : PLAIT_OK;
}

void plait_tfevents_close(plait_tfevents *t) {
    if (t->file) fclose(t->file);
    t->file = NULL;
}
