/*
 * Scratch directories: a private directory under $TMPDIR (else /tmp) for a
 * command's intermediate files, removed once the command has no more use
 * for them (kept, and named, when they explain a failure).
 *
 * Thread-safe (no shared state). Errors: PLAIT_ERR_SYSTEM naming the path
 * and the errno text.
 */
#ifndef PLAIT_CORE_RUNTIME_SCRATCH_DIR_H
#define PLAIT_CORE_RUNTIME_SCRATCH_DIR_H

#include <stddef.h>
#include <plait/types.h>

/* Create "<$TMPDIR or /tmp>/<prefix>-XXXXXX" (mode 0700) and write its path
 * into buf (cap bytes). */
plait_status plait_scratch_dir_make(const char *prefix, char *buf, size_t cap);

/* Remove `path` and everything under it, never following a link (a link
 * inside is removed, not what it points to). */
plait_status plait_scratch_dir_remove(const char *path);

#endif
