/*
 * A directory of outputs that appears whole or not at all: files are written
 * into a staging directory beside the destination ("<dir>.staging-<pid>"),
 * fsync'd, and the staging directory is renamed into place. A destination
 * that already exists is replaced only when every entry in it is one the
 * caller recognises as its own output (the `owned` predicate), so a mistyped
 * --out never deletes someone else's files; the old directory is moved aside,
 * the new one renamed in, then the old one removed. A crash leaves either
 * the old outputs or the new ones (and possibly a stale staging or ".old-"
 * directory next to them), never a mixture.
 *
 * Not thread-safe; one staged directory per caller. Errors are
 * PLAIT_ERR_SYSTEM naming the path and the errno text, or
 * PLAIT_ERR_INVALID_ARG for a destination holding foreign files.
 */
#ifndef PLAIT_CORE_RUNTIME_STAGED_DIR_H
#define PLAIT_CORE_RUNTIME_STAGED_DIR_H

#include <limits.h>
#include <stddef.h>
#include <plait/types.h>

typedef struct plait_staged_dir {
    char dest[PATH_MAX];
    char staging[PATH_MAX];
    int (*owned)(const char *name);  /* a file name the caller writes */
} plait_staged_dir;

/* Create an empty staging directory for `dest` (a stale one from an earlier
 * crash of the same pid is emptied first). `owned` must accept every name
 * the caller will write. */
plait_status plait_staged_dir_begin(plait_staged_dir *d, const char *dest, int (*owned)(const char *name));
/* The path of file `name` inside the staging directory (into buf). */
const char *plait_staged_dir_path(const plait_staged_dir *d, const char *name, char *buf, size_t cap);
/* Write a whole file into the staging directory (fsync'd). */
plait_status plait_staged_dir_write(const plait_staged_dir *d, const char *name, const void *data, size_t n);
/* fsync a file written through plait_staged_dir_path (by the caller's own stream). */
plait_status plait_staged_dir_sync_file(const plait_staged_dir *d, const char *name);
/* Put the staging directory in place of `dest`. On error nothing in `dest` changed. */
plait_status plait_staged_dir_commit(plait_staged_dir *d);
/* Remove the staging directory and what it holds (after an error). */
void plait_staged_dir_abort(plait_staged_dir *d);

#endif
