/*
 * Configuration store: declarations, raw entries from files and overrides,
 * validation into typed values, and lookups.
 */
#include "config/config.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config_internal.h"
#include "config/config_value.h"
#include "runtime/error.h"
#include "runtime/regular_file.h"

extern char **environ;

static char *xstrdup(const char *s) {
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

plait_config *plait_config_new(void) { return calloc(1, sizeof(plait_config)); }

static void free_decl(struct cfg_decl *d) {
    free(d->section);
    free(d->owner);
    free((char *)d->decl.key);
    free((char *)d->decl.default_value);
    free((char *)d->decl.doc);
    if (d->decl.choices) {
        for (char **c = (char **)d->decl.choices; *c; c++) free(*c);
        free((char **)d->decl.choices);
    }
    free(d->value_text);
    free(d->where);
    if (d->list_storage) {
        for (char **c = d->list_storage; *c; c++) free(*c);
        free(d->list_storage);
    }
}

void plait_config_free(plait_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->n_decls; i++) free_decl(&cfg->decls[i]);
    free(cfg->decls);
    for (size_t i = 0; i < cfg->n_raw; i++) {
        free(cfg->raw[i].section);
        free(cfg->raw[i].key);
        free(cfg->raw[i].value);
        free(cfg->raw[i].where);
    }
    free(cfg->raw);
    for (size_t i = 0; i < cfg->n_sections; i++) free(cfg->sections[i]);
    free(cfg->sections);
    free(cfg->path);
    free(cfg);
}

struct cfg_decl *plait_config_find(const plait_config *cfg, const char *section, const char *key) {
    for (size_t i = 0; i < cfg->n_decls; i++)
        if (strcmp(cfg->decls[i].section, section) == 0 && strcmp(cfg->decls[i].decl.key, key) == 0)
            return &cfg->decls[i];
    return NULL;
}

int plait_config_has_section(const plait_config *cfg, const char *section) {
    for (size_t i = 0; i < cfg->n_decls; i++)
        if (strcmp(cfg->decls[i].section, section) == 0) return 1;
    return 0;
}

