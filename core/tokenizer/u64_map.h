/*
 * An open-addressing hash map from uint64 keys to int64 values, for the
 * tokenizer's pair tables (a pair of token ids packed as a << 32 | b).
 * UINT64_MAX is reserved (the empty-slot marker). Grows by doubling at 1/2
 * load. Not thread-safe while being written; lookups on an unchanging map
 * may run concurrently. The map owns its memory (plait_u64_map_free).
 */
#ifndef PLAIT_CORE_TOKENIZER_U64_MAP_H
#define PLAIT_CORE_TOKENIZER_U64_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct plait_u64_map {
    uint64_t *keys;
    int64_t *values;
    size_t cap;   /* power of two, or 0 */
    size_t count;
} plait_u64_map;

/* The value of `key`, or NULL. The pointer stays valid until the next insert. */
int64_t *plait_u64_map_find(const plait_u64_map *m, uint64_t key);
/* The value slot of `key`, inserted with `initial` if absent (*inserted
 * tells which, when not NULL); NULL when out of memory. */
int64_t *plait_u64_map_upsert(plait_u64_map *m, uint64_t key, int64_t initial, int *inserted);
void plait_u64_map_free(plait_u64_map *m);

static inline uint64_t plait_pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

#endif
