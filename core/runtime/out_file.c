/* Files plait writes: never through a link, temporary names of their own
 * (out_file.h). */
#include "runtime/out_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/regular_file.h"

int plait_out_is_link(const char *path) {
    struct stat sb;
    return lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode);
}

static plait_status open_error(const char *what, const char *path, int err) {
    if (err == ELOOP || (err == EEXIST && plait_out_is_link(path)))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s is a symbolic link: plait does not write through links (it would write where "
                               "the link points); remove the link or choose another directory",
                               path);
    return plait_set_error(PLAIT_ERR_SYSTEM, "%s %s: %s", what, path, strerror(err));
}

plait_status plait_out_open(const char *path, int flags, int *fd) {
    int access = flags & O_RDWR ? O_RDWR : O_WRONLY;
    /* O_NONBLOCK: opening a FIFO for writing would otherwise wait for a
     * reader (with none, it fails at once: ENXIO); the flag is cleared once
     * the file is known to be regular. O_TRUNC waits for that check too. */
    int f = open(path, access | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | (flags & O_APPEND), 0644);
    if (f < 0 && errno == ENXIO) {
        *fd = -1;
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s is a FIFO, not a regular file; plait writes only regular "
                                                      "files: remove it or choose another directory",
                               path);
    }
    if (f < 0) {
        *fd = -1;
        return open_error("cannot open", path, errno);
    }
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        *fd = -1;
        return open_error("cannot stat", path, err);
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        *fd = -1;
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s is %s, not a regular file; plait writes only regular "
                                                      "files: remove it or choose another directory",
                               path, plait_file_kind(sb.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    if ((flags & O_TRUNC) && ftruncate(f, 0) != 0) {
        int err = errno;
        close(f);
        *fd = -1;
        return open_error("cannot truncate", path, err);
    }
    *fd = f;
    return PLAIT_OK;
}

plait_status plait_out_fopen(const char *path, const char *mode, FILE **f) {
    *f = NULL;
    int flags = mode[0] == 'w' ? O_TRUNC : O_APPEND;
    if (strchr(mode, '+')) flags |= O_RDWR;
    int fd;
    plait_status st = plait_out_open(path, flags, &fd);
    if (st != PLAIT_OK) return st;
    *f = fdopen(fd, mode);
    if (!*f) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s: %s", path, strerror(errno));
        close(fd);
    }
    return st;
}

plait_status plait_out_temp(const char *path, char *tmp, size_t cap, int *fd) {
    *fd = -1;
    for (int attempt = 0; attempt < 16; attempt++) {
        uint32_t r = 0;
        if (getrandom(&r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) r ^= (uint32_t)attempt * 2654435761u;
        if ((size_t)snprintf(tmp, cap, "%s.%ld-%08x.tmp", path, (long)getpid(), r) >= cap)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "path too long: %s", path);
        *fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (*fd >= 0) return PLAIT_OK;
        if (errno != EEXIST) return open_error("cannot create", tmp, errno);
    }
    return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create a temporary file beside %s: every name tried exists",
                           path);
}

plait_status plait_out_check_own(const char *path, const char *first_line, const char *option) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? PLAIT_OK : open_error("cannot read", path, errno);
    size_t want = strlen(first_line);
    char head[256] = "";
    ssize_t got = -1;
    if (S_ISREG(sb.st_mode) && want < sizeof head) {
        int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            got = read(fd, head, want);
            close(fd);
        }
        if (sb.st_size == 0 || (got == (ssize_t)want && memcmp(head, first_line, want) == 0)) return PLAIT_OK;
    }
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "%s %s: %s, which plait did not write (its first line is not \"%.40s...\"); not writing "
                           "over it: give another path or move it away",
                           option, path, S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISREG(sb.st_mode) ? "a file" : "not a regular file",
                           first_line);
}
