#include "train/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/file_signature.h"
#include "runtime/regular_file.h"

static uint32_t read_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static plait_status map_file(plait_token_file *f) {
    int fd;
    uint64_t size;
    plait_status ost = plait_open_regular(f->path, "data file", PLAIT_ERR_INVALID_CONFIG, &fd, &size);
    if (ost != PLAIT_OK) return ost;
    if (size > SIZE_MAX) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "data file %s is too large for this machine", f->path);
    }
    f->map_bytes = (size_t)size;
    if (f->map_bytes == 0) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "data file %s is empty", f->path);
    }
    void *p = mmap(NULL, f->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (p == MAP_FAILED)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot map data file %s (%zu bytes): %s", f->path, f->map_bytes,
                               strerror(err));
    f->map = p;
    return PLAIT_OK;
}

/* llm.c's header: magic at byte 0, version at byte 4, count at byte 8. */
static plait_status parse_llmc(plait_token_file *f, uint32_t magic) {
    int width = magic == PLAIT_LLMC_MAGIC_U16 ? 2 : 4;
    uint32_t want_version = width == 2 ? PLAIT_LLMC_VERSION_U16 : PLAIT_LLMC_VERSION_U32;
    if (f->map_bytes < PLAIT_LLMC_HEADER_BYTES)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: starts with llm.c's magic %u but is only %zu bytes, shorter than its %d-byte "
                               "header (truncated file?)",
                               f->path, magic, f->map_bytes, PLAIT_LLMC_HEADER_BYTES);
    uint32_t version = read_le32(f->map + 4);
    if (version != want_version)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte 4: llm.c header version %u is not supported with magic %u (expected %u: "
                               "uint%d tokens)",
                               f->path, version, magic, want_version, 8 * width);
    uint64_t count = read_le32(f->map + 8);
    uint64_t want = PLAIT_LLMC_HEADER_BYTES + (uint64_t)width * count;
    if (want != f->map_bytes)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte 8: llm.c header says %llu tokens (%llu bytes with the header) but the file "
                               "has %zu bytes (truncated, unfinished, or not an llm.c token file)",
                               f->path, (unsigned long long)count, (unsigned long long)want, f->map_bytes);
    f->llmc_header = 1;
    f->width = width;
    f->tokens = f->map + PLAIT_LLMC_HEADER_BYTES;
    f->n_tokens = (int64_t)count;
    return PLAIT_OK;
}

static int popcount32(uint32_t x) {
    int c = 0;
    for (; x; x &= x - 1) c++;
    return c;
}

/* Does the file start with what an llm.c header would be, had its magic
 * not been damaged? A magic a few bits from llm.c's, or llm.c's layout
 * around another magic: a known version or a count that matches the size,
 * and the rest of the 1024 bytes zero. A raw uint16 token stream has
 * neither (its first 506 tokens would have to be id 0). */
static int damaged_llmc(const plait_token_file *f, uint32_t magic) {
    if (f->map_bytes < PLAIT_LLMC_HEADER_BYTES) return 0;
    if (popcount32(magic ^ PLAIT_LLMC_MAGIC_U16) <= 3 || popcount32(magic ^ PLAIT_LLMC_MAGIC_U32) <= 3) return 1;
    for (size_t i = 12; i < PLAIT_LLMC_HEADER_BYTES; i++)
        if (f->map[i]) return 0;
    uint32_t version = read_le32(f->map + 4);
    uint64_t count = read_le32(f->map + 8);
    return version == PLAIT_LLMC_VERSION_U16 || version == PLAIT_LLMC_VERSION_U32 ||
           PLAIT_LLMC_HEADER_BYTES + 2 * count == f->map_bytes || PLAIT_LLMC_HEADER_BYTES + 4 * count == f->map_bytes;
}

/* Text: every byte one token. Refused: a token file, a known binary file,
 * a NUL byte in the first PLAIT_SIGNATURE_BYTES (no text has one). */
