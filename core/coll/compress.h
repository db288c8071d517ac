/*
 * The wire formats of compressed collectives (plait_compression,
 * plait/coll.h): how float32 values travel between ranks when a collective
 * asks for compression. Reductions never happen here: a receiver decodes to
 * float32 and adds in float32.
 *
 *   bf16    2 bytes a value: the float's top 16 bits, rounded to nearest
 *           even (NaN stays NaN). Per element: where a value sits in the
 *           message does not change its bits.
 *   int8    per block of PLAIT_COMPRESS_BLOCK values, one float32 scale
 *           s = max|x| / 127 and a signed byte round(x / s) per value
 *           (s = 0: all zero); about 1 byte a value. A block holding a NaN
 *           or an infinity gets the scale NaN, so the values decode to NaN
 *           and the optimizer's non-finite check sees them.
 *   onebit  per block of PLAIT_COMPRESS_BLOCK_ONEBIT values, one float32
 *           scale s = sqrt(mean x^2) (summed in order, in double) and one
 *           sign bit per value: x decodes as +s or -s; 0.1875 bytes a value
 *           (21x less than float32). Lossy beyond repair on its own: it is
 *           used with error feedback (Seide et al. 2014, 1-bit Adam): the
 *           encoder adds what earlier encodings lost (`residual`) before
 *           encoding and keeps what this one loses. The root mean square
 *           (not the mean magnitude, which would lose less per step) keeps
 *           a block's decoded second moment equal to its input's, which is
 *           what Adam divides by: over 300 steps of gpt-tiny the mean
 *           magnitude trained to an 18% higher loss, the root mean square
 *           to 3%, and blocks of 64 did better than 256 (9%), as much as 32.
 * Blocks are counted from the first value handed to the encoder, so int8's
 * and onebit's bits depend on how a collective cuts its buffer into
 * messages (the algorithm, the group size, the host placement).
 *
 * Format of an encoded message of n values: bf16: n uint16. int8 and
 * onebit: one float32 scale per block (ceil(n / block)), then n int8 or
 * ceil(n / 8) bytes of sign bits (bit j%8 of byte j/8, 1 = negative). Host
 * byte order (the ranks of a job run one architecture).
 *
 * Pure, no allocation, thread-safe; deterministic (a fixed order for every
 * sum), whatever the thread count.
 */
#ifndef PLAIT_CORE_COMM_COMPRESS_H
#define PLAIT_CORE_COMM_COMPRESS_H

#include <stddef.h>
#include <plait/coll.h>

#define PLAIT_COMPRESS_BLOCK 256
#define PLAIT_COMPRESS_BLOCK_ONEBIT 64

/* "none", "bf16", "int8", "onebit"; "?" for another value. */
const char *plait_compress_name(plait_compression scheme);
/* Parse a name; -1 if unknown. */
int plait_compress_parse(const char *name);

/* Bytes of n float32 values encoded by `scheme` (none: 4n). */
size_t plait_compress_bytes(plait_compression scheme, size_t n);

/* Encode src[0, n) into dst (plait_compress_bytes(scheme, n) bytes). With
 * `residual` (onebit's error feedback; NULL otherwise, and ignored by bf16
 * and int8) the values encoded are src[i] + residual[i], and residual[i]
 * becomes that sum minus its decoded value. dst must not overlap src. */
void plait_compress_encode(plait_compression scheme, void *dst, const float *src, size_t n, float *residual);
/* Decode n values of `src` into dst. */
void plait_compress_decode(plait_compression scheme, float *dst, const void *src, size_t n);
/* dst = decode(encode(src)) with encode's residual rule: what a rank keeps
 * of a value it also sends (the sender uses what the receivers get). dst
 * may equal src. */
void plait_compress_round_trip(plait_compression scheme, float *dst, const float *src, size_t n, float *residual);

#endif
