#include "runtime/file_signature.h"

#include <string.h>

const char *plait_file_signature(const uint8_t *p, size_t n) {
    static const struct {
        const char *sig;
        size_t len;
        const char *what;
    } sigs[] = {
        {"\x1f\x8b", 2, "a gzip-compressed file (decompress it first)"},
        {"PK\x03\x04", 4, "a zip archive (a PyTorch .pt file? unpack or convert it first)"},
        {"\x28\xb5\x2f\xfd", 4, "a zstd-compressed file (decompress it first)"},
        {"\xfd" "7zXZ", 5, "an xz-compressed file (decompress it first)"},
        {"BZh", 3, "a bzip2-compressed file (decompress it first)"},
        {"\x93NUMPY", 6, "a NumPy .npy file (write the bare array instead: array.astype(np.uint16).tofile(path))"},
        {"\x7f" "ELF", 4, "an executable (ELF)"},
        /* llm.c's token files: magic 20240520 (uint16 tokens) or 20240801 (uint32), little endian */
        {"\x88\xd8\x34\x01", 4, "an llm.c token file (training data)"},
        {"\xa1\xd9\x34\x01", 4, "an llm.c token file (training data)"},
    };
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (n >= sigs[i].len && memcmp(p, sigs[i].sig, sigs[i].len) == 0) return sigs[i].what;
    /* safetensors: an 8-byte header length within the file, then its JSON */
    if (n >= 10 && p[8] == '{') {
        uint64_t h = 0;
        for (int b = 7; b >= 0; b--) h = h << 8 | p[b];
        if (h >= 2 && h <= n - 8) return "a safetensors file (model weights)";
    }
    return NULL;
}

int plait_looks_like_text(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        if (c < 0x80) {
            if (c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f') return 0;
            i++;
            continue;
        }
        size_t len = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 && c < 0xf0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
        if (!len) return 0;
        for (size_t k = 1; k < len; k++)
            if (i + k < n && (p[i + k] & 0xc0) != 0x80) return 0;
        i += len;
    }
    return 1;
}

plait_status plait_text_input_check(const char *path, const uint8_t *p, size_t n, const char *command) {
    const char *what = plait_file_signature(p, n);
    if (what)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s is %s, not text: %s reads UTF-8 text", path, what, command);
    size_t head = n < PLAIT_SIGNATURE_BYTES ? n : PLAIT_SIGNATURE_BYTES;
    const uint8_t *nul = head ? memchr(p, 0, head) : NULL;
    if (nul)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s: byte %zu is NUL, which no text has (a binary or token file?): %s reads UTF-8 text",
                               path, (size_t)(nul - p), command);
    return PLAIT_OK;
}
