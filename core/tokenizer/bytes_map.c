#include "tokenizer/bytes_map.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/hash.h"

/* FNV-1a, then a final mix so the low bits used for the slot are spread. */
static uint64_t hash_bytes(const unsigned char *s, size_t n) {
    uint64_t h = plait_fnv1a(PLAIT_FNV1A_BASIS, s, n);
    h ^= h >> 32;
    return h * 0x9e3779b97f4a7c15ull;
}

static int key_equals(const plait_bytes_map *m, size_t entry, const void *key, size_t len) {
    return m->key_len[entry] == len && memcmp(m->pool + m->key_off[entry], key, len) == 0;
}

const unsigned char *plait_bytes_map_key(const plait_bytes_map *m, size_t i, size_t *len) {
    *len = m->key_len[i];
    return m->pool + m->key_off[i];
}

int64_t *plait_bytes_map_find(const plait_bytes_map *m, const void *key, size_t len) {
    if (!m->cap) return NULL;
    for (size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        uint32_t s = m->slots[i];
        if (!s) return NULL;
        if (key_equals(m, s - 1, key, len)) return &m->values[s - 1];
    }
}

static int rehash(plait_bytes_map *m) {
    size_t cap = m->cap ? m->cap * 2 : 256;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return -1;
    for (size_t e = 0; e < m->count; e++) {
        size_t i = (size_t)hash_bytes(m->pool + m->key_off[e], m->key_len[e]) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (uint32_t)(e + 1);
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return 0;
}

static int reserve(plait_bytes_map *m, size_t len) {
    if (m->pool_len + len > m->pool_cap) {
        size_t cap = m->pool_cap ? m->pool_cap : 4096;
        while (cap < m->pool_len + len) cap *= 2;
        unsigned char *p = realloc(m->pool, cap);
        if (!p) return -1;
        m->pool = p;
        m->pool_cap = cap;
    }
    if (m->count == m->entries_cap) {
        size_t cap = m->entries_cap ? m->entries_cap * 2 : 256;
        size_t *off = realloc(m->key_off, cap * sizeof *off);
        if (!off) return -1;
        m->key_off = off;
        uint32_t *kl = realloc(m->key_len, cap * sizeof *kl);
        if (!kl) return -1;
        m->key_len = kl;
        int64_t *v = realloc(m->values, cap * sizeof *v);
        if (!v) return -1;
        m->values = v;
        m->entries_cap = cap;
    }
    if (2 * (m->count + 1) > m->cap && rehash(m) != 0) return -1;
    return 0;
}

int64_t *plait_bytes_map_upsert(plait_bytes_map *m, const void *key, size_t len, int64_t initial, int *inserted) {
    if (inserted) *inserted = 0;
    int64_t *v = plait_bytes_map_find(m, key, len);
    if (v) return v;
    if (len > UINT32_MAX || m->count >= UINT32_MAX - 1 || reserve(m, len) != 0) return NULL;
    size_t e = m->count++;
    if (len) memcpy(m->pool + m->pool_len, key, len);
    m->key_off[e] = m->pool_len;
    m->key_len[e] = (uint32_t)len;
    m->pool_len += len;
    m->values[e] = initial;
    size_t i = (size_t)hash_bytes(key, len) & (m->cap - 1);
    while (m->slots[i]) i = (i + 1) & (m->cap - 1);
    m->slots[i] = (uint32_t)(e + 1);
    if (inserted) *inserted = 1;
    return &m->values[e];
}

void plait_bytes_map_free(plait_bytes_map *m) {
    free(m->pool);
    free(m->key_off);
    free(m->key_len);
    free(m->values);
    free(m->slots);
    memset(m, 0, sizeof *m);
}
