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
        d->rejected = 1;
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
    if (d->value.type == PLAIT_KEY_ENUM) d->value.s = d->decl.choices[d->value.i];
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

/* A key that [section] does not declare: the section's keys and, when one is
 * close or another section declares the key, where to write it; written as a
 * variable name (`as_env`) for a key that came from the environment. */
static void unknown_key(const plait_config *cfg, const char *where, const char *section, const char *key,
                        int as_env, struct problems *p) {
    const char *keys[256];
    size_t n = section_keys(cfg, section, keys, 256);
    char all[2048];
    list_text(keys, n, all, sizeof all);
    char hint[400] = "", var[256];
    const char *close = plait_suggest(key, keys, n);
    if (close) {
        env_name(section, close, var, sizeof var);
        if (as_env)
            snprintf(hint, sizeof hint, "; did you mean %s?", var);
        else
            snprintf(hint, sizeof hint, "; did you mean '%s'?", close);
    }
    for (size_t i = 0; !close && i < cfg->n_decls; i++) {
        const struct cfg_decl *d = &cfg->decls[i];
        if (strcmp(d->decl.key, key) != 0) continue;
        env_name(d->section, key, var, sizeof var);
        snprintf(hint, sizeof hint, "; it belongs in [%s]%s%s", d->section, as_env ? ": " : "", as_env ? var : "");
        break;
    }
    problem(p, "%s: key '%s' is not known in [%s]%s (keys in [%s]: %s)", where, key, section, hint, section, all);
}

/* PLAIT_ variables that are not configuration keys: the launcher's and the
 * runtime's own (every getenv("PLAIT_...") outside config/). None of them
 * starts with a section's prefix today; the list keeps them out of the
 * unknown-key check should a section ever be named "store" or "log". */
static const char *const not_config_vars[] = {
    "PLAIT_RANK",       "PLAIT_WORLD_SIZE", "PLAIT_LOCAL_RANK",   "PLAIT_LOCAL_SIZE",
    "PLAIT_STORE_ADDR", "PLAIT_STORE_FD",   "PLAIT_JOB_TOKEN",    "PLAIT_REPORT_FD",
    "PLAIT_LOG_LEVEL",  "PLAIT_PLUGIN_PATH", "PLAIT_MATH_THREADS", "PLAIT_LAUNCH_GRACE",
    "PLAIT_BLAS_SELECTED_OVER", "PLAIT_BLAS_PRETEND_DETECTED", "PLAIT_PLUGIN_SCAN_TIMEOUT", NULL};

/* The name of an environment entry "NAME=value" when it is a PLAIT_ variable
 * that sets no declared key and is not one of the runtime's own; else 0. */
static int unclaimed_env_var(const plait_config *cfg, const char *entry, char *name, size_t len) {
    const char *eq = strchr(entry, '=');
    size_t n = eq ? (size_t)(eq - entry) : strlen(entry);
    if (strncmp(entry, "PLAIT_", 6) != 0 || n >= len) return 0;
    memcpy(name, entry, n);
    name[n] = '\0';
    for (int i = 0; not_config_vars[i]; i++)
        if (strcmp(name, not_config_vars[i]) == 0) return 0;
    for (size_t i = 0; i < cfg->n_decls; i++) {
        char declared[256];
        env_name(cfg->decls[i].section, cfg->decls[i].decl.key, declared, sizeof declared);
        if (strcmp(name, declared) == 0) return 0;
    }
    return 1;
}

/* The declared section whose prefix PLAIT_<SECTION>_ begins `name`, the
 * longest (PLAIT_COMM_TCP_X is in [comm.tcp], not [comm]); NULL if none.
 * *key_at receives the offset of the key part. */
static const char *env_var_section(const plait_config *cfg, const char *name, size_t *key_at) {
    const char *best = NULL;
    size_t best_len = 0;
    for (size_t i = 0; i < cfg->n_decls; i++) {
        char prefix[256];
        env_name(cfg->decls[i].section, "", prefix, sizeof prefix);
        size_t n = strlen(prefix);
        if (n > best_len && strncmp(name, prefix, n) == 0 && name[n]) {
            best = cfg->decls[i].section;
            best_len = n;
        }
    }
    *key_at = best_len;
    return best;
}

