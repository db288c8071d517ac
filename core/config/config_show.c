/* `plait config show` output and the cross-rank fingerprint. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/config_internal.h"

static int seen_before(const plait_config *cfg, size_t i) {
    for (size_t j = 0; j < i; j++)
        if (strcmp(cfg->decls[j].section, cfg->decls[i].section) == 0) return 1;
    return 0;
}

void plait_config_show(const plait_config *cfg, FILE *out) {
    fprintf(out, "# effective configuration%s%s\n# value origin: default, FILE:LINE, environment "
                 "VAR, command line, or derived\n",
            cfg->path ? " of " : "", cfg->path ? cfg->path : "");
    for (size_t i = 0; i < cfg->n_decls; i++) {
        if (seen_before(cfg, i)) continue;
        const char *sec = cfg->decls[i].section;
        fprintf(out, "\n[%s]  ; declared by %s\n", sec, cfg->decls[i].owner);
        for (size_t j = i; j < cfg->n_decls; j++) {
            const struct cfg_decl *d = &cfg->decls[j];
            if (strcmp(d->section, sec) != 0) continue;
            if ((d->decl.flags & PLAIT_KEY_HIDDEN) && d->origin == PLAIT_ORIGIN_DEFAULT) continue;
            char line[512];
            snprintf(line, sizeof line, "%s = %s", d->decl.key, d->has_value ? d->value_text : "(unset)");
            fprintf(out, "%-40s ; [%s] %s%s\n", line, d->where ? d->where : "default", d->decl.doc,
                    (d->decl.flags & PLAIT_KEY_SAME_ON_ALL) ? " (same on all ranks)" : "");
        }
    }
}

char *plait_config_fingerprint(const plait_config *cfg) {
    size_t cap = 256, len = 0;
    char *buf = malloc(cap);
    if (!buf) return NULL;
    buf[0] = '\0';
    for (size_t i = 0; i < cfg->n_decls; i++) {
        const struct cfg_decl *d = &cfg->decls[i];
        if (!(d->decl.flags & PLAIT_KEY_SAME_ON_ALL) || !d->has_value) continue;
        size_t need = strlen(d->section) + strlen(d->decl.key) + strlen(d->value_text) + 4;
        if (len + need >= cap) {
            while (len + need >= cap) cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                return NULL;
            }
            buf = nb;
        }
        len += (size_t)snprintf(buf + len, cap - len, "%s.%s=%s\n", d->section, d->decl.key, d->value_text);
    }
    return buf;
}

int plait_config_fingerprint_diff(const char *mine, const char *theirs, const char *who, char *out, size_t cap) {
    if (strcmp(mine, theirs) == 0) return 0;
    if (cap) out[0] = '\0';
    const char *a = mine, *b = theirs;
    /* one side may end first: its missing line reads as empty */
    while (*a || *b) {
        const char *ea = strchr(a, '\n'), *eb = strchr(b, '\n');
        size_t la = ea ? (size_t)(ea - a) : strlen(a), lb = eb ? (size_t)(eb - b) : strlen(b);
        if (la != lb || memcmp(a, b, la) != 0) {
            snprintf(out, cap, "%.*s where %s has %.*s", (int)la, a, who, (int)lb, b);
            break;
        }
        a += la + (ea != NULL);
        b += lb + (eb != NULL);
    }
    return 1;
}
