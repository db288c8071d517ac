#include "checkpoint/string_pairs.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

ssize_t plait_string_pairs_find(const plait_string_pairs *p, const char *key) {
    for (size_t i = 0; i < p->n; i++)
        if (strcmp(p->key[i], key) == 0) return (ssize_t)i;
    return -1;
}

plait_status plait_string_pairs_append(plait_string_pairs *p, const char *key, const char *value) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 8;
        /* each array grown on its own: one that moved is kept even when
         * the other fails, so nothing is lost or freed twice */
        char **k = realloc(p->key, cap * sizeof *k);
        if (k) p->key = k;
        char **v = realloc(p->val, cap * sizeof *v);
        if (v) p->val = v;
        if (!k || !v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        p->cap = cap;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    p->key[p->n] = k;
    p->val[p->n++] = v;
    return PLAIT_OK;
}

plait_status plait_string_pairs_set(plait_string_pairs *p, size_t i, const char *value) {
    char *v = strdup(value);
    if (!v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    free(p->val[i]);
    p->val[i] = v;
    return PLAIT_OK;
}

void plait_string_pairs_free(plait_string_pairs *p) {
    for (size_t i = 0; i < p->n; i++) {
        free(p->key[i]);
        free(p->val[i]);
    }
    free(p->key);
    free(p->val);
    memset(p, 0, sizeof *p);
}
