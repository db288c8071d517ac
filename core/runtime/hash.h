/*
 * The core's two small hashes, each defined once: FNV-1a over bytes (names,
 * keys, identities) and splitmix64's finaliser (a bijection on 64 bits with
 * full avalanche: counter-based random streams, derived ids). Pure
 * functions; thread-safe.
 */
#ifndef PLAIT_CORE_RUNTIME_HASH_H
#define PLAIT_CORE_RUNTIME_HASH_H

#include <stddef.h>
#include <stdint.h>

#define PLAIT_FNV1A_BASIS 0xcbf29ce484222325ull

/* FNV-1a of `n` bytes continued from `h` (PLAIT_FNV1A_BASIS to start). */
static inline uint64_t plait_fnv1a(uint64_t h, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

/* FNV-1a of a NUL-terminated string. */
static inline uint64_t plait_fnv1a_str(const char *s) {
    uint64_t h = PLAIT_FNV1A_BASIS;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* splitmix64's finaliser (splitmix64 itself is plait_mix64(state + 0x9e3779b97f4a7c15)). */
static inline uint64_t plait_mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

#endif
