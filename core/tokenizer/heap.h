/*
 * A binary heap of fixed-size elements; the element for which `before`
 * holds against all others comes out first. Used by BPE encoding (the
 * lowest-ranked pair) and training (the most frequent pair). The heap owns
 * its array (plait_heap_free); not thread-safe.
 */
#ifndef PLAIT_CORE_TOKENIZER_HEAP_H
#define PLAIT_CORE_TOKENIZER_HEAP_H

#include <stddef.h>

typedef struct plait_heap {
    unsigned char *data;
    size_t len, cap, size;                   /* elements held, room, bytes per element */
    int (*before)(const void *a, const void *b);
} plait_heap;

/* An empty heap of `size`-byte elements. */
void plait_heap_init(plait_heap *h, size_t size, int (*before)(const void *a, const void *b));
/* Room for `n` elements in all: -1 when out of memory. */
int plait_heap_reserve(plait_heap *h, size_t n);
/* Add a copy of *elem (growing as needed): -1 when out of memory. */
int plait_heap_push(plait_heap *h, const void *elem);
/* Remove the first element into *out; the heap must not be empty. */
void plait_heap_pop(plait_heap *h, void *out);
void plait_heap_free(plait_heap *h);

#endif
