#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/rank_report.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/log.h"

/* How deep plugins may compose one another (plait_plugin_desc.uses): a
 * chain past it is a cycle, or as good as one. */
#define USES_DEPTH 4

/* Declare [<kind>.<name>] for plugin `plugin` (a name or a path; NULL or
 * "threads", the in-process transport, have none) and, through
 * plait_plugin_desc.uses, for the plugins it composes; `from` is the chain
 * so far, for the message of a cycle.
 *
 * Two uses differ only in what a composed plugin may get away with. A
 * run's config (strict 0): a composed plugin that is missing only matters
 * if the layout needs it, which the composing plugin reports, and the walk
 * stops USES_DEPTH deep; the plugin itself missing returns its loader's
 * error for the caller to place. A plugin under test (strict 1): every
 * plugin of the chain must load and declare, and a chain deeper than
 * USES_DEPTH is refused as the cycle it most likely is. */
static plait_status declare_plugin(plait_config *cfg, uint32_t kind, const char *plugin, int depth,
                                   const char *from, int strict) {
    if (!plugin || strcmp(plugin, "threads") == 0) return PLAIT_OK;
    if (depth > USES_DEPTH)
        return strict ? plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                        "%s plugins use one another in a cycle, or more than %d deep "
                                        "(plait_plugin_desc.uses): %s -> %s",
                                        plait_kind_name(kind), USES_DEPTH, from, plugin)
                      : PLAIT_OK;
    const plait_plugin_desc *d = plait_plugin_load(kind, plugin);
    if (!d) {
        if (strict) return plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "%s plugin '%s'", plait_kind_name(kind), plugin);
        if (depth == 0) return PLAIT_ERR_INVALID_CONFIG;
        plait_clear_error();
        return PLAIT_OK;
    }
    char section[128], owner[160], chain[512];
    snprintf(section, sizeof section, "%s.%s", plait_kind_name(kind), d->name);
    snprintf(owner, sizeof owner, "plugin %s/%s", plait_kind_name(kind), d->name);
    plait_status st = PLAIT_OK;
    if (d->n_keys && !plait_config_has_section(cfg, section))
        st = plait_config_declare(cfg, section, d->keys, d->n_keys, d->key_size, owner);
    snprintf(chain, sizeof chain, "%s%s%s", from ? from : "", from ? " -> " : "", d->name);
    for (int i = 0; st == PLAIT_OK && d->uses && d->uses[i]; i++) {
        if (strcmp(d->uses[i], d->name) == 0) continue;
        plait_status used = declare_plugin(cfg, kind, d->uses[i], depth + 1, chain, strict);
        if (strict) st = used;
    }
    if (!strict && st == PLAIT_OK) plait_clear_error();
    return st;
}

/* Declare "<kind>.<name>" when a plugin <name> of that kind exists. */
static void declare_other_plugin(plait_config *cfg, const char *section) {
    const char *dot = strchr(section, '.');
    if (!dot || plait_config_has_section(cfg, section)) return;
    char kind[32];
    snprintf(kind, sizeof kind, "%.*s", (int)(dot - section), section);
    uint32_t k = plait_kind_parse(kind);
    if (k) (void)declare_plugin(cfg, k, dot + 1, 0, NULL, 0);
}

void plait_cli_declare_env_sections(plait_config *cfg) {
    char sections[32][128];
    size_t n = plait_config_env_plugin_sections(cfg, NULL, sections, 32);
    for (size_t i = 0; i < n; i++) declare_other_plugin(cfg, sections[i]);
    plait_clear_error();
}

void plait_cli_take_positional(char *arg, const char **path, char **over, int *n_over) {
    if (!*path && !strchr(arg, '='))
        *path = arg;
    else
        over[(*n_over)++] = arg;
}

