#include "tokenizer/u64_map.h"

#include <stdlib.h>

#define EMPTY UINT64_MAX

static size_t slot_of(uint64_t key, size_t cap) {
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    return (size_t)key & (cap - 1);
}

int64_t *plait_u64_map_find(const plait_u64_map *m, uint64_t key) {
    if (!m->cap) return NULL;
    for (size_t i = slot_of(key, m->cap);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return &m->values[i];
        if (m->keys[i] == EMPTY) return NULL;
    }
}

static int grow(plait_u64_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 64;
    uint64_t *keys = malloc(cap * sizeof *keys);
    int64_t *values = malloc(cap * sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return -1;
    }
    for (size_t i = 0; i < cap; i++) keys[i] = EMPTY;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == EMPTY) continue;
        size_t j = slot_of(m->keys[i], cap);
        while (keys[j] != EMPTY) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        values[j] = m->values[i];
    }
    free(m->keys);
    free(m->values);
    m->keys = keys;
    m->values = values;
    m->cap = cap;
    return 0;
}

int64_t *plait_u64_map_upsert(plait_u64_map *m, uint64_t key, int64_t initial, int *inserted) {
    if (inserted) *inserted = 0;
    if (2 * (m->count + 1) > m->cap && grow(m) != 0) return NULL;
    size_t i = slot_of(key, m->cap);
    while (m->keys[i] != EMPTY) {
        if (m->keys[i] == key) return &m->values[i];
        i = (i + 1) & (m->cap - 1);
    }
    m->keys[i] = key;
    m->values[i] = initial;
    m->count++;
    if (inserted) *inserted = 1;
    return &m->values[i];
}

void plait_u64_map_free(plait_u64_map *m) {
    free(m->keys);
    free(m->values);
    *m = (plait_u64_map){0};
}
