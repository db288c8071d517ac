/*
 * An open-addressing hash map from byte strings (copied into the map) to
 * int64 values: token bytes -> id when a vocabulary is read, pre-token ->
 * count when a tokenizer is trained. Not thread-safe while being written.
 * The map owns its memory (plait_bytes_map_free).
 */
#ifndef PLAIT_CORE_TOKENIZER_BYTES_MAP_H
#define PLAIT_CORE_TOKENIZER_BYTES_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct plait_bytes_map {
    unsigned char *pool;    /* every key, back to back */
    size_t pool_len, pool_cap;
    size_t *key_off;        /* per entry, in insertion order */
    uint32_t *key_len;
    int64_t *values;
    size_t count, entries_cap;
    uint32_t *slots;        /* entry index + 1, 0 = empty */
    size_t cap;             /* power of two, or 0 */
} plait_bytes_map;

/* The value of `key`, or NULL. Valid until the next insert. */
int64_t *plait_bytes_map_find(const plait_bytes_map *m, const void *key, size_t len);
/* The value slot of `key`, inserted with `initial` if absent; NULL when out
 * of memory. Entries are numbered 0.. in insertion order. */
int64_t *plait_bytes_map_upsert(plait_bytes_map *m, const void *key, size_t len, int64_t initial, int *inserted);
/* Entry i's key (insertion order). */
const unsigned char *plait_bytes_map_key(const plait_bytes_map *m, size_t i, size_t *len);
void plait_bytes_map_free(plait_bytes_map *m);

#endif
