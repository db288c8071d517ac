/*
 * Validation of raw entries against declarations (finalize), typed reads,
 * derived values and origins.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "config/config_internal.h"
#include "config/config_value.h"
#include "runtime/error.h"

extern char **environ;

struct problems {
    char text[8192];
    size_t len;
    int count;
};

static void problem(struct problems *p, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static void problem(struct problems *p, const char *fmt, ...) {
    if (p->len + 2 >= sizeof p->text) {
        p->count++;
        return;
    }
    if (p->count) p->text[p->len++] = '\n';
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(p->text + p->len, sizeof p->text - p->len, fmt, ap);
    va_end(ap);
    if (n > 0) p->len += (size_t)n;
    if (p->len >= sizeof p->text) p->len = sizeof p->text - 1;
    p->count++;
}

static void raw_where(const struct cfg_raw *r, char *buf, size_t len) {
    if (r->origin == PLAIT_ORIGIN_FILE)
        snprintf(buf, len, "%s:%d", r->where, r->line);
    else
        snprintf(buf, len, "command line '%s'", r->where);
}

static char *dupstr(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static void set_value(struct cfg_decl *d, const char *text, plait_value_origin origin,
                      const char *where, struct problems *p) {
    plait_value v;
    char **storage = NULL;
    char why[768];
    if (plait_value_parse(&d->decl, text, &v, &storage, why, sizeof why) != 0) {
        char allowed[512];
        plait_value_describe(&d->decl, allowed, sizeof allowed);
        if (strstr(why, allowed))
            problem(p, "%s: key '%s' in [%s]: %s", where, d->decl.key, d->section, why);
        else
            problem(p, "%s: key '%s' in [%s]: %s (expected %s)", where, d->decl.key, d->section,
                    why, allowed);
        return;
    }
    free(d->value_text);
    free(d->where);
    if (d->list_storage) {
        for (char **c = d->list_storage; *c; c++) free(*c);
        free(d->list_storage);
    }
    d->value_text = dupstr(text);
    d->where = dupstr(where);
    d->list_storage = storage;
    d->value = v;
    d->value.s = d->value_text; /* point into our own copy */
    if (d->value.type == PLAIT_PARAM_ENUM) d->value.s = d->decl.choices[d->value.i];
    d->origin = origin;
    d->has_value = 1;
}

static void env_name(const char *section, const char *key, char *buf, size_t len) {
    size_t n = (size_t)snprintf(buf, len, "PLAIT_%s_%s", section, key);
    for (size_t i = 0; i < n && i < len; i++)
        buf[i] = buf[i] == '.' ? '_' : (char)toupper((unsigned char)buf[i]);
}

static const char *env_lookup(char *const *envp, const char *name) {
    size_t nl = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, nl) == 0 && (*envp)[nl] == '=') return *envp + nl + 1;
    return NULL;
}

const char *plait_config_pending_text(const plait_config *cfg, const char *section, const char *key,
                                      char *const *envp) {
    const char *file = NULL, *cli = NULL;
    for (size_t i = 0; i < cfg->n_raw; i++) {
        const struct cfg_raw *r = &cfg->raw[i];
        if (strcmp(r->section, section) != 0 || strcmp(r->key, key) != 0) continue;
        if (r->origin == PLAIT_ORIGIN_CLI)
            cli = r->value; /* the last of several wins, as in finalize */
        else
            file = r->value;
    }
    if (cli) return cli;
    char name[256];
    env_name(section, key, name, sizeof name);
    const char *env = env_lookup(envp ? envp : environ, name);
    if (env) return env;
    return file ? file : plait_config_default_text(cfg, section, key);
}

static size_t section_keys(const plait_config *cfg, const char *section, const char **out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_decls && n < cap; i++)
        if (strcmp(cfg->decls[i].section, section) == 0) out[n++] = cfg->decls[i].decl.key;
    return n;
}

static void list_text(const char **items, size_t n, char *buf, size_t len) {
    size_t w = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && w < len; i++)
        w += (size_t)snprintf(buf + w, len - w, "%s%s", i ? ", " : "", items[i]);
}

static void unknown_key(const plait_config *cfg, const struct cfg_raw *r, struct problems *p) {
    char where[512];
    raw_where(r, where, sizeof where);
    const char *keys[256];
    size_t n = section_keys(cfg, r->section, keys, 256);
    char all[2048];
    list_text(keys, n, all, sizeof all);
    const char *hint = plait_suggest(r->key, keys, n);
    if (hint) {
        problem(p, "%s: key '%s' is not known in [%s]; did you mean '%s'? (keys in [%s]: %s)", where,
                r->key, r->section, hint, r->section, all);
        return;
    }
    /* The key may belong to another section. */
    for (size_t i = 0; i < cfg->n_decls; i++) {
        if (strcmp(cfg->decls[i].decl.key, r->key) == 0) {
            problem(p, "%s: key '%s' is not known in [%s]; it belongs in [%s] (keys in [%s]: %s)",
                    where, r->key, r->section, cfg->decls[i].section, r->section, all);
            return;
        }
    }
    problem(p, "%s: key '%s' is not known in [%s] (keys in [%s]: %s)", where, r->key, r->section,
            r->section, all);
}

