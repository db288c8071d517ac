/*
 * An ordered list of string key/value pairs that owns its copies: the
 * metadata a checkpoint writer puts in state.json and a safetensors writer
 * in its header's "__metadata__", each rendered in the order added.
 *
 * A zeroed plait_string_pairs is empty and ready; plait_string_pairs_free
 * releases every copy and leaves it empty again. Not thread-safe: one
 * writer owns each list.
 */
#ifndef PLAIT_CORE_CHECKPOINT_STRING_PAIRS_H
#define PLAIT_CORE_CHECKPOINT_STRING_PAIRS_H

#include <stddef.h>
#include <sys/types.h>
#include <plait/types.h>

typedef struct plait_string_pairs {
    char **key, **val; /* n entries each, NUL-terminated copies */
    size_t n, cap;
} plait_string_pairs;

/* The index of `key`, or -1. */
ssize_t plait_string_pairs_find(const plait_string_pairs *p, const char *key);

/* Append copies of key and value (no check for a key already there).
 * PLAIT_ERR_NO_MEMORY leaves the list as it was. */
plait_status plait_string_pairs_append(plait_string_pairs *p, const char *key, const char *value);

/* Replace entry i's value with a copy of `value`; PLAIT_ERR_NO_MEMORY
 * leaves the old value. */
plait_status plait_string_pairs_set(plait_string_pairs *p, size_t i, const char *value);

void plait_string_pairs_free(plait_string_pairs *p);

#endif
