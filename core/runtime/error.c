#include "runtime/error.h"

#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define PLAIT_ERROR_MAX 2048

static _Thread_local char error_text[PLAIT_ERROR_MAX];
static _Thread_local uint64_t error_sets; /* messages set or wrapped on this thread */

/* Length of the valid UTF-8 sequence at s (not a C1 control), or 0. */
static size_t utf8_len(const unsigned char *s) {
    size_t n = s[0] > 0xf4 ? 0 : s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
    if (n == 0) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 2 && s[0] == 0xc2 && s[1] < 0xa0) return 0;            /* U+0080..U+009F: C1 controls */
    if (n == 3 && s[0] == 0xe0 && s[1] < 0xa0) return 0;            /* overlong */
    if (n == 3 && s[0] == 0xed && s[1] >= 0xa0) return 0;           /* surrogates */
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return n;
}

size_t plait_printable_copy(char *out, size_t cap, const char *raw) {
    const unsigned char *s = (const unsigned char *)(raw ? raw : "");
    size_t o = 0;
    if (!cap) return 0;
    while (*s && o + 5 < cap) {
        size_t n = *s < 0x80 ? 1 : utf8_len(s);
        if ((*s < 0x20 && *s != '\n' && *s != '\t') || *s == 0x7f || n == 0) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *s);
            s++;
            continue;
        }
        memcpy(out + o, s, n);
        o += n;
        s += n;
    }
    out[o] = '\0';
    return o;
}

/* Messages quote what users and peers gave (config text, file names,
 * metadata); they end up on terminals and in logs, so they are stored
 * printable (plait_printable_copy: an escape sequence in a config must not
 * drive the terminal). */
static void store_printable(const char *raw) {
    plait_printable_copy(error_text, sizeof error_text, raw);
    error_sets++;
}

plait_status plait_vset_error(plait_status status, const char *fmt, va_list ap) {
    char raw[PLAIT_ERROR_MAX];
    vsnprintf(raw, sizeof raw, fmt, ap);
    store_printable(raw);
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
    char raw[PLAIT_ERROR_MAX];
    snprintf(raw, sizeof raw, "%s: %s", prefix, old);
    store_printable(raw);
    return status;
}

const char *plait_last_error(void) { return error_text; }

void plait_clear_error(void) { error_text[0] = '\0'; }

uint64_t plait_error_sets(void) { return error_sets; }

static _Atomic int g_final;
void plait_error_mark_final(void) { atomic_store(&g_final, 1); }
int plait_error_is_final(void) { return atomic_load(&g_final); }

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

const char *plait_error_relayed(const char *message, int *origin) {
    static const char *const marks[] = {"is going down: ", " stopped after "};
    *origin = -1;
    /* the chain nests to the right: the last mark precedes the innermost account */
    const char *root = NULL;
    for (size_t m = 0; m < sizeof marks / sizeof marks[0]; m++)
        for (const char *p = strstr(message, marks[m]); p; p = strstr(p + 1, marks[m]))
            if (!root || p + strlen(marks[m]) > root) root = p + strlen(marks[m]);
    if (!root) return NULL;
    int n = -1, used = 0;
    const char *w = strstr(root, "(world rank ");
    if ((sscanf(root, "rank %d stopped%n", &n, &used) == 1 && used > 0) ||
        (sscanf(root, "world rank %d%n", &n, &used) == 1 && used > 0) ||
        (w && sscanf(w, "(world rank %d)%n", &n, &used) == 1 && used > 0))
        *origin = n >= 0 ? n : -1;
    return root;
}

int plait_error_waited_for(const char *message) {
    const char *t = message ? strstr(message, "timed out") : NULL;
    const char *w = t ? strstr(t, "(world rank ") : NULL;
    int n = -1;
    if (w && sscanf(w, "(world rank %d)", &n) == 1 && n >= 0) return n;
    return -1;
}

int plait_error_store_host(const char *message) {
    const char *m = message ? strstr(message, "the job's store (hosted by rank ") : NULL;
    int n = -1;
    if (m && sscanf(m, "the job's store (hosted by rank %d)", &n) == 1 && n >= 0) return n;
    return -1;
}
