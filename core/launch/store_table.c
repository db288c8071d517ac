#include "launch/store_table.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/hash.h"

static uint64_t hash_key(const char *k, size_t n) { return plait_fnv1a(PLAIT_FNV1A_BASIS, k, n); }

int store_table_init(store_table *t) {
    t->n_buckets = 64;
    t->n_keys = 0;
    t->buckets = calloc(t->n_buckets, sizeof *t->buckets);
    return t->buckets ? 0 : -1;
}

store_kv *store_table_find(const store_table *t, const char *key, size_t klen) {
    uint64_t h = hash_key(key, klen);
    for (store_kv *e = t->buckets[h & (t->n_buckets - 1)]; e; e = e->next)
        if (e->hash == h && strlen(e->key) == klen && memcmp(e->key, key, klen) == 0) return e;
    return NULL;
}

static int grow(store_table *t) {
    size_t nb = t->n_buckets * 2;
    store_kv **b = calloc(nb, sizeof *b);
    if (!b) return -1;
    for (size_t i = 0; i < t->n_buckets; i++)
        for (store_kv *e = t->buckets[i], *nx; e; e = nx) {
            nx = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
        }
    free(t->buckets);
    t->buckets = b;
    t->n_buckets = nb;
    return 0;
}

int store_table_set(store_table *t, const char *key, size_t klen, const void *val, size_t vlen) {
    unsigned char *copy = malloc(vlen ? vlen : 1);
    if (!copy) return -1;
    if (vlen) memcpy(copy, val, vlen);
    store_kv *e = store_table_find(t, key, klen);
    if (e) {
        free(e->val);
        e->val = copy;
        e->vlen = vlen;
        return 0;
    }
    if (t->n_keys + 1 > t->n_buckets && grow(t) != 0) {
        free(copy);
        return -1;
    }
    e = calloc(1, sizeof *e);
    char *k = malloc(klen + 1);
    if (!e || !k) {
        free(e);
        free(k);
        free(copy);
        return -1;
    }
    memcpy(k, key, klen);
    k[klen] = '\0';
    e->key = k;
    e->hash = hash_key(key, klen);
    e->val = copy;
    e->vlen = vlen;
    e->next = t->buckets[e->hash & (t->n_buckets - 1)];
    t->buckets[e->hash & (t->n_buckets - 1)] = e;
    t->n_keys++;
    return 0;
}

void store_table_free(store_table *t) {
    for (size_t i = 0; t->buckets && i < t->n_buckets; i++)
        for (store_kv *e = t->buckets[i], *nx; e; e = nx) {
            nx = e->next;
            free(e->key);
            free(e->val);
            free(e);
        }
    free(t->buckets);
    t->buckets = NULL;
}