plait_status plait_config_declare(plait_config *cfg, const char *section, const void *decls,
                                  size_t n, size_t stride, const char *owner) {
    for (size_t i = 0; i < n; i++) {
        const plait_key_decl *src = (const plait_key_decl *)((const char *)decls + i * stride);
        plait_key_decl d = {0};
        size_t sz = src->struct_size < sizeof d ? src->struct_size : sizeof d;
        if (sz < offsetof(plait_key_decl, doc) + sizeof(const char *) || !src->key)
            return plait_set_error(PLAIT_ERR_ABI, "%s: declaration %zu of [%s] is malformed "
                                                  "(struct_size %u)", owner, i, section, src->struct_size);
        memcpy(&d, src, sz);
        int valid = d.key[0] >= 'a' && d.key[0] <= 'z' && strlen(d.key) < 64;
        for (const char *c = d.key; valid && *c; c++) valid = (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '_';
        if (!valid)
            return plait_set_error(PLAIT_ERR_ABI, "%s: [%s] key '%.80s' is not a valid name ([a-z][a-z0-9_]*, up to "
                                                  "63 characters): no configuration could set it",
                                   owner, section, d.key);
        if (plait_config_find(cfg, section, d.key))
            return plait_set_error(PLAIT_ERR_INTERNAL, "%s declares [%s] %s twice", owner, section, d.key);
        if (!d.default_value && !(d.flags & PLAIT_KEY_REQUIRED))
            return plait_set_error(PLAIT_ERR_INTERNAL, "%s: [%s] %s has no default and is not required",
                                   owner, section, d.key);
        if (cfg->n_decls == cfg->cap_decls) {
            size_t cap = cfg->cap_decls ? 2 * cfg->cap_decls : 64;
            struct cfg_decl *nd = realloc(cfg->decls, cap * sizeof *nd);
            if (!nd) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory declaring config");
            cfg->decls = nd;
            cfg->cap_decls = cap;
        }
        struct cfg_decl *e = &cfg->decls[cfg->n_decls++];
        memset(e, 0, sizeof *e);
        e->section = xstrdup(section);
        e->owner = xstrdup(owner);
        e->decl = d;
        e->decl.struct_size = sizeof(plait_key_decl);
        e->decl.key = xstrdup(d.key);
        e->decl.default_value = xstrdup(d.default_value);
        e->decl.doc = xstrdup(d.doc ? d.doc : "");
        if (d.choices) {
            size_t nc = 0;
            while (d.choices[nc]) nc++;
            char **c = calloc(nc + 1, sizeof *c);
            for (size_t k = 0; c && k < nc; k++) c[k] = xstrdup(d.choices[k]);
            e->decl.choices = (const char *const *)c;
        }
        e->order = cfg->n_decls;
    }
    return PLAIT_OK;
}

/* ---- raw entries ------------------------------------------------------ */

static int note_section(plait_config *cfg, const char *section) {
    for (size_t i = 0; i < cfg->n_sections; i++)
        if (strcmp(cfg->sections[i], section) == 0) return 0;
    char **ns = realloc(cfg->sections, (cfg->n_sections + 1) * sizeof *ns);
    if (!ns) return -1;
    cfg->sections = ns;
    cfg->sections[cfg->n_sections++] = xstrdup(section);
    return 0;
}

static struct cfg_raw *add_raw(plait_config *cfg, const char *section, const char *key,
                               const char *value, plait_value_origin origin, const char *where,
                               int line) {
    if (cfg->n_raw == cfg->cap_raw) {
        size_t cap = cfg->cap_raw ? 2 * cfg->cap_raw : 32;
        struct cfg_raw *nr = realloc(cfg->raw, cap * sizeof *nr);
        if (!nr) return NULL;
        cfg->raw = nr;
        cfg->cap_raw = cap;
    }
    struct cfg_raw *r = &cfg->raw[cfg->n_raw++];
    r->section = xstrdup(section);
    r->key = xstrdup(key);
    r->value = xstrdup(value);
    r->origin = origin;
    r->where = xstrdup(where);
    r->line = line;
    if (note_section(cfg, section) != 0) return NULL;
    return r;
}

/* inih gives no line numbers in this Debian build (INI_HANDLER_LINENO=0), so
 * the reader below counts the lines it hands out; the handler runs right
 * after the line it belongs to was read. */
struct ini_state {
    plait_config *cfg;
    const char *name;
    const char *text;
    size_t pos;
    int line;
    int errors;
    char msg[4096];
    size_t msg_len;
    char *long_name, *long_value; /* the last line too long for inih, split here */
};

static void ini_problem(struct ini_state *st, const char *fmt, ...) PLAIT_PRINTF(2, 3);
static void ini_problem(struct ini_state *st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    if (st->msg_len < sizeof st->msg) {
        if (st->errors) st->msg[st->msg_len++] = '\n';
        int n = vsnprintf(st->msg + st->msg_len, sizeof st->msg - st->msg_len, fmt, ap);
        if (n > 0) st->msg_len += (size_t)n;
        if (st->msg_len >= sizeof st->msg) st->msg_len = sizeof st->msg - 1;
    }
    va_end(ap);
    st->errors++;
}

/* inih (this Debian build) reads lines into a fixed 200-byte buffer, but a
 * value that works on the command line must work in a file too. A longer
 * line is split here as inih splits one (name, '=' or ':', value, an inline
 * ';' comment after whitespace, surrounding spaces trimmed) and inih gets a
 * stand-in line whose name the handler swaps back. A control byte starts the
 * stand-in's name so that no valid key can be mistaken for it. */
#define LONG_LINE_NAME "\x01long"

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
    return s;
}

