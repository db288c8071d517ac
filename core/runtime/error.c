#include "runtime/error.h"

#include <stdio.h>
#include <string.h>

#define PLAIT_ERROR_MAX 2048

static _Thread_local char error_text[PLAIT_ERROR_MAX];

plait_status plait_vset_error(plait_status status, const char *fmt, va_list ap) {
    vsnprintf(error_text, sizeof error_text, fmt, ap);
    return status;
}

plait_status plait_set_error(plait_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plait_vset_error(status, fmt, ap);
    va_end(ap);
    return status;
}

plait_status plait_wrap_error(plait_status status, const char *fmt, ...) {
    char prefix[PLAIT_ERROR_MAX];
    char old[PLAIT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, error_text, sizeof old);
    snprintf(error_text, sizeof error_text, "%s: %s", prefix, old);
    return status;
}

const char *plait_last_error(void) { return error_text; }

void plait_clear_error(void) { error_text[0] = '\0'; }

const char *plait_status_name(plait_status status) {
    switch (status) {
    case PLAIT_OK: return "ok";
    case PLAIT_ERR_UNSUPPORTED: return "unsupported";
    case PLAIT_ERR_INVALID_CONFIG: return "invalid config";
    case PLAIT_ERR_INVALID_ARG: return "invalid argument";
    case PLAIT_ERR_SYSTEM: return "system error";
    case PLAIT_ERR_PEER_LOST: return "peer lost";
    case PLAIT_ERR_TIMEOUT: return "timeout";
    case PLAIT_ERR_NO_MEMORY: return "out of memory";
    case PLAIT_ERR_PROTOCOL: return "protocol error";
    case PLAIT_ERR_INTERNAL: return "internal error";
    case PLAIT_ERR_ABI: return "ABI mismatch";
    }
    return "unknown status";
}