static plait_status parse_text(plait_token_file *f) {
    uint32_t magic = f->map_bytes >= 4 ? read_le32(f->map) : 0;
    const char *foreign = plait_file_signature(f->map, f->map_bytes);
    int llmc = magic == PLAIT_LLMC_MAGIC_U16 || magic == PLAIT_LLMC_MAGIC_U32;
    if (llmc || damaged_llmc(f, magic))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s is read as text ([data] format = text, or auto and not named *.bin) but it starts "
                               "with %s llm.c token-file header (magic %u at byte 0): name it *.bin or set [data] "
                               "format = bin",
                               f->path, llmc ? "an" : "a damaged", magic);
    if (foreign)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is %s, not text nor tokens; refusing to train on its bytes",
                               f->path, foreign);
    size_t n = f->map_bytes < PLAIT_SIGNATURE_BYTES ? f->map_bytes : PLAIT_SIGNATURE_BYTES;
    const uint8_t *nul = memchr(f->map, 0, n);
    if (nul)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s is read as text ([data] format = text, or auto and not named *.bin) but byte %zu is "
                               "NUL, which no text has: a token file? name it *.bin or set [data] format = bin",
                               f->path, (size_t)(nul - f->map));
    f->width = 1;
    f->tokens = f->map;
    f->n_tokens = (int64_t)f->map_bytes;
    return PLAIT_OK;
}

static plait_status parse_format(plait_token_file *f, int text) {
    if (text) return parse_text(f);
    uint32_t magic = f->map_bytes >= 4 ? read_le32(f->map) : 0;
    if (magic == PLAIT_LLMC_MAGIC_U16 || magic == PLAIT_LLMC_MAGIC_U32) return parse_llmc(f, magic);
    /* No llm.c header: raw uint16 tokens (nanoGPT's format) have no
     * signature, so they are what is left once everything else is ruled out. */
    if (damaged_llmc(f, magic))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: byte 0: magic %u is not llm.c's (%u for uint16 tokens, %u for uint32), but the "
                               "first %d bytes have the layout of llm.c's header (version %u at byte 4, count %u at "
                               "byte 8): a damaged header; refusing to read the file as raw uint16 tokens (its header "
                               "would become %d tokens): make the file again",
                               f->path, magic, PLAIT_LLMC_MAGIC_U16, PLAIT_LLMC_MAGIC_U32, PLAIT_LLMC_HEADER_BYTES,
                               read_le32(f->map + 4), read_le32(f->map + 8), PLAIT_LLMC_HEADER_BYTES / 2);
    const char *foreign = plait_file_signature(f->map, f->map_bytes);
    if (foreign)
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is %s, not a token file; refusing to train on it", f->path,
                               foreign);
    size_t n = f->map_bytes < PLAIT_SIGNATURE_BYTES ? f->map_bytes : PLAIT_SIGNATURE_BYTES;
    if (n >= 16 && plait_looks_like_text(f->map, n))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s has no llm.c header and its first %zu bytes are text, so it is not raw uint16 "
                               "tokens: name it *.txt or set [data] format = text to train on its bytes",
                               f->path, n);
    if (f->map_bytes % 2)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s: %zu bytes is not a whole number of uint16 tokens and there is no llm.c header "
                               "(magic %u or %u at byte 0): truncated file, or a text file? set [data] format = text",
                               f->path, f->map_bytes, PLAIT_LLMC_MAGIC_U16, PLAIT_LLMC_MAGIC_U32);
    f->width = 2;
    f->tokens = f->map;
    f->n_tokens = (int64_t)(f->map_bytes / 2);
    return PLAIT_OK;
}

plait_status plait_token_file_open(const char *path, int text, plait_token_file *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s", path);
    plait_status st = map_file(out);
    if (st == PLAIT_OK) st = parse_format(out, text);
    if (st != PLAIT_OK) plait_token_file_close(out);
    return st;
}

