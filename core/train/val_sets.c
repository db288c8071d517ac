/* Named validation sets ([data] val_sets, val_sets.h). */
#include "train/val_sets.h"

#include <stdio.h>
#include <string.h>

#include "runtime/error.h"

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

plait_status plait_val_sets_parse(const plait_config *cfg, plait_val_sets *out) {
    out->n = 0;
    const char *value = plait_config_str(cfg, "data", "val_sets");
    if (!value || !*value) return PLAIT_OK;
    const char *where = "config";
    plait_config_origin(cfg, "data", "val_sets", &where);
    for (const char *p = value; *p;) {
        p += strspn(p, ", \t\n");
        if (!*p) break;
        const size_t len = strcspn(p, ", \t\n");
        const char *eq = memchr(p, '=', len);
        const size_t name_len = eq ? (size_t)(eq - p) : 0, pattern_len = eq ? len - name_len - 1 : 0;
        if (out->n == PLAIT_VAL_SETS_MAX)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: [data] val_sets names more than %d sets", where,
                                   PLAIT_VAL_SETS_MAX);
        if (!eq || name_len == 0 || pattern_len == 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] val_sets = %s: '%.*s' is not NAME=PATTERN (e.g. wiki=data/wiki_val.bin, "
                                   "code=data/code/val_*.bin; items separated by commas or spaces)",
                                   where, value, (int)len, p);
        int ok = name_len <= PLAIT_VAL_SET_NAME_MAX;
        for (size_t i = 0; ok && i < name_len; i++) ok = name_char(p[i]);
        if (!ok)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] val_sets: the name '%.*s' is not 1 to %d letters, digits, '_' or '-' "
                                   "(it names the metrics column val_loss_<name>)",
                                   where, (int)name_len, p, PLAIT_VAL_SET_NAME_MAX);
        if (pattern_len >= sizeof out->pattern[0])
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] val_sets: the pattern of '%.*s' is over %zu bytes", where, (int)name_len,
                                   p, sizeof out->pattern[0] - 1);
        for (int k = 0; k < out->n; k++)
            if (strlen(out->name[k]) == name_len && memcmp(out->name[k], p, name_len) == 0)
                return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                       "%s: [data] val_sets names '%s' twice: each set needs a name of its own", where,
                                       out->name[k]);
        memcpy(out->name[out->n], p, name_len);
        out->name[out->n][name_len] = '\0';
        memcpy(out->pattern[out->n], eq + 1, pattern_len);
        out->pattern[out->n][pattern_len] = '\0';
        out->n++;
        p += len;
    }
    return PLAIT_OK;
}
