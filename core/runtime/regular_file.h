/*
 * Opening input files that must be regular files (configs, data, checkpoint
 * files). A plain open() of a FIFO blocks until a writer appears and a
 * symlink to /dev/zero reads forever, so readers open without blocking,
 * fstat, refuse anything that is not a regular file, and read no further than
 * the size fstat gave. Thread-safe (no shared state).
 */
#ifndef PLAIT_CORE_RUNTIME_REGULAR_FILE_H
#define PLAIT_CORE_RUNTIME_REGULAR_FILE_H

#include <stdint.h>
#include <stdio.h>
#include <plait/types.h>

/* Open `path` read-only (O_CLOEXEC) if it is a regular file. On success *fd
 * is the open descriptor (the caller closes it) and *size the file's size
 * at open time. On failure nothing stays open and the error names `what`
 * ("config file", "data file"...), the path and why: the open's errno
 * (PLAIT_ERR_SYSTEM) or the kind of file found (`not_regular`, the status
 * the caller's kind of input uses for a wrong file). */
plait_status plait_open_regular(const char *path, const char *what, plait_status not_regular, int *fd,
                                uint64_t *size);

/* Read exactly `n` bytes from the start of `fd` into `buf`; a file that ends
 * sooner (it shrank after the open) is an error naming `path` and both sizes. */
plait_status plait_read_exact(int fd, void *buf, size_t n, const char *path);

/* plait_open_regular as a stdio stream for reading. */
plait_status plait_fopen_regular(const char *path, const char *what, plait_status not_regular, FILE **f);

/* What a file that is not a regular one is, for messages: "a FIFO",
 * "a directory", "a character device"... (`mode` is a stat st_mode). */
const char *plait_file_kind(unsigned mode);

#endif