static void unknown_section(const plait_config *cfg, const struct cfg_raw *r, struct problems *p) {
    char where[512];
    raw_where(r, where, sizeof where);
    const char *secs[128];
    size_t n = 0;
    for (size_t i = 0; i < cfg->n_decls && n < 128; i++) {
        size_t k = 0;
        while (k < n && strcmp(secs[k], cfg->decls[i].section) != 0) k++;
        if (k == n) secs[n++] = cfg->decls[i].section;
    }
    char all[2048];
    list_text(secs, n, all, sizeof all);
    const char *hint = plait_suggest(r->section, secs, n);
    const char *dot = strchr(r->section, '.');
    if (hint && (!dot || strchr(hint, '.')))
        problem(p, "%s: section [%s] is not known; did you mean [%s]? (sections: %s)", where,
                r->section, hint, all);
    else if (dot)
        problem(p, "%s: section [%s] is not known: no plugin of kind '%.*s' named '%s' was found "
                   "to declare it (run 'plait plugins' to list them)",
                where, r->section, (int)(dot - r->section), r->section, dot + 1);
    else
        problem(p, "%s: section [%s] is not known (sections: %s)", where, r->section, all);
}

plait_status plait_config_finalize(plait_config *cfg, char *const *envp) {
    struct problems p = {.len = 0, .count = 0};
    if (!envp) envp = environ;
    /* defaults */
    for (size_t i = 0; i < cfg->n_decls; i++) {
        struct cfg_decl *d = &cfg->decls[i];
        if (d->decl.default_value) set_value(d, d->decl.default_value, PLAIT_ORIGIN_DEFAULT, "default", &p);
    }
    if (p.count) /* a bad default is a bug in the declarer */
        return plait_set_error(PLAIT_ERR_INTERNAL, "invalid declared default: %s", p.text);
    /* file entries, then environment, then command line */
    for (int pass = 0; pass < 3; pass++) {
        if (pass == 1) {
            for (size_t i = 0; i < cfg->n_decls; i++) {
                struct cfg_decl *d = &cfg->decls[i];
                char name[256];
                env_name(d->section, d->decl.key, name, sizeof name);
                const char *v = env_lookup(envp, name);
                if (v) {
                    char where[300];
                    snprintf(where, sizeof where, "environment %s", name);
                    set_value(d, v, PLAIT_ORIGIN_ENV, where, &p);
                }
            }
            continue;
        }
        plait_value_origin want = pass == 0 ? PLAIT_ORIGIN_FILE : PLAIT_ORIGIN_CLI;
        for (size_t i = 0; i < cfg->n_raw; i++) {
            struct cfg_raw *r = &cfg->raw[i];
            if (r->origin != want) continue;
            struct cfg_decl *d = plait_config_find(cfg, r->section, r->key);
            if (!d) {
                if (plait_config_has_section(cfg, r->section))
                    unknown_key(cfg, r, &p);
                else
                    unknown_section(cfg, r, &p);
                continue;
            }
            char where[512];
            raw_where(r, where, sizeof where);
            set_value(d, r->value, r->origin, where, &p);
        }
    }
    for (size_t i = 0; i < cfg->n_decls; i++) {
        struct cfg_decl *d = &cfg->decls[i];
        if (!d->has_value) {
            char allowed[512];
            plait_value_describe(&d->decl, allowed, sizeof allowed);
            problem(&p, "%s: key '%s' in [%s] is required but not given (%s: %s)",
                    cfg->path ? cfg->path : "config", d->decl.key, d->section, allowed, d->decl.doc);
        }
    }
    if (p.count) {
        if (p.count > 1) {
            char head[64];
            snprintf(head, sizeof head, "%d problems in the configuration:\n", p.count);
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s%s", head, p.text);
        }
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s", p.text);
    }
    cfg->finalized = 1;
    return PLAIT_OK;
}

plait_status plait_config_get(const plait_config *cfg, const char *section, const char *key,
                              plait_value *out) {
    struct cfg_decl *d = plait_config_find(cfg, section, key);
    if (!d || !d->has_value)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "config key [%s] %s was never declared%s",
                               section, key, d ? " (or never set)" : "");
    *out = d->value;
    return PLAIT_OK;
}

static plait_value must_get(const plait_config *cfg, const char *section, const char *key) {
    plait_value v;
    if (plait_config_get(cfg, section, key, &v) != PLAIT_OK) {
        /* A core read of an undeclared key is a programming error: fail loudly. */
        fprintf(stderr, "plait: internal error: %s\n", plait_last_error());
        abort();
    }
    return v;
}

int64_t plait_config_int(const plait_config *cfg, const char *s, const char *k) { return must_get(cfg, s, k).i; }
double plait_config_float(const plait_config *cfg, const char *s, const char *k) { return must_get(cfg, s, k).f; }
int plait_config_bool(const plait_config *cfg, const char *s, const char *k) { return must_get(cfg, s, k).i != 0; }
const char *plait_config_str(const plait_config *cfg, const char *s, const char *k) {
    const char *v = must_get(cfg, s, k).s;
    return v ? v : "";
}

plait_status plait_config_set_derived(plait_config *cfg, const char *section, const char *key,
                                      const char *value, const char *why) {
    struct cfg_decl *d = plait_config_find(cfg, section, key);
    if (!d) return plait_set_error(PLAIT_ERR_INTERNAL, "derived value for undeclared [%s] %s", section, key);
    struct problems p = {.len = 0, .count = 0};
    char where[512];
    snprintf(where, sizeof where, "derived: %s", why);
    set_value(d, value, PLAIT_ORIGIN_DERIVED, where, &p);
    if (p.count) return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s", p.text);
    return PLAIT_OK;
}

plait_value_origin plait_config_origin(const plait_config *cfg, const char *section, const char *key,
                                       const char **where) {
    struct cfg_decl *d = plait_config_find(cfg, section, key);
    if (where) *where = d && d->where ? d->where : "default";
    return d ? d->origin : PLAIT_ORIGIN_DEFAULT;
}
