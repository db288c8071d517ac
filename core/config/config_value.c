#include "config/config_value.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *plait_key_type_name(plait_key_type type) {
    switch (type) {
    case PLAIT_KEY_INT: return "int";
    case PLAIT_KEY_FLOAT: return "float";
    case PLAIT_KEY_BOOL: return "bool";
    case PLAIT_KEY_STRING: return "string";
    case PLAIT_KEY_ENUM: return "enum";
    case PLAIT_KEY_LIST: return "list";
    case PLAIT_KEY_BYTES: return "byte size";
    }
    return "?";
}

int plait_parse_bytes(const char *text, uint64_t *out) {
    errno = 0;
    char *end = NULL;
    while (isspace((unsigned char)*text)) text++;
    if (*text == '-' || !isdigit((unsigned char)*text)) return -1;
    double v = strtod(text, &end);
    if (errno || end == text) return -1;
    while (isspace((unsigned char)*end)) end++;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0; end++; break;
    case 'M': mult = 1024.0 * 1024; end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024; end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024; end++; break;
    default: break;
    }
    if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'B' || *end == 'b') end++;
    while (isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    double bytes = v * mult;
    if (!isfinite(bytes) || bytes > 1.8e19 || bytes != floor(bytes)) return -1;
    *out = (uint64_t)bytes;
    return 0;
}

void plait_format_bytes(uint64_t bytes, char *buf, size_t len) {
    static const char suffix[] = {'T', 'G', 'M', 'K'};
    for (int i = 0; i < 4; i++) {
        uint64_t unit = 1ull << (10 * (4 - i));
        if (bytes >= unit && bytes % unit == 0) {
            snprintf(buf, len, "%" PRIu64 "%c", bytes / unit, suffix[i]);
            return;
        }
    }
    snprintf(buf, len, "%" PRIu64, bytes);
}

static int range_set(const plait_key_decl *d) { return d->min <= d->max; }

