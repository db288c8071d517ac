/*
 * A directory of outputs that appears whole or not at all: files are written
 * into a staging directory beside the destination ("<dir>.staging-<pid>"),
 * fsync'd, and the staging directory is renamed into place. A destination
 * that already exists is replaced only when every entry in it is one the
 * caller recognises as its own output (the `owned` predicate), so a mistyped
 * --out never deletes someone else's files; the new directory and the old
 * are exchanged in one rename (RENAME_EXCHANGE; where the file system lacks
 * it, the old one is moved aside to "<dir>.old-<pid>" first), then the old
 * one removed. A destination that is a symbolic link is refused.
 *
 * Nothing is left behind: while a directory is staged, SIGINT, SIGTERM and
 * SIGHUP remove the staging directory, then end the process as the signal
 * would have (a signal the process ignores or handles itself stays so:
 * runtime/stop_signal.h); and the staging
 * and ".old-" directories of the same destination left by a process that is
 * gone (killed with SIGKILL, a crash) are removed by the next begin. A live
 * one is known by the lock (flock) its process holds on it, and on this
 * host by its pid.
 *
 * Not thread-safe; one staged directory per process at a time. Errors are
 * PLAIT_ERR_SYSTEM naming the path and the errno text, or
 * PLAIT_ERR_INVALID_ARG for a destination holding foreign files or being a
 * link.
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
    int lock_fd;                     /* the staging directory, locked while in use */
} plait_staged_dir;

/* What begin and commit refuse about `dest` (a link, not a directory, a
 * directory holding a file `owned` rejects), checked without creating
 * anything: for a command that works long before it writes. */
plait_status plait_staged_dir_check(const char *dest, int (*owned)(const char *name));
/* Create an empty staging directory for `dest` (stale ones of processes that
 * are gone are removed first) and catch interruptions until commit or
 * abort; refuses what plait_staged_dir_check refuses. `owned` must accept every name the caller will write. */
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
