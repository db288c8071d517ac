/* Files plait writes: never through a link, temporary names of their own
 * (out_file.h). */
#include "runtime/out_file.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
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

/* A file with other names (hard links: cp -al, ln) is also elsewhere:
 * writing it would change that copy too. */
static plait_status hard_link_error(const char *path, unsigned long nlink) {
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "%s has %lu names (hard links, as cp -al or ln make): writing it would also change the "
                           "file under its other names; give it a name of its own (cp %s x && mv x %s) or choose "
                           "another directory",
                           path, nlink, path, path);
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
    if (sb.st_nlink > 1) {
        close(f);
        *fd = -1;
        return hard_link_error(path, sb.st_nlink);
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
        return st;
    }
    /* as fopen's "a": the stream starts at the end, so ftell() says whether
     * the file already holds something (a CSV's header); an O_APPEND
     * descriptor alone starts at 0 */
    if (flags & O_APPEND) fseek(*f, 0, SEEK_END);
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
    if (S_ISLNK(sb.st_mode)) return open_error("cannot open", path, ELOOP);
    if (S_ISREG(sb.st_mode) && sb.st_nlink > 1) return hard_link_error(path, (unsigned long)sb.st_nlink);
    if (!S_ISREG(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s is %s, not a regular file; plait writes only regular "
                                                      "files: remove it or choose another directory",
                               path, plait_file_kind(sb.st_mode));
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
    /* the expected start as text on one line: a binary magic (a PNG's) or a
     * header's line break shown as \xNN, not written into the message */
    char shown[4 * 40 + 1];
    size_t o = 0;
    for (const unsigned char *c = (const unsigned char *)first_line; *c && c - (const unsigned char *)first_line < 40;
         c++)
        o += (size_t)snprintf(shown + o, sizeof shown - o, *c < 0x20 || *c >= 0x7f ? "\\x%02x" : "%c", *c);
    return plait_set_error(PLAIT_ERR_INVALID_ARG,
                           "%s %s: %s, which plait did not write (it does not start with \"%s\"); not writing "
                           "over it: give another path or move it away",
                           option, path,
                           S_ISLNK(sb.st_mode)   ? "a symbolic link"
                           : S_ISREG(sb.st_mode) ? "a file"
                                                 : "not a regular file",
                           shown);
}

plait_status plait_out_fopen_temp(const char *path, char *tmp, size_t cap, FILE **f) {
    *f = NULL;
    int fd;
    plait_status st = plait_out_temp(path, tmp, cap, &fd);
    if (st != PLAIT_OK) return st;
    *f = fdopen(fd, "w");
    if (*f) return PLAIT_OK;
    st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", tmp, strerror(errno));
    close(fd);
    unlink(tmp);
    return st;
}

/* The pid in a temporary name "<name>.<pid>-<8 hex>.tmp", or 0. */
static long temp_owner(const char *name) {
    size_t n = strlen(name);
    if (n < 4 + 9 + 2 || strcmp(name + n - 4, ".tmp") != 0) return 0;
    const char *dash = name + n - 4 - 9;
    if (*dash != '-') return 0;
    for (int i = 1; i <= 8; i++)
        if (!isxdigit((unsigned char)dash[i])) return 0;
    const char *p = dash;
    while (p > name && isdigit((unsigned char)p[-1])) p--;
    if (p == dash || p == name || p[-1] != '.') return 0;
    return strtol(p, NULL, 10);
}

int plait_out_remove_stale_temps(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    DIR *dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        long pid = temp_owner(e->d_name);
        if (pid <= 0 || pid == (long)getpid()) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* its writer may still be at it */
        struct stat sb;
        if (fstatat(fd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode)) continue;
        if (unlinkat(fd, e->d_name, 0) == 0) removed++;
    }
    closedir(dp);
    return removed;
}