plait_status plait_cli_apply_log_level(const plait_config *cfg) {
    const char *where = NULL;
    const char *spec = plait_config_str(cfg, "run", "log_level");
    plait_config_origin(cfg, "run", "log_level", &where);
    if (plait_log_check_spec(spec) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: key 'log_level' in [run]: '%s' is not a level spec (error, warn, info, debug or "
                               "trace, optionally followed by component=level items: 'warn,tcp=debug')",
                               where, spec);
    /* PLAIT_LOG_LEVEL, read at start-up, wins */
    if (!getenv("PLAIT_LOG_LEVEL")) (void)plait_log_configure(spec);
    return PLAIT_OK;
}

plait_status plait_cli_load_config(const char *path, int n_overrides, char *const *overrides,
                                   plait_config **out) {
    plait_config *cfg = plait_config_new();
    if (!cfg) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_config_declare_core(cfg);
    if (st == PLAIT_OK && path) st = plait_config_load_file(cfg, path);
    for (int i = 0; st == PLAIT_OK && i < n_overrides; i++) st = plait_config_add_override(cfg, overrides[i]);
    /* The selected plugins, by the precedence finalize will apply. */
    static const char *const selectors[] = {"comm", "parallel", "optim", "device"};
    for (int i = 0; st == PLAIT_OK && i < 4; i++) {
        const char *name = plait_config_pending_text(cfg, selectors[i], "plugin", NULL);
        if (!name || !*name) continue;
        if (declare_plugin(cfg, plait_kind_parse(selectors[i]), name, 0, NULL, 0) != PLAIT_OK)
            st = plait_wrap_error(PLAIT_ERR_INVALID_CONFIG, "[%s] plugin = %s", selectors[i], name);
    }
    /* Sections of other plugins present in the file are checked too, when the
     * plugin exists; finalize reports those that do not. */
    const char *const *sections = NULL;
    size_t n = st == PLAIT_OK ? plait_config_raw_sections(cfg, &sections) : 0;
    for (size_t i = 0; i < n; i++) declare_other_plugin(cfg, sections[i]);
    if (st == PLAIT_OK) plait_cli_declare_env_sections(cfg);
    if (st == PLAIT_OK) {
        plait_clear_error();
        st = plait_config_finalize(cfg, NULL);
    }
    if (st == PLAIT_OK) st = plait_cli_apply_log_level(cfg);
    if (st != PLAIT_OK) {
        plait_config_free(cfg);
        return st;
    }
    *out = cfg;
    return PLAIT_OK;
}

void plait_cli_print_error(const char *context) {
    char line[2400];
    const char *why = plait_last_error();
    /* a message that already begins with the file it is about ("x.ini:3: ...")
     * is not prefixed with it again */
    if (context && strncmp(why, context, strlen(context)) != 0)
        snprintf(line, sizeof line, "%s: %s", context, why);
    else
        snprintf(line, sizeof line, "%s", why);
    fprintf(stderr, "plait: error: %s\n", line);
    plait_log_file_only(PLAIT_LOG_ERROR, "plait", "%s", line);
    plait_launch_report_error(line);
}

plait_status plait_cli_load_plugin_config(uint32_t kind, const char *plugin, const char *const *first,
                                          int n_over, char *const *over, plait_config **out) {
    plait_config *cfg = plait_config_new();
    if (!cfg) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = plait_config_declare_core(cfg);
    for (int i = 0; st == PLAIT_OK && first && first[i]; i++) st = plait_config_add_override(cfg, first[i]);
    for (int i = 0; st == PLAIT_OK && i < n_over; i++) st = plait_config_add_override(cfg, over[i]);
    /* the plugin whose section to declare: the one named, else [comm] plugin */
    if (!plugin && kind == PLAIT_KIND_COMM) plugin = plait_config_pending_text(cfg, "comm", "plugin", NULL);
    if (st == PLAIT_OK) st = declare_plugin(cfg, kind, plugin, 0, NULL, 1);
    /* an optimizer under test may need a group: the transport's keys too */
    if (st == PLAIT_OK && kind == PLAIT_KIND_OPTIM)
        st = declare_plugin(cfg, PLAIT_KIND_COMM, plait_config_pending_text(cfg, "comm", "plugin", NULL), 0, NULL, 1);
    if (st == PLAIT_OK) plait_cli_declare_env_sections(cfg);
    if (st == PLAIT_OK) st = plait_config_finalize(cfg, NULL);
    if (st == PLAIT_OK) st = plait_cli_apply_log_level(cfg);
    if (st != PLAIT_OK) {
        plait_config_free(cfg);
        return st;
    }
    *out = cfg;
    return PLAIT_OK;
}