static void lowercase(const char *s, char *out, size_t len) {
    size_t i = 0;
    for (; s[i] && i + 1 < len; i++) out[i] = (char)tolower((unsigned char)s[i]);
    out[i] = '\0';
}

/* A variable in a section's namespace that names none of its keys is a typo
 * (or a key of another section), reported like a file's unknown key. */
static void unknown_env_vars(const plait_config *cfg, char *const *envp, struct problems *p) {
    for (; *envp; envp++) {
        char name[256], key[256], where[300];
        size_t key_at;
        const char *section;
        if (!unclaimed_env_var(cfg, *envp, name, sizeof name) || !(section = env_var_section(cfg, name, &key_at)))
            continue;
        lowercase(name + key_at, key, sizeof key);
        snprintf(where, sizeof where, "environment %s", name);
        unknown_key(cfg, where, section, key, 1, p);
    }
}

size_t plait_config_env_plugin_sections(const plait_config *cfg, char *const *envp, char (*out)[128], size_t cap) {
    size_t n = 0;
    for (envp = envp ? envp : environ; *envp && n < cap; envp++) {
        char name[256], key[256], section[128];
        size_t key_at;
        const char *kind;
        if (!unclaimed_env_var(cfg, *envp, name, sizeof name) || !(kind = env_var_section(cfg, name, &key_at)) ||
            strchr(kind, '.'))
            continue;
        lowercase(name + key_at, key, sizeof key);
        char *under = strchr(key, '_');
        if (!under) continue;
        snprintf(section, sizeof section, "%s.%.*s", kind, (int)(under - key), key);
        if (plait_config_has_section(cfg, section)) continue;
        size_t seen = 0;
        while (seen < n && strcmp(out[seen], section) != 0) seen++;
        if (seen == n) memcpy(out[n++], section, sizeof section);
    }
    return n;
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

/* Every declared default, set as a value of its key. */
static void set_defaults(plait_config *cfg, struct problems *p) {
    for (size_t i = 0; i < cfg->n_decls; i++) {
        struct cfg_decl *d = &cfg->decls[i];
        if (d->decl.default_value) set_value(d, d->decl.default_value, PLAIT_ORIGIN_DEFAULT, "default", p);
    }
}

plait_status plait_config_check_declared(const char *section, const void *decls, size_t n, size_t stride,
                                         const char *owner) {
    plait_config *cfg = plait_config_new();
    if (!cfg) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_config_declare(cfg, section, decls, n, stride, owner);
    if (st == PLAIT_ERR_INTERNAL) st = plait_set_error(PLAIT_ERR_ABI, "%s", plait_last_error());
    struct problems p = {.len = 0, .count = 0};
    if (st == PLAIT_OK) set_defaults(cfg, &p);
    if (st == PLAIT_OK && p.count)
        st = plait_set_error(PLAIT_ERR_ABI, "%s: a default of its key table is not a value of its key: %s", owner,
                             p.text);
    plait_config_free(cfg);
    return st;
}

plait_status plait_config_finalize(plait_config *cfg, char *const *envp) {
    struct problems p = {.len = 0, .count = 0};
    if (!envp) envp = environ;
    set_defaults(cfg, &p);
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
            unknown_env_vars(cfg, envp, &p);
            continue;
        }
        plait_value_origin want = pass == 0 ? PLAIT_ORIGIN_FILE : PLAIT_ORIGIN_CLI;
        for (size_t i = 0; i < cfg->n_raw; i++) {
            struct cfg_raw *r = &cfg->raw[i];
            if (r->origin != want) continue;
            struct cfg_decl *d = plait_config_find(cfg, r->section, r->key);
            char where[512];
            raw_where(r, where, sizeof where);
            if (!d) {
                if (plait_config_has_section(cfg, r->section))
                    unknown_key(cfg, where, r->section, r->key, 0, &p);
                else
                    unknown_section(cfg, r, &p);
                continue;
            }
            set_value(d, r->value, r->origin, where, &p);
        }
    }
    for (size_t i = 0; i < cfg->n_decls; i++) {
        struct cfg_decl *d = &cfg->decls[i];
        if (!d->has_value && !d->rejected) { /* a refused value was reported as such */
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
