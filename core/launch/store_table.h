/*
 * The rendezvous store's key-value table: string keys, byte values,
 * chained hashing that doubles as it fills. Not thread-safe (the server's
 * single thread owns it).
 */
#ifndef PLAIT_CORE_STORE_TABLE_H
#define PLAIT_CORE_STORE_TABLE_H

#include <stddef.h>
#include <stdint.h>

typedef struct store_kv {
    struct store_kv *next;
    uint64_t hash;
    char *key;          /* NUL-terminated copy */
    unsigned char *val; /* never NULL (1 byte allocated for empty values) */
    size_t vlen;
} store_kv;

typedef struct store_table {
    store_kv **buckets;
    size_t n_buckets, n_keys;
} store_table;

/* 0, or -1 when out of memory. */
int store_table_init(store_table *t);
/* The entry for `key` (klen bytes, no NUL needed), or NULL. */
store_kv *store_table_find(const store_table *t, const char *key, size_t klen);
/* Insert or replace (both copied). 0, or -1 when out of memory (the table
 * is unchanged). */
int store_table_set(store_table *t, const char *key, size_t klen, const void *val, size_t vlen);
void store_table_free(store_table *t);

#endif
