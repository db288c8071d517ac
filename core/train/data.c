#include "train/data.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "checkpoint/safetensors_crc32c.h"

#define LLMC_MAGIC_U16 20240520u
#define LLMC_MAGIC_U32 20240801u
#define LLMC_HEADER_BYTES (256 * 4)

struct plait_data {
    char path[PATH_MAX];
    plait_data_format format;
    int llmc_header;
    const uint8_t *map;      /* whole file */
    size_t map_bytes;
    const uint8_t *tokens;   /* first token byte */
    int64_t n_tokens;
    int64_t n_train, n_val;  /* train = [0, n_train), val = [n_train, n_tokens) */
    uint32_t train_crc;      /* CRC32C of the training split's bytes */
    int32_t seq_len;
    uint64_t seed;
};

static uint32_t read_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int32_t plait_data_token(const plait_data *d, int64_t index) {
    if (d->format == PLAIT_DATA_FORMAT_TEXT) return d->tokens[index];
    const uint8_t *p = d->tokens + 2 * (size_t)index;
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Interpret the mapped bytes: header, token count, token width. */
static plait_status parse_layout(plait_data *d) {
    if (d->format == PLAIT_DATA_FORMAT_TEXT) {
        d->tokens = d->map;
        d->n_tokens = (int64_t)d->map_bytes;
        return PLAIT_OK;
    }
    if (d->map_bytes >= 4 && read_le32(d->map) == LLMC_MAGIC_U32)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: llm.c token file with uint32 tokens (magic %u) is not supported; "
                               "plait reads uint16 tokens (magic %u, or raw uint16)",
                               d->path, LLMC_MAGIC_U32, LLMC_MAGIC_U16);
    if (d->map_bytes >= 4 && read_le32(d->map) == LLMC_MAGIC_U16) {
        if (d->map_bytes < LLMC_HEADER_BYTES)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: starts with llm.c's magic %u but is only %zu bytes, shorter "
                                   "than its %d-byte header (truncated file?)",
                                   d->path, LLMC_MAGIC_U16, d->map_bytes, LLMC_HEADER_BYTES);
        uint32_t version = read_le32(d->map + 4);
        if (version != 1)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: llm.c header version %u is not supported (expected 1: uint16 tokens)",
                                   d->path, version);
        uint64_t count = read_le32(d->map + 8);
        uint64_t want = LLMC_HEADER_BYTES + 2 * count;
        if (want != d->map_bytes)
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: llm.c header says %llu tokens (%llu bytes with the header) but the "
                                   "file has %zu bytes (truncated or not an llm.c token file)",
                                   d->path, (unsigned long long)count, (unsigned long long)want,
                                   d->map_bytes);
        d->llmc_header = 1;
        d->tokens = d->map + LLMC_HEADER_BYTES;
        d->n_tokens = (int64_t)count;
        return PLAIT_OK;
    }
    if (d->map_bytes % 2)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: %zu bytes is not a whole number of uint16 tokens (truncated file, "
                               "or a text file? set [data] format = text)",
                               d->path, d->map_bytes);
    d->tokens = d->map;
    d->n_tokens = (int64_t)(d->map_bytes / 2);
    return PLAIT_OK;
}

static plait_status check_tokens(const plait_data *d, int32_t vocab_size) {
    int32_t limit = d->format == PLAIT_DATA_FORMAT_TEXT ? 256 : 65536;
    if (vocab_size >= limit) return PLAIT_OK;
    for (int64_t i = 0; i < d->n_tokens; i++) {
        int32_t t = plait_data_token(d, i);
        if (t >= vocab_size) {
            size_t width = d->format == PLAIT_DATA_FORMAT_TEXT ? 1 : 2;
            size_t offset = (size_t)(d->tokens - d->map) + (size_t)i * width;
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: token %d at byte offset %zu (token index %lld) is not below "
                                   "[model] vocab_size = %d; the file does not match the model's "
                                   "vocabulary",
                                   d->path, t, offset, (long long)i, vocab_size);
        }
    }
    return PLAIT_OK;
}