const char *plait_token_file_kind(const plait_token_file *f) {
    if (f->width == 1) return "text (a token per byte)";
    if (f->llmc_header) return f->width == 2 ? "llm.c uint16 tokens" : "llm.c uint32 tokens";
    return "raw uint16 tokens (no header)";
}

void plait_token_file_close(plait_token_file *f) {
    if (f->map) munmap((void *)f->map, f->map_bytes);
    f->map = NULL;
    f->map_bytes = 0;
}

plait_status plait_token_file_check(const plait_token_file *f, int32_t vocab_size) {
    if (f->width < 4 && vocab_size >= (int32_t)1 << (8 * f->width)) return PLAIT_OK;
    for (int64_t i = 0; i < f->n_tokens; i++) {
        int32_t t = plait_token_file_at(f, i);
        if (t >= vocab_size || t < 0) {
            size_t offset = (size_t)(f->tokens - f->map) + (size_t)i * (size_t)f->width;
            return plait_set_error(PLAIT_ERR_PROTOCOL,
                                   "%s: token %u at byte offset %zu (token index %lld) is not below [model] "
                                   "vocab_size = %d; the file does not match the model's vocabulary",
                                   f->path, (uint32_t)t, offset, (long long)i, vocab_size);
        }
    }
    return PLAIT_OK;
}

/* ---- writing ------------------------------------------------------------ */

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static plait_status write_header(plait_token_writer *w) {
    uint8_t h[PLAIT_LLMC_HEADER_BYTES] = {0};
    put_le32(h, w->width == 2 ? PLAIT_LLMC_MAGIC_U16 : PLAIT_LLMC_MAGIC_U32);
    put_le32(h + 4, w->width == 2 ? PLAIT_LLMC_VERSION_U16 : PLAIT_LLMC_VERSION_U32);
    put_le32(h + 8, (uint32_t)w->count);
    if (fseek(w->f, 0, SEEK_SET) != 0 || fwrite(h, 1, sizeof h, w->f) != sizeof h)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", w->path, strerror(errno));
    return PLAIT_OK;
}

plait_status plait_token_writer_open(plait_token_writer *w, const char *path, int width) {
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->width = width;
    w->f = fopen(path, "wb");
    if (!w->f) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", path, strerror(errno));
    plait_status st = write_header(w);
    if (st != PLAIT_OK) plait_token_writer_abort(w);
    return st;
}

plait_status plait_token_writer_append(plait_token_writer *w, const int32_t *ids, size_t n) {
    uint8_t buf[4096];
    size_t k = 0;
    uint32_t limit = w->width == 2 ? 65535u : UINT32_MAX;
    if ((uint64_t)w->count + n > INT32_MAX)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: more than %d tokens do not fit llm.c's int32 header count",
                               w->path, INT32_MAX);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] > limit)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "%s: byte %lld: token id %d does not fit uint%d (the vocabulary is too large for "
                                   "this dtype)",
                                   w->path, (long long)(PLAIT_LLMC_HEADER_BYTES + (w->count + (int64_t)i) * w->width),
                                   ids[i], 8 * w->width);
        uint32_t v = (uint32_t)ids[i];
        for (int b = 0; b < w->width; b++) buf[k++] = (uint8_t)(v >> (8 * b));
        if (k + 4 > sizeof buf || i + 1 == n) {
            if (fwrite(buf, 1, k, w->f) != k)
                return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", w->path, strerror(errno));
            k = 0;
        }
    }
    w->count += (int64_t)n;
    return PLAIT_OK;
}

plait_status plait_token_writer_close(plait_token_writer *w) {
    plait_status st = write_header(w);
    if (st == PLAIT_OK && (fflush(w->f) != 0 || fsync(fileno(w->f)) != 0))
        st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", w->path, strerror(errno));
    if (fclose(w->f) != 0 && st == PLAIT_OK)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot close %s: %s", w->path, strerror(errno));
    w->f = NULL;
    return st;
}

void plait_token_writer_abort(plait_token_writer *w) {
    if (w->f) fclose(w->f);
    w->f = NULL;
    unlink(w->path);
}