/* The line to hand inih in place of the long line b[0, len). */
static const char *split_long_line(struct ini_state *st, const char *b, size_t len) {
    free(st->long_name);
    free(st->long_value);
    st->long_name = st->long_value = NULL;
    /* Section headers are left to inih's too-long error; lines without '='
     * or ':' are a syntax error either way. */
    if (b[0] == '[') return NULL;
    if (b[0] == ';' || b[0] == '#') return "\n";
    char *line = malloc(len + 1);
    if (!line) return NULL;
    memcpy(line, b, len);
    line[len] = '\0';
    char *p = line;
    while (*p && *p != '=' && *p != ':' && !(*p == ';' && p > line && isspace((unsigned char)p[-1]))) p++;
    if (*p != '=' && *p != ':') {
        free(line);
        return "?\n";
    }
    *p++ = '\0';
    for (char *c = p; *c; c++)
        if (*c == ';' && c > p && isspace((unsigned char)c[-1])) {
            *c = '\0';
            break;
        }
    st->long_name = xstrdup(trim(line));
    st->long_value = xstrdup(trim(p));
    free(line);
    return LONG_LINE_NAME "=\n";
}

/* What inih (this Debian build) would silently misread in the line b[0, len):
 * text after a section header's ']' (dropped: with old Mac line endings, a
 * lone CR each, the whole file after its first header is one such line), or
 * NULL when the line is fine. */
static const char *misread_line(const char *b, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (b[i] == '\r' && i + 1 < len && b[i + 1] != '\n')
            return "a carriage return inside the line (old Mac line endings?): lines end with LF or CRLF";
    if (b[0] != '[') return NULL;
    const char *close = memchr(b, ']', len);
    if (!close) return NULL; /* inih's own syntax error */
    const char *p = close + 1, *end = b + len;
    while (p < end && isspace((unsigned char)*p)) p++;
    if (p < end && *p != ';' && *p != '#')
        return "text after the section header's ']' (a key goes on its own line; a comment starts with ';' or '#')";
    return NULL;
}

static char *read_ini_line(char *str, int num, void *stream) {
    struct ini_state *st = stream;
    if (!st->text[st->pos]) return NULL;
    const char *b = st->text + st->pos;
    const char *nl = strchr(b, '\n');
    size_t len = nl ? (size_t)(nl - b) + 1 : strlen(b);
    st->line++;
    st->pos += len;
    /* Leading blanks are dropped: inih would read an indented line as the
     * previous key's value continued ("lr = 3e-3" then "    weight_decay =
     * 0.5" would be lr given twice), where whoever indented a key meant a key. */
    while (len > 0 && (*b == ' ' || *b == '\t')) b++, len--;
    const char *why = misread_line(b, len);
    if (why) {
        ini_problem(st, "%s:%d: %s", st->name, st->line, why);
        snprintf(str, (size_t)num, "\n");
        return str;
    }
    if (len > (size_t)num - 1) {
        const char *stand_in = split_long_line(st, b, len);
        if (!stand_in) {
            ini_problem(st, "%s:%d: line is longer than %d characters (a section header)",
                        st->name, st->line, num - 2);
            stand_in = "\n";
        }
        snprintf(str, (size_t)num, "%s", stand_in);
    } else {
        memcpy(str, b, len);
        str[len] = '\0';
    }
    return str;
}

static int valid_name(const char *s, int allow_dot) {
    if (!*s) return 0;
    for (; *s; s++)
        if (!(islower((unsigned char)*s) || isdigit((unsigned char)*s) || *s == '_' ||
              (allow_dot && *s == '.')))
            return 0;
    return 1;
}

static int handle_ini_entry(void *user, const char *section, const char *key, const char *value) {
    struct ini_state *st = user;
    if (st->long_name && strcmp(key, LONG_LINE_NAME) == 0) {
        key = st->long_name;
        value = st->long_value;
    }
    if (!*section) {
        ini_problem(st, "%s:%d: key '%s' appears before any [section]", st->name, st->line, key);
        return 1;
    }
    if (!valid_name(section, 1)) {
        ini_problem(st, "%s:%d: section name [%s] may only hold a-z, 0-9, '_' and '.'", st->name,
                    st->line, section);
        return 1;
    }
    for (size_t i = 0; i < st->cfg->n_raw; i++) {
        struct cfg_raw *r = &st->cfg->raw[i];
        if (r->origin == PLAIT_ORIGIN_FILE && strcmp(r->where, st->name) == 0 &&
            strcmp(r->section, section) == 0 && strcmp(r->key, key) == 0) {
            ini_problem(st, "%s:%d: [%s] key '%s' is given twice (first on line %d)", st->name,
                        st->line, section, key, r->line);
            return 1;
        }
    }
    if (!add_raw(st->cfg, section, key, value, PLAIT_ORIGIN_FILE, st->name, st->line)) {
        ini_problem(st, "%s:%d: out of memory", st->name, st->line);
        return 0;
    }
    return 1;
}

