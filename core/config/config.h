/*
 * The effective configuration of a run.
 *
 * Life cycle (the CLI drives it):
 *   1. plait_config_new(), then plait_config_declare() for the core sections;
 *   2. plait_config_load_file() and plait_config_add_override() record raw
 *      `section.key = value` entries with their origin (file:line, command line);
 *   3. the caller reads the raw plugin choices (plait_config_raw()), loads
 *      those plugins and declares their sections; sections named after any
 *      other plugin ("[comm.nccl]" while tcp is selected) are declared too
 *      when that plugin exists, so unused sections are still checked;
 *   4. plait_config_finalize() applies PLAIT_<SECTION>_<KEY> environment
 *      variables, checks every value against its declaration and reports
 *      every mistake as "FILE:LINE: [section] key 'x' ..."; a variable in a
 *      declared section's namespace (PLAIT_OPTIM_...) that names no key of
 *      it is reported like a misspelt key in a file;
 *   5. typed reads with plait_config_get() and the plait_config_int()... helpers.
 *
 * Not thread-safe while being built; after finalize, reads are thread-safe.
 */
#ifndef PLAIT_CORE_CONFIG_H
#define PLAIT_CORE_CONFIG_H

#include <stdio.h>
#include <plait/config.h>

typedef struct plait_config plait_config;

plait_config *plait_config_new(void);
void plait_config_free(plait_config *cfg);

/* Declare the keys of `section`. `decls` is read with stride `stride`
 * (the declarer's sizeof(plait_key_decl)); each element's own struct_size
 * says how much of it is valid. Everything is copied. `owner` is shown in
 * messages ("core", "plugin comm/tcp"). Declaring an existing key again is
 * PLAIT_ERR_INTERNAL. */
plait_status plait_config_declare(plait_config *cfg, const char *section, const void *decls,
                                  size_t n, size_t stride, const char *owner);
/* The checks a declaration gets, without a configuration to keep it: key
 * names ([a-z][a-z0-9_]*, each once), types, and every default parsed as a
 * value of its key would be. PLAIT_ERR_ABI naming `owner` (a plugin's file,
 * whose table is at fault) and the key, or PLAIT_OK. */
plait_status plait_config_check_declared(const char *section, const void *decls, size_t n, size_t stride,
                                         const char *owner);
/* 1 if `section` has declared keys. */
int plait_config_has_section(const plait_config *cfg, const char *section);

/* Parse an INI file into raw entries. Syntax errors (no '=', unterminated
 * section, duplicate key, line too long) fail with every problem listed.
 * Keys before any section are an error. */
plait_status plait_config_load_file(plait_config *cfg, const char *path);
/* Parse INI text held in memory; `name` stands for the file in messages. */
plait_status plait_config_load_string(plait_config *cfg, const char *name, const char *text);
/* Record a command-line override "section.key=value" (section may contain
 * dots: "comm.tcp.streams=4" is section "comm.tcp", key "streams"). */
plait_status plait_config_add_override(plait_config *cfg, const char *assignment);

/* The text section.key will take when finalized, before validation, by
 * finalize's precedence: the command line, else the environment variable
 * PLAIT_<SECTION>_<KEY> (read from `envp`, NULL = environ), else the file,
 * else the declared default; NULL if none. For picking plugins, whose
 * sections must be declared before finalize. The text is owned by cfg or
 * the environment. */
const char *plait_config_pending_text(const plait_config *cfg, const char *section, const char *key,
                                      char *const *envp);
/* The declared default text of section.key, or NULL. */
const char *plait_config_default_text(const plait_config *cfg, const char *section, const char *key);
/* Sections that appear in the file or overrides, in order of appearance.
 * Returns the count; *names (owned by cfg) receives the array. */
size_t plait_config_raw_sections(const plait_config *cfg, const char *const **names);

/* Sections "<kind>.<name>" that environment variables (`envp`, NULL =
 * environ) point into without setting a declared key, where <kind> is a
 * declared section without a dot and the section is not declared yet:
 * PLAIT_COMM_NCCL_X while only [comm.tcp] is declared gives "comm.nccl".
 * Like a file's sections of other plugins, the caller declares those that
 * name an existing plugin, so finalize checks the variables against them
 * (a plugin name holding '_' cannot be told from its key in a variable).
 * Writes at most `cap` names to `out`; returns the count. */
size_t plait_config_env_plugin_sections(const plait_config *cfg, char *const *envp, char (*out)[128],
                                        size_t cap);

/* Apply the environment (`envp`, NULL = environ) and validate. Lists every
 * error (one per line in the message) and returns the first status. */
plait_status plait_config_finalize(plait_config *cfg, char *const *envp);

/* Typed reads of a declared key (after finalize). */
plait_status plait_config_get(const plait_config *cfg, const char *section, const char *key,
                              plait_value *out);
int64_t plait_config_int(const plait_config *cfg, const char *section, const char *key);
double plait_config_float(const plait_config *cfg, const char *section, const char *key);
int plait_config_bool(const plait_config *cfg, const char *section, const char *key);
const char *plait_config_str(const plait_config *cfg, const char *section, const char *key);

/* Set a value computed by the core (origin "derived"), checked like any
 * other value. Used for batch arithmetic (accumulation_steps from the
 * global batch) so `config show` prints what the run really uses. */
plait_status plait_config_set_derived(plait_config *cfg, const char *section, const char *key,
                                      const char *value, const char *why);
/* Where the value came from (PLAIT_ORIGIN_*) and a description
 * ("a.ini:12", "environment PLAIT_OPTIM_LR", "command line", "default"). */
plait_value_origin plait_config_origin(const plait_config *cfg, const char *section,
                                       const char *key, const char **where);
/* The file the config came from (first loaded), or NULL. */
const char *plait_config_path(const plait_config *cfg);

/* Print the effective configuration: every section and key with its value,
 * origin and doc. */
void plait_config_show(const plait_config *cfg, FILE *out);
/* Canonical text "section.key=value\n" of every PLAIT_KEY_SAME_ON_ALL key,
 * in a fixed order, for cross-rank comparison. Caller frees. */
char *plait_config_fingerprint(const plait_config *cfg);
/* Compare two fingerprints: 0 when equal; 1 when they differ, `out` (of
 * `cap` bytes) then holding the first differing line of each, as
 * "<line of mine> where <who> has <line of theirs>". */
int plait_config_fingerprint_diff(const char *mine, const char *theirs, const char *who, char *out, size_t cap);

/* Core sections' declarations (core_schema.c). */
plait_status plait_config_declare_core(plait_config *cfg);

#endif