static plait_status map_file(plait_data *d) {
    int fd = open(d->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot open data file %s: %s", d->path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return plait_set_error(PLAIT_ERR_SYSTEM, "data file %s: %s", d->path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "data file %s is not a regular file", d->path);
    }
    d->map_bytes = (size_t)st.st_size;
    if (d->map_bytes == 0) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "data file %s is empty", d->path);
    }
    void *p = mmap(NULL, d->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot map data file %s (%zu bytes): %s", d->path,
                               d->map_bytes, strerror(err));
    d->map = p;
    return PLAIT_OK;
}

plait_status plait_data_open(const plait_data_options *opts, plait_data **out) {
    *out = NULL;
    if (!opts || !opts->path || !*opts->path)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] path is empty: name a token or text file");
    if (opts->seq_len < 1 || opts->vocab_size < 2 || !(opts->val_fraction >= 0 && opts->val_fraction < 1))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data options out of range: seq_len %d, vocab_size %d, val_fraction %g",
                               opts->seq_len, opts->vocab_size, opts->val_fraction);
    plait_data *d = calloc(1, sizeof *d);
    if (!d) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory opening %s", opts->path);
    snprintf(d->path, sizeof d->path, "%s", opts->path);
    d->format = opts->format;
    if (d->format == PLAIT_DATA_FORMAT_AUTO)
        d->format = ends_with(d->path, ".bin") ? PLAIT_DATA_FORMAT_U16 : PLAIT_DATA_FORMAT_TEXT;
    d->seq_len = opts->seq_len;
    d->seed = opts->seed;

    plait_status st = map_file(d);
    if (st == PLAIT_OK) st = parse_layout(d);
    if (st == PLAIT_OK) st = check_tokens(d, opts->vocab_size);
    if (st != PLAIT_OK) {
        plait_data_close(d);
        return st;
    }
    d->n_val = (int64_t)((double)d->n_tokens * opts->val_fraction);
    d->n_train = d->n_tokens - d->n_val;
    int64_t need = (int64_t)opts->seq_len + 1;
    if (d->n_train < need || (opts->val_fraction > 0 && d->n_val < need)) {
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "data file %s is too short: %lld tokens give %lld for training and %lld "
                               "for validation ([data] val_fraction = %g), but each split needs at least "
                               "[model] block_size + 1 = %lld tokens; use a longer file, a smaller "
                               "block_size, or a different val_fraction",
                               opts->path, (long long)d->n_tokens, (long long)d->n_train,
                               (long long)d->n_val, opts->val_fraction, (long long)need);
        plait_data_close(d);
        return st;
    }
    size_t token_bytes = d->format == PLAIT_DATA_FORMAT_TEXT ? 1 : 2;
    d->train_crc = plait_crc32c(0, d->tokens, (size_t)d->n_train * token_bytes);
    *out = d;
    return PLAIT_OK;
}

void plait_data_close(plait_data *d) {
    if (!d) return;
    if (d->map) munmap((void *)d->map, d->map_bytes);
    free(d);
}

/* A relative path is looked up in the CWD, next to the config file, then in
 * the source tree. */
static int resolve_path(const plait_config *cfg, const char *path, char *out, size_t cap,
                        char *tried, size_t tried_cap) {
    snprintf(out, cap, "%s", path);
    snprintf(tried, tried_cap, "%s", path);
    if (path[0] == '/' || access(path, F_OK) == 0) return 0;
    const char *cfg_path = plait_config_path(cfg);
    if (cfg_path && strchr(cfg_path, '/')) {
        int dir_len = (int)(strrchr(cfg_path, '/') - cfg_path);
        snprintf(out, cap, "%.*s/%s", dir_len, cfg_path, path);
        size_t used = strlen(tried);
        snprintf(tried + used, tried_cap - used, ", %s", out);
        if (access(out, F_OK) == 0) return 0;
    }
#ifdef PLAIT_SOURCE_DIR
    snprintf(out, cap, "%s/%s", PLAIT_SOURCE_DIR, path);
    size_t used = strlen(tried);
    snprintf(tried + used, tried_cap - used, ", %s", out);
    if (access(out, F_OK) == 0) return 0;
#endif
    return -1;
}