plait_status plait_config_load_string(plait_config *cfg, const char *name, const char *text) {
    struct ini_state st = {.cfg = cfg, .name = name, .text = text};
    int rc = ini_parse_stream(read_ini_line, &st, handle_ini_entry, &st);
    if (rc > 0) {
        /* inih reports only the first malformed line; point at it. */
        int bad_already = 0;
        char needle[64];
        snprintf(needle, sizeof needle, ":%d:", rc);
        bad_already = strstr(st.msg, needle) != NULL;
        if (!bad_already)
            ini_problem(&st, "%s:%d: syntax error: expected '[section]' or 'key = value'", name, rc);
    } else if (rc < 0) {
        ini_problem(&st, "%s: cannot parse (inih error %d)", name, rc);
    }
    if (!cfg->path) cfg->path = xstrdup(name);
    free(st.long_name);
    free(st.long_value);
    if (st.errors) return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s", st.msg);
    return PLAIT_OK;
}

plait_status plait_config_load_file(plait_config *cfg, const char *path) {
    int fd;
    uint64_t size;
    plait_status st = plait_open_regular(path, "config file", PLAIT_ERR_INVALID_CONFIG, &fd, &size);
    if (st == PLAIT_ERR_SYSTEM) {
        /* A config that cannot be opened is a config error (the CLI's exit
         * code for it); the message names the file already. */
        char why[1024];
        snprintf(why, sizeof why, "%s", plait_last_error());
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s", why);
    }
    if (st != PLAIT_OK) return st;
    if (size > (64u << 20)) {
        close(fd);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: larger than 64 MiB; not a config file", path);
    }
    size_t n = (size_t)size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s: out of memory reading config", path);
    }
    st = plait_read_exact(fd, buf, n, path);
    close(fd);
    if (st != PLAIT_OK) {
        free(buf);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: read error", path);
    }
    buf[n] = '\0';
    if (memchr(buf, '\0', n)) {
        free(buf);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: contains NUL bytes; not a text file", path);
    }
    st = plait_config_load_string(cfg, path, buf);
    free(buf);
    return st;
}

plait_status plait_config_add_override(plait_config *cfg, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    const char *dot = NULL;
    for (const char *p = assignment; eq && p < eq; p++)
        if (*p == '.') dot = p;
    if (!eq || !dot || dot == assignment || dot + 1 == eq)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "command line '%s': expected section.key=value (e.g. optim.lr=3e-4)",
                               assignment);
    char section[128], key[128];
    size_t sl = (size_t)(dot - assignment), kl = (size_t)(eq - dot - 1);
    if (sl >= sizeof section || kl >= sizeof key)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "command line '%s': name too long", assignment);
    memcpy(section, assignment, sl);
    section[sl] = '\0';
    memcpy(key, dot + 1, kl);
    key[kl] = '\0';
    const char *value = eq + 1;
    while (*value == ' ') value++;
    if (!add_raw(cfg, section, key, value, PLAIT_ORIGIN_CLI, assignment, 0))
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    return PLAIT_OK;
}

size_t plait_config_raw_sections(const plait_config *cfg, const char *const **names) {
    *names = (const char *const *)cfg->sections;
    return cfg->n_sections;
}

const char *plait_config_path(const plait_config *cfg) { return cfg->path; }

const char *plait_config_default_text(const plait_config *cfg, const char *section, const char *key) {
    const struct cfg_decl *d = plait_config_find(cfg, section, key);
    return d ? d->decl.default_value : NULL;
}
