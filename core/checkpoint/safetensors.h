/*
 * safetensors files (the Hugging Face format PyTorch, JAX and llm.c tooling
 * read): an 8-byte little-endian header length N, N bytes of JSON
 *   {"__metadata__": {"k": "v", ...},
 *    "<name>": {"dtype": "F32", "shape": [d0, d1], "data_offsets": [begin, end]}, ...}
 * padded with spaces so the data starts at a multiple of 8, then the raw
 * little-endian tensor bytes; offsets are relative to the data start.
 *
 * plait writes float32 ("F32") tensors only, in declaration order, and adds
 * to __metadata__:
 *   "format": "pt"                       (what transformers expects)
 *   "plait.crc32c.<name>": "xxxxxxxx"    CRC32C of each tensor's bytes (hex)
 *   "plait.header_crc32c": "xxxxxxxx"    CRC32C of the N header bytes with
 *                                         these 8 hex digits set to '0'
 * so a file is self-checking: any flipped bit in the header or in a tensor is
 * found by the reader. Files from other writers (no plait.* keys) are read
 * without checksum checks.
 *
 * The reader is strict: header length within the file and <= 100 MB, JSON
 * syntax (safetensors_json.h), only spaces after the JSON object, dtype F32
 * (or, with PLAIT_ST_CONVERT, F16, BF16 or F64, converted to float32 when
 * the file is opened), shape entries >= 0, data_offsets a pair with
 * end - begin = element size * Π shape, tensors covering the data section
 * exactly (no gap, no overlap, nothing after the last one), 4-byte aligned
 * F32 data (unless PLAIT_ST_CONVERT), file size = 8 + N + data size. Every refusal names the file and
 * the problem (PLAIT_ERR_PROTOCOL): a file that is not safetensors at all
 * says what it looks like, a damaged one says it is damaged, and a valid
 * one of a dtype plait cannot use names the dtype.
 *
 * Little-endian hosts only (x86-64, aarch64), as the format itself.
 */
#ifndef PLAIT_CORE_CHECKPOINT_SAFETENSORS_H
#define PLAIT_CORE_CHECKPOINT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

#define PLAIT_ST_MAX_DIMS 8
/* The __metadata__ keys of plait's checksums. */
#define PLAIT_ST_CRC_PREFIX "plait.crc32c."
#define PLAIT_ST_HEADER_CRC_KEY "plait.header_crc32c"
/* Longest tensor name the writer accepts (bytes). */
#define PLAIT_ST_MAX_NAME 1024
/* Header size limit (the safetensors library refuses more than 100 MB). */
#define PLAIT_ST_MAX_HEADER (100u * 1000u * 1000u)

/* One tensor of a file. */
typedef struct plait_st_tensor {
    const char *name;
    int32_t ndim;
    int64_t shape[PLAIT_ST_MAX_DIMS];
    size_t numel;
    uint64_t offset;       /* data_offsets[0]: bytes from the data start */
    uint64_t bytes;        /* 4 * numel: the float32 elements at data (0: a dtype plait does not read) */
    const float *data;     /* reader: the elements as float32 (mapped, or converted at open; read-only);
                            * NULL for an integer or 8-bit dtype (PLAIT_ST_CONVERT keeps those tensors) */
    const char *dtype;     /* reader: the stored dtype ("F32", "BF16", ...) */
    const uint8_t *raw;    /* reader: the stored bytes (mapped), stored_bytes of them */
    uint64_t stored_bytes;
    int has_crc;           /* reader: the file carries plait.crc32c.<name> */
    uint32_t crc;
} plait_st_tensor;

/* ---- writer ------------------------------------------------------------
 * create → metadata* / declare* → write* → finish → commit (or abort).
 * Data goes to a temporary file of this writer's own beside `path`
 * ("<path>.<pid>-<random>.tmp", runtime/out_file.h: never shared with
 * another writer, never a link); commit renames it over `path`, so `path` is
 * either absent, the previous file, or the complete new file. The header is
 * written when the first tensor data arrives (or at finish), so metadata and
 * declarations must all come before the first write. Tensors may be written
 * in any order, each in consecutive chunks. One thread at a time. */
typedef struct plait_st_writer plait_st_writer;

plait_status plait_st_writer_create(const char *path, plait_st_writer **out);
/* Add a __metadata__ entry (both strings copied). Keys starting with
 * "plait.crc32c" and "plait.header_crc32c" are reserved; "format" replaces the default "pt". */
plait_status plait_st_writer_metadata(plait_st_writer *w, const char *key, const char *value);
/* The element type a writer stores its tensors in: float32 (the default),
 * or bfloat16 or float16, each element of the float data written rounded
 * to nearest, ties to even (a NaN stays a NaN). */