plait_status plait_data_open_config(const plait_config *cfg, plait_data **out) {
    *out = NULL;
    const char *path = plait_config_str(cfg, "data", "path");
    const char *format = plait_config_str(cfg, "data", "format");
    plait_data_options o = {
        .path = path,
        .format = strcmp(format, "text") == 0  ? PLAIT_DATA_FORMAT_TEXT
                  : strcmp(format, "u16") == 0 ? PLAIT_DATA_FORMAT_U16
                                               : PLAIT_DATA_FORMAT_AUTO,
        .val_fraction = plait_config_float(cfg, "data", "val_fraction"),
        .vocab_size = (int32_t)plait_config_int(cfg, "model", "vocab_size"),
        .seq_len = (int32_t)plait_config_int(cfg, "model", "block_size"),
        .seed = (uint64_t)plait_config_int(cfg, "run", "seed"),
    };
    if (!path || !*path)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] path is empty: name a token or text file");
    char resolved[PATH_MAX], tried[3 * PATH_MAX + 8];
    if (resolve_path(cfg, path, resolved, sizeof resolved, tried, sizeof tried) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[data] path = %s: no such file (tried %s)", path, tried);
    o.path = resolved;
    return plait_data_open(&o, out);
}

const char *plait_data_path(const plait_data *d) { return d->path; }
plait_data_format plait_data_format_of(const plait_data *d) { return d->format; }
int plait_data_has_llmc_header(const plait_data *d) { return d->llmc_header; }
int64_t plait_data_tokens(const plait_data *d) { return d->n_tokens; }
uint32_t plait_data_train_crc32c(const plait_data *d) { return d->train_crc; }

int64_t plait_data_split_tokens(const plait_data *d, plait_data_split split) {
    return split == PLAIT_DATA_VAL ? d->n_val : d->n_train;
}

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. */
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Counter-based: one hash per (seed, split, step, sequence), nothing carried
 * from call to call. Each field goes through its own round so that nearby
 * counters (step 3 sequence 4 vs step 4 sequence 3) do not collide. */
static uint64_t sequence_hash(uint64_t seed, plait_data_split split, int64_t step, int64_t seq) {
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ (0x243f6a8885a308d3ull * ((uint64_t)split + 1)));
    h = mix64(h + (uint64_t)step * 0x9e3779b97f4a7c15ull);
    h = mix64(h ^ ((uint64_t)seq * 0xd1b54a32d192ed03ull));
    return h;
}

int64_t plait_data_sequence_start(const plait_data *d, plait_data_split split, int64_t step,
                                  int64_t sequence) {
    int64_t T = d->seq_len;
    if (split == PLAIT_DATA_VAL) {
        int64_t windows = (d->n_val - 1) / T; /* >= 1: n_val >= T + 1 */
        return d->n_train + (sequence % windows) * T;
    }
    uint64_t range = (uint64_t)(d->n_train - T); /* starts 0 .. n_train-T-1 */
    uint64_t h = sequence_hash(d->seed, split, step, sequence);
    return (int64_t)(((unsigned __int128)h * range) >> 64);
}

plait_status plait_data_batch(const plait_data *d, plait_data_split split, int64_t step,
                              int64_t micro_batch, int32_t B, int32_t T, int32_t *tokens,
                              int32_t *targets) {
    if (B < 1 || T < 1 || T > d->seq_len || step < 0 || micro_batch < 0 || !tokens)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data batch from %s: bad arguments (B %d, T %d (max %d), step %lld, "
                               "micro-batch %lld)",
                               d->path, B, T, d->seq_len, (long long)step, (long long)micro_batch);
    if (split == PLAIT_DATA_VAL && d->n_val == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "validation batch requested from %s but [data] val_fraction = 0 "
                               "leaves no validation split",
                               d->path);
    for (int32_t r = 0; r < B; r++) {
        int64_t start = plait_data_sequence_start(d, split, step, micro_batch * B + r);
        int32_t *tok = tokens + (size_t)r * (size_t)T;
        int32_t *tgt = targets ? targets + (size_t)r * (size_t)T : NULL;
        if (d->format == PLAIT_DATA_FORMAT_TEXT) {
            const uint8_t *p = d->tokens + start;
            for (int32_t t = 0; t < T; t++) tok[t] = p[t];
            if (tgt)
                for (int32_t t = 0; t < T; t++) tgt[t] = p[t + 1];
        } else {
            for (int32_t t = 0; t < T; t++) tok[t] = plait_data_token(d, start + t);
            if (tgt)
                for (int32_t t = 0; t < T; t++) tgt[t] = plait_data_token(d, start + t + 1);
        }
    }
    return PLAIT_OK;
}
