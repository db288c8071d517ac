/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA-256 (RFC 2104), for the rendezvous
 * store's challenge-response authentication: a MAC keyed by the job token
 * proves each side knows the token without sending it. Written from the
 * specifications; checked against their published test vectors
 * (tests/comm_transport/test_store.c). Pure functions, thread-safe.
 */
#ifndef PLAIT_CORE_LAUNCH_HMAC_SHA256_H
#define PLAIT_CORE_LAUNCH_HMAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define PLAIT_SHA256_BYTES 32

typedef struct plait_sha256 {
    uint32_t h[8];
    uint64_t bytes;       /* message length so far */
    unsigned char block[64];
    size_t used;          /* bytes waiting in block */
} plait_sha256;

void plait_sha256_init(plait_sha256 *s);
void plait_sha256_update(plait_sha256 *s, const void *data, size_t n);
void plait_sha256_final(plait_sha256 *s, unsigned char out[PLAIT_SHA256_BYTES]);

/* HMAC-SHA-256 of the concatenation of `n_parts` parts under `key`. */
void plait_hmac_sha256(const void *key, size_t key_len, const void *const *parts, const size_t *part_lens,
                       size_t n_parts, unsigned char out[PLAIT_SHA256_BYTES]);

#endif
