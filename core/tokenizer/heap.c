#include "tokenizer/heap.h"

#include <stdlib.h>
#include <string.h>

#define AT(h, i) ((h)->data + (i) * (h)->size)

void plait_heap_init(plait_heap *h, size_t size, int (*before)(const void *a, const void *b)) {
    *h = (plait_heap){.size = size, .before = before};
}

int plait_heap_reserve(plait_heap *h, size_t n) {
    if (n <= h->cap) return 0;
    size_t cap = h->cap ? h->cap : 64;
    while (cap < n) cap *= 2;
    unsigned char *d = realloc(h->data, cap * h->size);
    if (!d) return -1;
    h->data = d;
    h->cap = cap;
    return 0;
}

int plait_heap_push(plait_heap *h, const void *elem) {
    if (plait_heap_reserve(h, h->len + 1) != 0) return -1;
    size_t i = h->len++;
    while (i > 0 && h->before(elem, AT(h, (i - 1) / 2))) {
        memcpy(AT(h, i), AT(h, (i - 1) / 2), h->size);
        i = (i - 1) / 2;
    }
    memcpy(AT(h, i), elem, h->size);
    return 0;
}

void plait_heap_pop(plait_heap *h, void *out) {
    memcpy(out, AT(h, 0), h->size);
    const unsigned char *last = AT(h, --h->len);
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->len) break;
        if (c + 1 < h->len && h->before(AT(h, c + 1), AT(h, c))) c++;
        if (!h->before(AT(h, c), last)) break;
        memcpy(AT(h, i), AT(h, c), h->size);
        i = c;
    }
    memmove(AT(h, i), last, h->size);
}

void plait_heap_free(plait_heap *h) {
    free(h->data);
    h->data = NULL;
    h->len = h->cap = 0;
}
