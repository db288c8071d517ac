/* Shared between the config/ sources; not for other modules.
 *
 * Thread-safety: a config is built by one thread (declare, load,
 * finalize); after finalize it is read-only and any thread may read it.
 */
#ifndef PLAIT_CORE_CONFIG_INTERNAL_H
#define PLAIT_CORE_CONFIG_INTERNAL_H

#include <stddef.h>
#include <plait/config.h>

struct cfg_decl {
    char *section;
    char *owner;
    plait_key_decl decl;  /* strings owned (copied) */
    size_t order;
    /* effective value after finalize */
    int has_value;
    char *value_text;
    plait_value value;
    char **list_storage;
    plait_value_origin origin;
    char *where;            /* "file:line", "environment PLAIT_X", ... */
    int rejected;           /* a value was given but refused (already reported) */
};

struct cfg_raw {
    char *section, *key, *value;
    plait_value_origin origin;
    char *where;  /* file path, or the command-line assignment */
    int line;
};

struct plait_config {
    struct cfg_decl *decls;
    size_t n_decls, cap_decls;
    struct cfg_raw *raw;
    size_t n_raw, cap_raw;
    char **sections;       /* sections seen in raw entries, in order */
    size_t n_sections;
    char *path;
    int finalized;
};

struct cfg_decl *plait_config_find(const struct plait_config *cfg, const char *section,
                                   const char *key);

#endif
