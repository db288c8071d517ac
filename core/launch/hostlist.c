/* Slurm host-list expansion (hostlist.h). */
#include "launch/hostlist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

#define NAME_MAX_LEN 1024

typedef struct out_list {
    char **names;
    int n, cap;
    const char *list, *what;
} out_list;

static plait_status bad(const out_list *o, const char *why) {
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s='%s' is not a host list: %s", o->what, o->list, why);
}

static plait_status push(out_list *o, const char *name) {
    if (o->n >= PLAIT_HOSTLIST_MAX) return bad(o, "more than 65536 names");
    if (o->n == o->cap) {
        int cap = o->cap ? 2 * o->cap : 16;
        char **p = realloc(o->names, sizeof *p * (size_t)cap);
        if (!p) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory expanding %s", o->what);
        o->names = p;
        o->cap = cap;
    }
    if (!(o->names[o->n] = strdup(name))) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    o->n++;
    return PLAIT_OK;
}

/* Parse an unsigned number of 1..9 digits at s[0..len); its digit count in *width. */
static int number(const char *s, size_t len, long *v, int *width) {
    if (len == 0 || len > 9) return -1;
    long x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    *width = (int)len;
    return 0;
}

/* Expand one name `s[0..len)` with `prefix` (already expanded) in front. */
static plait_status expand_name(out_list *o, const char *prefix, const char *s, size_t len) {
    const char *open = memchr(s, '[', len);
    const char *close_before = memchr(s, ']', open ? (size_t)(open - s) : len);
    if (close_before) return bad(o, "']' without '['");
    char buf[NAME_MAX_LEN];
    if (!open) {
        if (strlen(prefix) + len + 1 > sizeof buf) return bad(o, "a name longer than 1023 bytes");
        snprintf(buf, sizeof buf, "%s%.*s", prefix, (int)len, s);
        return push(o, buf);
    }
    const char *close = memchr(open, ']', len - (size_t)(open - s));
    if (!close) return bad(o, "'[' without ']'");
    if (memchr(open + 1, '[', (size_t)(close - open - 1))) return bad(o, "nested '['");
    size_t head = (size_t)(open - s);
    if (strlen(prefix) + head + 12 > sizeof buf) return bad(o, "a name longer than 1023 bytes");
    const char *rest = close + 1;
    size_t rest_len = len - (size_t)(rest - s);
    /* each comma-separated item of the group */
    const char *p = open + 1;
    while (p <= close) {
        const char *end = memchr(p, ',', (size_t)(close - p));
        if (!end) end = close;
        const char *dash = memchr(p, '-', (size_t)(end - p));
        long lo, hi;
        int wlo, whi;
        if (number(p, (size_t)((dash ? dash : end) - p), &lo, &wlo) != 0 ||
            (dash && number(dash + 1, (size_t)(end - dash - 1), &hi, &whi) != 0))
            return bad(o, "a bracket holds something other than numbers and ranges of 1-9 digits");
        if (!dash) hi = lo;
        if (hi < lo) return bad(o, "a range ends below its start");
        if (hi - lo >= PLAIT_HOSTLIST_MAX) return bad(o, "more than 65536 names");
        for (long v = lo; v <= hi; v++) {
            snprintf(buf, sizeof buf, "%s%.*s%0*ld", prefix, (int)head, s, wlo, v);
            plait_status st = expand_name(o, buf, rest, rest_len);
            if (st != PLAIT_OK) return st;
        }
        p = end + 1;
    }
    return PLAIT_OK;
}

plait_status plait_hostlist_expand(const char *list, const char *what, char ***names, int *n) {
    out_list o = {.list = list ? list : "", .what = what ? what : "host list"};
    *names = NULL;
    *n = 0;
    const char *s = o.list;
    if (!*s) return bad(&o, "it is empty");
    plait_status st = PLAIT_OK;
    while (st == PLAIT_OK) {
        /* the name ends at a comma outside brackets */
        const char *e = s;
        int depth = 0;
        while (*e && (depth || *e != ',')) {
            if (*e == '[') depth++;
            else if (*e == ']') depth--;
            if (depth < 0 || depth > 1) break;
            e++;
        }
        if (depth < 0) st = bad(&o, "']' without '['");
        else if (depth > 1) st = bad(&o, "nested '['");
        else if (depth) st = bad(&o, "'[' without ']'");
        else if (e == s) st = bad(&o, "an empty name");
        else st = expand_name(&o, "", s, (size_t)(e - s));
        if (st != PLAIT_OK || !*e) break;
        s = e + 1;
        if (!*s) st = bad(&o, "an empty name");
    }
    if (st != PLAIT_OK) {
        plait_hostlist_free(o.names, o.n);
        return st;
    }
    *names = o.names;
    *n = o.n;
    return PLAIT_OK;
}

void plait_hostlist_free(char **names, int n) {
    for (int i = 0; names && i < n; i++) free(names[i]);
    free(names);
}

plait_status plait_hostlist_first(const char *list, const char *what, char *out, size_t cap) {
    char **names = NULL;
    int n = 0;
    plait_status st = plait_hostlist_expand(list, what, &names, &n);
    if (st != PLAIT_OK) return st;
    if (strlen(names[0]) >= cap)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: the host name '%s' is too long", what, names[0]);
    else
        snprintf(out, cap, "%s", names[0]);
    plait_hostlist_free(names, n);
    return st;
}
