/*
 * Opening the files plait writes, so that a write never goes where it must
 * not:
 *  - never through a symbolic link: a run directory (or an --out) holding
 *    a link named like one of plait's files, to a file elsewhere, is an
 *    error naming the link, and the file it points to is untouched; nor
 *    into a file with other names (hard links), a FIFO or a device;
 *  - a temporary file (written, synced, then renamed over its final name)
 *    has a name no other writer shares ("<path>.<pid>-<random>.tmp",
 *    created with O_EXCL, so never an existing file or a link), so two
 *    processes writing one path at once each rename a whole file of their
 *    own and the result is one of them, never a mixture.
 *
 * Thread-safe (no shared state). Errors: PLAIT_ERR_INVALID_ARG for a link
 * in the way, PLAIT_ERR_SYSTEM naming the path and the errno text.
 */
#ifndef PLAIT_CORE_RUNTIME_OUT_FILE_H
#define PLAIT_CORE_RUNTIME_OUT_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <plait/types.h>

/* Open `path` write-only (O_CREAT | O_CLOEXEC, plus `flags`: O_TRUNC or
 * O_APPEND, O_RDWR to read back), mode 0644, without following a link at
 * its last component. *fd on success (the caller closes it). */
plait_status plait_out_open(const char *path, int flags, int *fd);

/* The same as a stdio stream: `mode` "w" (truncate), "a" or "a+" (the
 * stream positioned at the end, as fopen's: ftell() > 0 when the file
 * already holds something). */
plait_status plait_out_fopen(const char *path, const char *mode, FILE **f);

/* Create a temporary file beside `path` for writing (its name into tmp,
 * cap bytes; the caller renames it over `path` or unlinks it). */
plait_status plait_out_temp(const char *path, char *tmp, size_t cap, int *fd);

/* plait_out_temp as a stdio stream for writing ("w"); on failure nothing
 * is left behind. */
plait_status plait_out_fopen_temp(const char *path, char *tmp, size_t cap, FILE **f);

/* Remove, in `dir` (not through a link), the temporary files of this
 * naming left by processes that are gone (killed while writing); a live
 * writer's, on this host, are kept. Returns how many were removed. */
int plait_out_remove_stale_temps(const char *dir);

/* 1 if `path` is a symbolic link (lstat), else 0. */
int plait_out_is_link(const char *path);

/* May a command write over `path`? Yes when nothing is there, or a regular
 * file whose first line starts with `first_line` (a file this command
 * wrote: a CSV with its header, a report with its title). Otherwise
 * PLAIT_ERR_INVALID_ARG naming the file and `option` ("--csv"): plait never
 * writes over a file it did not write. Never blocks (a FIFO is refused). */
plait_status plait_out_check_own(const char *path, const char *first_line, const char *option);

#endif
