/*
 * What a search works out once and reuses for the layouts that share it:
 * values (any bytes) kept by a key, a plait_cost_layout holding only the
 * settings the value depends on. Keys compare as bytes: build each one
 * from a zeroed layout (memset) and copy in the settings that count, so
 * that the padding and the settings left out are zero alike.
 *
 * A memo owns copies of its keys and values; a value found stays where it
 * is until the memo is cleared or freed. Not thread-safe (a search's own).
 */
#ifndef PLAIT_CORE_COST_MEMO_H
#define PLAIT_CORE_COST_MEMO_H

#include <stddef.h>

#include "cost/layouts.h"

typedef struct plait_cost_memo plait_cost_memo;

/* An empty memo, or NULL when out of memory. Free with plait_cost_memo_free
 * (NULL is a no-op). */
plait_cost_memo *plait_cost_memo_new(void);
void plait_cost_memo_free(plait_cost_memo *m);

/* Forgets every key, keeping the memory for the next ones. */
void plait_cost_memo_clear(plait_cost_memo *m);

/* The value kept for `key`, or NULL. */
void *plait_cost_memo_find(const plait_cost_memo *m, const plait_cost_layout *key);

/* Keeps a copy of the `size` (> 0) bytes at `value` for `key` (not kept
 * already); returns the copy, or NULL when out of memory (nothing kept:
 * the caller works it out again the next time). */
void *plait_cost_memo_keep(plait_cost_memo *m, const plait_cost_layout *key, const void *value, size_t size);

#endif
