/* Helpers over the membership store's keys (store_keys.h). */
#include "elastic/store_keys.h"

#include <inttypes.h>
#include <stdio.h>

#include "runtime/error.h"

void elastic_key_lid(char *buf, size_t cap, const char *prefix, uint64_t lid) {
    snprintf(buf, cap, "%s%016" PRIx64, prefix, lid);
}

int elastic_get_now(plait_store *st, const char *key, void *buf, size_t cap, size_t *len) {
    size_t got = 0;
    plait_status s = plait_store_get(st, key, buf, cap, &got, 0);
    if (s == PLAIT_OK) {
        if (len) *len = got;
        return 1;
    }
    if (s == PLAIT_ERR_INVALID_ARG) { /* "not found" */
        plait_clear_error();
        return 0;
    }
    return -1;
}
