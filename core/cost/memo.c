/* Values kept by a layout key: an open-addressed hash table over the entries. */
#include "cost/memo.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/hash.h"

typedef struct memo_entry {
    plait_cost_layout key;
    void *value; /* its own allocation, kept across clears for the entry that reuses it */
    size_t cap;
} memo_entry;

struct plait_cost_memo {
    memo_entry *e;
    size_t n, cap; /* entries in use, allocated */
    size_t *slot;  /* 1 + an entry's index, 0 = empty; a power of two of them */
    size_t n_slots;
};

plait_cost_memo *plait_cost_memo_new(void) { return calloc(1, sizeof(plait_cost_memo)); }

void plait_cost_memo_free(plait_cost_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) free(m->e[i].value);
    free(m->e);
    free(m->slot);
    free(m);
}

void plait_cost_memo_clear(plait_cost_memo *m) {
    m->n = 0;
    if (m->slot) memset(m->slot, 0, m->n_slots * sizeof *m->slot);
}

/* A key's first slot: its bytes eight at a time, each word multiplied in,
 * the sum through splitmix64's finaliser (FNV-1a's byte a step was most
 * of a lookup's time). */
static size_t home(const plait_cost_memo *m, const plait_cost_layout *key) {
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = 0, w;
    size_t i = 0;
    for (; i + 8 <= sizeof *key; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    if (i < sizeof *key) {
        w = 0;
        memcpy(&w, p + i, sizeof *key - i);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    return (size_t)plait_mix64(h) & (m->n_slots - 1);
}

void *plait_cost_memo_find(const plait_cost_memo *m, const plait_cost_layout *key) {
    if (!m->n) return NULL;
    for (size_t s = home(m, key);; s = (s + 1) & (m->n_slots - 1)) {
        if (!m->slot[s]) return NULL;
        memo_entry *e = &m->e[m->slot[s] - 1];
        if (!memcmp(&e->key, key, sizeof *key)) return e->value;
    }
}

static void place(plait_cost_memo *m, size_t i) {
    size_t s = home(m, &m->e[i].key);
    while (m->slot[s]) s = (s + 1) & (m->n_slots - 1);
    m->slot[s] = i + 1;
}

/* Room for one more entry, the table at most half full. */
static int grow(plait_cost_memo *m) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        memo_entry *e = realloc(m->e, cap * sizeof *e);
        if (!e) return -1;
        memset(e + m->cap, 0, (cap - m->cap) * sizeof *e);
        m->e = e, m->cap = cap;
    }
    if (2 * (m->n + 1) <= m->n_slots) return 0;
    size_t n_slots = m->n_slots ? 2 * m->n_slots : 128;
    size_t *slot = calloc(n_slots, sizeof *slot);
    if (!slot) return -1;
    free(m->slot);
    m->slot = slot, m->n_slots = n_slots;
    for (size_t i = 0; i < m->n; i++) place(m, i);
    return 0;
}

void *plait_cost_memo_keep(plait_cost_memo *m, const plait_cost_layout *key, const void *value, size_t size) {
    if (grow(m) != 0) return NULL;
    memo_entry *e = &m->e[m->n];
    if (e->cap < size) {
        void *v = realloc(e->value, size);
        if (!v) return NULL;
        e->value = v, e->cap = size;
    }
    memcpy(e->value, value, size);
    memcpy(&e->key, key, sizeof *key); /* the padding too: keys compare as bytes */
    place(m, m->n++);
    return e->value;
}
