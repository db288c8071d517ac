#include "runtime/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"

const char *plait_file_kind(unsigned mode) {
    mode_t m = (mode_t)mode;
    if (S_ISREG(m)) return "a regular file";
    if (S_ISLNK(m)) return "a symbolic link";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "a special file";
}

plait_status plait_open_regular(const char *path, const char *what, plait_status not_regular, int *fd,
                                uint64_t *size) {
    *fd = -1;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s %s: %s", what, path, strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot stat %s %s: %s", what, path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return plait_set_error(not_regular, "%s %s is %s, not a regular file; refusing to read it", what, path,
                               plait_file_kind(sb.st_mode));
    }
    /* Regular files never block; clear the flag so reads behave as usual. */
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) (void)fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return PLAIT_OK;
}

plait_status plait_read_exact(int fd, void *buf, size_t n, const char *path) {
    char *p = buf;
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, p + done, n - done, (off_t)done);
        if (r < 0) {
            if (errno == EINTR) continue;
            return plait_set_error(PLAIT_ERR_SYSTEM, "reading %s at byte %zu: %s", path, done, strerror(errno));
        }
        if (r == 0)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s shrank while being read: %zu bytes at open, %zu now",
                                   path, n, done);
        done += (size_t)r;
    }
    return PLAIT_OK;
}

plait_status plait_fopen_regular(const char *path, const char *what, plait_status not_regular, FILE **f) {
    *f = NULL;
    int fd;
    uint64_t size;
    plait_status st = plait_open_regular(path, what, not_regular, &fd, &size);
    if (st != PLAIT_OK) return st;
    *f = fdopen(fd, "r");
    if (!*f) {
        int err = errno;
        close(fd);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot open %s %s: %s", what, path, strerror(err));
    }
    return PLAIT_OK;
}
