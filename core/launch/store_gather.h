/*
 * The rendezvous store's record of its gathers: how many members each
 * gather (a key prefix) has, who contributed each index, and the gathers
 * that can never complete because their members disagree:
 *  - two members count a different number of members (two hosts' launchers
 *    given different layouts: a world of 2 against one of 4);
 *  - two contributions of different bytes claim one index (two processes
 *    both rank 2: the same --node-rank given to two hosts' launchers).
 * Such a gather fails for good: every member waiting in it, and every one
 * that arrives later, is answered with the reason, naming both sides, at
 * once instead of waiting out its timeout. The same bytes given twice (a
 * retry) are no conflict.
 *
 * Not thread-safe: the server's single thread owns it (store_server.c).
 */
#ifndef PLAIT_CORE_LAUNCH_STORE_GATHER_H
#define PLAIT_CORE_LAUNCH_STORE_GATHER_H

#include <stddef.h>
#include <stdint.h>

#include "launch/store_table.h"

typedef struct store_gathers {
    store_table sizes;  /* prefix -> the first member's count, rank and address */
    store_table owners; /* "<prefix><index>" -> the contributor's rank and address */
    store_table failed; /* prefix -> why it can never complete */
} store_gathers;

/* 0, or -1 when out of memory. */
int store_gathers_init(store_gathers *g);
void store_gathers_free(store_gathers *g);

/* The reason gather `prefix` (plen bytes) can never complete, or NULL. */
const char *store_gathers_failed(const store_gathers *g, const char *prefix, size_t plen);

/* A contribution by world rank `rank` connected from `peer`: `n` members,
 * this one at `index`, `val` its bytes; `table` is the store's table (the
 * earlier contribution of that index, if any, is there). Returns NULL when
 * it fits what the others said (and records it), else the reason the
 * gather fails (recorded; valid until the next call). Out of memory: the
 * contribution is taken unchecked. */
const char *store_gathers_check(store_gathers *g, const store_table *table, const char *prefix, size_t plen,
                                uint32_t n, uint32_t index, int32_t rank, const char *peer, const void *val,
                                size_t vlen);

#endif
