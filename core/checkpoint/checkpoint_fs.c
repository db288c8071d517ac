#include "checkpoint/checkpoint_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "checkpoint/safetensors_crc32c.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

plait_status plait_fs_pwrite_all(int fd, const void *buf, size_t n, uint64_t offset, const char *path) {
    const char *p = buf;
    while (n > 0) {
        ssize_t w = pwrite(fd, p, n, (off_t)offset);
        if (w < 0) {
            if (errno == EINTR) continue;
            return plait_set_error(PLAIT_ERR_SYSTEM, "writing %s at byte %llu: %s", path,
                                   (unsigned long long)offset, strerror(errno));
        }
        if (w == 0)
            return plait_set_error(PLAIT_ERR_SYSTEM, "writing %s at byte %llu: no progress", path,
                                   (unsigned long long)offset);
        p += w;
        n -= (size_t)w;
        offset += (uint64_t)w;
    }
    return PLAIT_OK;
}

plait_status plait_fs_pread_all(int fd, void *buf, size_t n, uint64_t offset, const char *path) {
    char *p = buf;
    size_t want = n;
    while (n > 0) {
        ssize_t r = pread(fd, p, n, (off_t)offset);
        if (r < 0) {
            if (errno == EINTR) continue;
            return plait_set_error(PLAIT_ERR_SYSTEM, "reading %s at byte %llu: %s", path,
                                   (unsigned long long)offset, strerror(errno));
        }
        if (r == 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s is truncated: wanted %zu bytes at byte %llu",
                                   path, want, (unsigned long long)(offset - (want - n)));
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return PLAIT_OK;
}

plait_status plait_fs_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "opening directory %s to sync it: %s", dir, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    /* Some file systems cannot fsync directories (EINVAL); nothing more to do there. */
    if (rc != 0 && err != EINVAL)
        return plait_set_error(PLAIT_ERR_SYSTEM, "syncing directory %s: %s", dir, strerror(err));
    return PLAIT_OK;
}

plait_status plait_fs_fsync_parent(const char *path) {
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (!slash) return plait_fs_fsync_dir(".");
    if (slash == path) return plait_fs_fsync_dir("/");
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    return plait_fs_fsync_dir(dir);
}

plait_status plait_fs_rename_durable(const char *tmp, const char *path) {
    if (rename(tmp, path) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "renaming %s to %s: %s", tmp, path, strerror(errno));
    return plait_fs_fsync_parent(path);
}

plait_status plait_fs_write_file_atomic(const char *path, const void *data, size_t n) {
    char tmp[PATH_MAX];
    int fd;
    plait_status st = plait_out_temp(path, tmp, sizeof tmp, &fd);
    if (st != PLAIT_OK) return st;
    st = plait_fs_pwrite_all(fd, data, n, 0, tmp);
    if (st == PLAIT_OK && fsync(fd) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "syncing %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && st == PLAIT_OK)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "closing %s: %s", tmp, strerror(errno));
    if (st == PLAIT_OK) st = plait_fs_rename_durable(tmp, path);
    if (st != PLAIT_OK) unlink(tmp);
    return st;
}

plait_status plait_fs_read_small_file(const char *path, size_t max_bytes, char **out, size_t *len) {
    *out = NULL;
    int fd;
    uint64_t size;
    plait_status s = plait_open_regular(path, "file", PLAIT_ERR_PROTOCOL, &fd, &size);
    if (s != PLAIT_OK) return s;
    if (size > max_bytes) {
        close(fd);
        return plait_set_error(PLAIT_ERR_PROTOCOL, "%s has %llu bytes, more than the %zu a file of its kind may have: "
                                                   "damaged, or another file in its place",
                               path, (unsigned long long)size, max_bytes);
    }
    size_t n = (size_t)size;
    char *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    s = plait_fs_pread_all(fd, buf, n, 0, path);
    close(fd);
    if (s != PLAIT_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return PLAIT_OK;
}

plait_status plait_fs_file_crc32c(const char *path, uint64_t *bytes, uint32_t *crc) {
    *bytes = 0;
    *crc = 0;
    int fd;
    uint64_t size;
    plait_status st = plait_open_regular(path, "file", PLAIT_ERR_PROTOCOL, &fd, &size);
    if (st != PLAIT_OK) return st;
    enum { CHUNK = 1 << 20 };
    char *buf = malloc(CHUNK);
    if (!buf) {
        close(fd);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    uint32_t c = 0;
    uint64_t total = 0;
    /* Never past the size at open: a file that grows (or never ends) is not read forever. */
    while (total < size) {
        uint64_t left = size - total;
        ssize_t r = read(fd, buf, left < CHUNK ? (size_t)left : CHUNK);
        if (r < 0) {
            if (errno == EINTR) continue;
            st = plait_set_error(PLAIT_ERR_SYSTEM, "reading %s: %s", path, strerror(errno));
            break;
        }
        if (r == 0) break;
        c = plait_crc32c(c, buf, (size_t)r);
        total += (uint64_t)r;
    }
    free(buf);
    close(fd);
    *bytes = total;
    *crc = c;
    return st;
}
