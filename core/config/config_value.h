/*
 * Parsing and describing typed configuration values (internal to config/).
 *
 * Thread-safety: pure parsing and formatting functions (no shared state).
 */
#ifndef PLAIT_CORE_CONFIG_VALUE_H
#define PLAIT_CORE_CONFIG_VALUE_H

#include <stddef.h>
#include <plait/config.h>

/* Parse `text` as a value of `decl`. On success fills *out (list items are
 * allocated into *list_storage, which the caller frees with free()) and
 * returns 0. On failure writes a reason ("'abc' is not an integer") into
 * `why` and returns -1. Ranges and choices are checked here. */
int plait_value_parse(const plait_key_decl *decl, const char *text, plait_value *out,
                      char ***list_storage, char *why, size_t why_len);

/* "int in [1, 64]", "one of: ring, tree", "byte size (e.g. 64K, 25M) in [0, 1G]". */
void plait_value_describe(const plait_key_decl *decl, char *buf, size_t len);

/* Type name: "int", "float", ... */
const char *plait_key_type_name(plait_key_type type);

/* Parse a byte size ("25M", "4096", "1GiB"); returns 0 or -1. */
int plait_parse_bytes(const char *text, uint64_t *out);
/* Format bytes the way plait_parse_bytes reads them ("25M", "4K", "123"). */
void plait_format_bytes(uint64_t bytes, char *buf, size_t len);

/* Edit distance (Damerau–Levenshtein, optimal string alignment). */
size_t plait_edit_distance(const char *a, const char *b);
/* Best suggestion for an unknown `word` among `candidates` (n entries):
 * a close spelling or a matching abbreviation (initials of its words,
 * "learning_rate" -> "lr"). NULL if nothing is close. */
const char *plait_suggest(const char *word, const char *const *candidates, size_t n);

#endif