static void fmt_num(const plait_key_decl *d, double v, char *buf, size_t len) {
    if (d->type == PLAIT_KEY_BYTES && v >= 0) {
        plait_format_bytes((uint64_t)v, buf, len);
    } else if (d->type == PLAIT_KEY_INT) {
        snprintf(buf, len, "%.0f", v);
    } else {
        /* the shortest text that reads back as the bound itself: a bound of
         * 0.999999999 must not print as 1, which it refuses */
        for (int digits = 6; digits <= 17; digits++) {
            snprintf(buf, len, "%.*g", digits, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
}

void plait_value_describe(const plait_key_decl *d, char *buf, size_t len) {
    size_t n = 0;
    if ((d->type == PLAIT_KEY_ENUM || d->type == PLAIT_KEY_LIST) && d->choices) {
        n += (size_t)snprintf(buf + n, len - n, "%s", d->type == PLAIT_KEY_ENUM ? "one of: " : "comma-separated list of: ");
        for (int i = 0; d->choices[i] && n < len; i++)
            n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", d->choices[i]);
        return;
    }
    n += (size_t)snprintf(buf, len, "%s", d->type == PLAIT_KEY_BYTES ? "byte size (e.g. 4096, 64K, 25M, 1G)" :
                                           d->type == PLAIT_KEY_BOOL ? "bool (true/false)" :
                                           plait_key_type_name(d->type));
    if (range_set(d) && n < len &&
        (d->type == PLAIT_KEY_INT || d->type == PLAIT_KEY_FLOAT || d->type == PLAIT_KEY_BYTES)) {
        char lo[32], hi[32];
        fmt_num(d, d->min, lo, sizeof lo);
        fmt_num(d, d->max, hi, sizeof hi);
        snprintf(buf + n, len - n, " in [%s, %s]", lo, hi);
    }
}

static int check_range(const plait_key_decl *d, double v, const char *text, char *why, size_t wl) {
    if (!range_set(d) || (v >= d->min && v <= d->max)) return 0;
    char lo[32], hi[32];
    fmt_num(d, d->min, lo, sizeof lo);
    fmt_num(d, d->max, hi, sizeof hi);
    snprintf(why, wl, "value '%s' is out of range [%s, %s]", text, lo, hi);
    return -1;
}

static int in_choices(const plait_key_decl *d, const char *s) {
    for (int i = 0; d->choices && d->choices[i]; i++)
        if (strcmp(d->choices[i], s) == 0) return i;
    return -1;
}

static void choice_error(const plait_key_decl *d, const char *s, char *why, size_t wl) {
    size_t n = 0;
    for (int i = 0; d->choices && d->choices[i]; i++) n++;
    const char *hint = plait_suggest(s, (const char *const *)d->choices, n);
    char allowed[512];
    plait_value_describe(d, allowed, sizeof allowed);
    if (hint)
        snprintf(why, wl, "value '%s' is not allowed; did you mean '%s'? (%s)", s, hint, allowed);
    else
        snprintf(why, wl, "value '%s' is not allowed (%s)", s, allowed);
}

static char *trim_dup(const char *b, const char *e) {
    while (b < e && isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    char *s = malloc((size_t)(e - b) + 1);
    if (!s) return NULL;
    memcpy(s, b, (size_t)(e - b));
    s[e - b] = '\0';
    return s;
}

int plait_value_parse(const plait_key_decl *d, const char *text, plait_value *out,
                      char ***list_storage, char *why, size_t wl) {
    memset(out, 0, sizeof *out);
    out->type = d->type;
    out->s = text;
    char *end = NULL;
    switch (d->type) {
    case PLAIT_KEY_INT: {
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (errno == ERANGE) {
            snprintf(why, wl, "value '%s' does not fit a 64-bit integer", text);
            return -1;
        }
        if (end == text || *end) {
            snprintf(why, wl, "value '%s' is not an integer", text);
            return -1;
        }
        out->i = v;
        out->f = (double)v;
        return check_range(d, (double)v, text, why, wl);
    }
    case PLAIT_KEY_FLOAT: {
        errno = 0;
        double v = strtod(text, &end);
        if (end == text || *end || errno == ERANGE || !isfinite(v)) {
            snprintf(why, wl, "value '%s' is not a finite number", text);
            return -1;
        }
        out->f = v;
        /* the integer view of a float is a convenience; huge values saturate */
        out->i = v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : (int64_t)v;
        return check_range(d, v, text, why, wl);
    }
    case PLAIT_KEY_BOOL: {
        static const char *const yes[] = {"true", "yes", "on", "1"};
        static const char *const no[] = {"false", "no", "off", "0"};
        for (int i = 0; i < 4; i++) {
            if (strcasecmp(text, yes[i]) == 0) { out->i = 1; out->f = 1; return 0; }
            if (strcasecmp(text, no[i]) == 0) { out->i = 0; return 0; }
        }
        snprintf(why, wl, "value '%s' is not a bool (use true or false)", text);
        return -1;
    }
    case PLAIT_KEY_STRING:
        if ((d->flags & PLAIT_KEY_REQUIRED) && !*text) {
            snprintf(why, wl, "value must not be empty");
            return -1;
        }
        return 0;
    case PLAIT_KEY_ENUM: {
        int idx = in_choices(d, text);
        if (idx < 0) {
            choice_error(d, text, why, wl);
            return -1;
        }
        out->i = idx;
        return 0;
    }
    case PLAIT_KEY_LIST: {
        size_t cap = 1;
        for (const char *p = text; *p; p++) cap += *p == ',';
        char **items = calloc(cap + 1, sizeof *items);
        if (!items) {
            snprintf(why, wl, "out of memory");
            return -1;
        }
        size_t n = 0;
        const char *b = text;
        for (;;) {
            const char *e = strchr(b, ',');
            if (!e) e = b + strlen(b);
            char *item = trim_dup(b, e);
            if (!item) break;
            if (*item) {
                items[n++] = item;
                if (d->choices && in_choices(d, item) < 0) {
                    choice_error(d, item, why, wl);
                    for (size_t i = 0; i < n; i++) free(items[i]);
                    free(items);
                    return -1;
                }
            } else {
                free(item);
            }
            if (!*e) break;
            b = e + 1;
        }
        *list_storage = items;
        out->list = (const char *const *)items;
        out->list_len = n;
        return 0;
    }
    case PLAIT_KEY_BYTES: {
        uint64_t v;
        if (plait_parse_bytes(text, &v) != 0) {
            snprintf(why, wl, "value '%s' is not a byte size (examples: 4096, 64K, 25M, 1G)", text);
            return -1;
        }
        out->i = (int64_t)v;
        out->f = (double)v;
        return check_range(d, (double)v, text, why, wl);
    }
    }
    snprintf(why, wl, "internal: unknown type %d", (int)d->type);
    return -1;
}

size_t plait_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return la > lb ? la : lb;
    size_t d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = j;
    for (size_t i = 1; i <= la; i++) {
        for (size_t j = 1; j <= lb; j++) {
            size_t cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            size_t best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best) best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best) best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[la][lb];
}

/* "learning_rate" -> "lr" */
static void initials(const char *s, char *out, size_t len) {
    size_t n = 0;
    int start = 1;
    for (; *s && n + 1 < len; s++) {
        if (*s == '_' || *s == '-' || *s == '.') {
            start = 1;
            continue;
        }
        if (start) out[n++] = (char)tolower((unsigned char)*s);
        start = 0;
    }
    out[n] = '\0';
}

const char *plait_suggest(const char *word, const char *const *cands, size_t n) {
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    size_t wl = strlen(word);
    size_t limit = wl <= 3 ? 1 : wl <= 6 ? 2 : 3;
    for (size_t i = 0; i < n; i++) {
        size_t d = plait_edit_distance(word, cands[i]);
        if (d <= limit && d < best_d) {
            best = cands[i];
            best_d = d;
        }
    }
    if (best) return best;
    /* Abbreviations: initials of the unknown word's parts match a key
     * ("lerning_rate" -> "lr"), or the unknown word is a key's initials. */
    char wi[64], ci[64];
    initials(word, wi, sizeof wi);
    for (size_t i = 0; i < n; i++) {
        initials(cands[i], ci, sizeof ci);
        if ((strlen(wi) >= 2 && strcasecmp(wi, cands[i]) == 0) ||
            (strlen(ci) >= 2 && strcasecmp(ci, word) == 0))
            return cands[i];
    }
    /* A key that contains the word or is contained in it ("batch" -> "micro_batch"). */
    for (size_t i = 0; i < n; i++)
        if (wl >= 4 && (strstr(cands[i], word) || strstr(word, cands[i]))) return cands[i];
    return NULL;
}