typedef enum plait_st_dtype { PLAIT_ST_F32 = 0, PLAIT_ST_BF16 = 1, PLAIT_ST_F16 = 2 } plait_st_dtype;
/* Store every tensor as `dtype` (before any declaration). A float16 file
 * refuses a finite value past its range (|x| rounding above 65504) when it
 * is written, naming the tensor and the element: the file is then unusable
 * (abort it). */
plait_status plait_st_writer_dtype(plait_st_writer *w, plait_st_dtype dtype);
/* Declare a tensor of `ndim` (0..8) dims. Names must be unique, non-empty,
 * at most PLAIT_ST_MAX_NAME bytes and not "__metadata__". */
plait_status plait_st_writer_declare(plait_st_writer *w, const char *name, int32_t ndim,
                                     const int64_t *shape);
/* Append the next `count` elements of tensor `name` (chunks in order; the
 * total must reach numel before finish). */
plait_status plait_st_writer_write(plait_st_writer *w, const char *name, const float *data,
                                   size_t count);
/* Check every tensor is complete, write the final header with checksums,
 * fsync and close the temp file. Optional out-params: the file's size. */
plait_status plait_st_writer_finish(plait_st_writer *w, uint64_t *file_bytes);
/* After finish: rename the temp file over `path`, fsync the directory, free w. */
plait_status plait_st_writer_commit(plait_st_writer *w);
/* Remove the temp file (if any) and free. NULL is ignored. */
void plait_st_writer_abort(plait_st_writer *w);
/* Free without removing the temp file, as a crash would leave it (tests). */
void plait_st_writer_abandon(plait_st_writer *w);
/* 1 if tensor `name` was declared (0 for a NULL writer). */
int plait_st_writer_has(plait_st_writer *w, const char *name);
/* Path of the temp file. */
const char *plait_st_writer_temp_path(const plait_st_writer *w);

/* ---- reader ------------------------------------------------------------ */
typedef struct plait_st_file plait_st_file;

enum {
    /* Check plait.header_crc32c and every plait.crc32c.<name> present, at
     * open (reads every tensor once). */
    PLAIT_ST_VERIFY = 1u << 0,
    /* A foreign file: accept F16, BF16 and F64 tensors, converted to float32
     * at open, and F32 tensors not 4-byte aligned, copied (the copies are
     * held until close); keep tensors of other dtypes with data NULL, for
     * the caller to ignore or refuse (plait_st_require_float). Without it
     * all of those are refused naming the dtype, and unaligned F32 data is
     * called damaged (plait's own files are aligned F32). */
    PLAIT_ST_CONVERT = 1u << 1,
    /* Accept every dtype as PLAIT_ST_CONVERT does, converting nothing:
     * tensors that are not F32 in place have data NULL (for a reader of
     * the header and metadata alone, at no memory the size of the model) */
    PLAIT_ST_ANY_DTYPE = 1u << 2
};

/* PLAIT_OK if tensor t has float32 data, else the refusal naming its dtype. */
plait_status plait_st_require_float(const plait_st_file *f, const plait_st_tensor *t);

/* Map and validate `path`. The caller closes *out. Read-only afterwards:
 * every accessor is thread-safe. */
plait_status plait_st_open(const char *path, unsigned flags, plait_st_file **out);
void plait_st_close(plait_st_file *f);
const char *plait_st_path(const plait_st_file *f);
size_t plait_st_count(const plait_st_file *f);
/* Tensors in data order (by offset). */
const plait_st_tensor *plait_st_tensor_at(const plait_st_file *f, size_t i);
/* Tensor `name`, or NULL. */
const plait_st_tensor *plait_st_find(const plait_st_file *f, const char *name);
/* __metadata__ value of `key`, or NULL. */
const char *plait_st_metadata(const plait_st_file *f, const char *key);
/* File offset of the data section (a tensor's bytes start at this plus its offset). */
uint64_t plait_st_data_start(const plait_st_file *f);
/* Verify one tensor's checksum now (PLAIT_OK when the file has none). */
plait_status plait_st_verify_tensor(const plait_st_file *f, const plait_st_tensor *t);
/* Give back the resident pages of `bytes` bytes at `data` within f's
 * mapping (the pages they touch, so a neighbour's first or last page too),
 * for a reader that reads each tensor once (plait export): its resident
 * memory then stays at what it reads next, not the file. Reading them
 * again is correct (the kernel maps them from the file again); bytes
 * outside the mapping (a converted copy) are left alone. Thread-safe: a
 * reader of those bytes at the same time still reads the file's values. */
void plait_st_release(const plait_st_file *f, const void *data, size_t bytes);

#endif
