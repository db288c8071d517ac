/*
 * Durable file operations for checkpoints: complete writes, fsync of files
 * and directories, atomic replacement by rename. Every function sets the
 * error (naming the path and the errno text) and returns PLAIT_ERR_SYSTEM on
 * failure. Thread-safe (no shared state).
 */
#ifndef PLAIT_CORE_CHECKPOINT_FS_H
#define PLAIT_CORE_CHECKPOINT_FS_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

/* pwrite all `n` bytes at `offset`, retrying short writes and EINTR. */
plait_status plait_fs_pwrite_all(int fd, const void *buf, size_t n, uint64_t offset, const char *path);
/* pread exactly `n` bytes at `offset` (a short file is an error naming both sizes). */
plait_status plait_fs_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path);
/* fsync the directory `dir` so renames and creations in it are durable. */
plait_status plait_fs_fsync_dir(const char *dir);
/* fsync the directory holding `path`. */
plait_status plait_fs_fsync_parent(const char *path);
/* rename(tmp, path) then fsync the parent directory. */
plait_status plait_fs_rename_durable(const char *tmp, const char *path);
/* Write `n` bytes to a temporary file of this call's own beside `path`
 * (runtime/out_file.h), fsync, rename over `path`, fsync the directory:
 * readers see the old file or the whole new one, never a part. */
plait_status plait_fs_write_file_atomic(const char *path, const void *data, size_t n);
/* Read a whole (small) file into a NUL-terminated malloc'd buffer; files
 * larger than `max_bytes` are refused. Caller frees *out. */
plait_status plait_fs_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len);
/* CRC32C and size of a whole file (read in chunks). */
plait_status plait_fs_file_crc32c(const char *path, uint64_t *bytes, uint32_t *crc);

#endif
