#include "runtime/staged_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"

static plait_status sys_error(const char *what, const char *path) {
    return plait_set_error(PLAIT_ERR_SYSTEM, "%s %s: %s", what, path, strerror(errno));
}

/* Remove the plain files of a flat directory, then the directory, never
 * through a link: a link in its place is not entered (O_NOFOLLOW), and
 * entries are removed relative to the directory opened. */
static void remove_flat(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    DIR *dp = fdopendir(fd);
    if (!dp) {
        close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        unlinkat(fd, e->d_name, 0);
    }
    closedir(dp);
    rmdir(dir);
}

static plait_status fsync_path(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) return sys_error("cannot open", path);
    int rc = fsync(fd);
    close(fd);
    return rc == 0 ? PLAIT_OK : sys_error("cannot fsync", path);
}

/* The parent directory of `path` (for fsync after a rename in it). */
static void parent_of(const char *path, char *out, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(out, cap, ".");
    else if (slash == path) snprintf(out, cap, "/");
    else snprintf(out, cap, "%.*s", (int)(slash - path), path);
}

/* mkdir -p of the directory that will hold `path`. */
static plait_status make_parents(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; (p = strchr(p, '/')) != NULL; p++) {
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) return sys_error("cannot create", buf);
        *p = '/';
    }
    return PLAIT_OK;
}

plait_status plait_staged_dir_begin(plait_staged_dir *d, const char *dest, int (*owned)(const char *name)) {
    memset(d, 0, sizeof *d);
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') n--; /* "out/" and "out" are one destination */
    if (n == 0 || n + 32 >= sizeof d->dest)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "output directory \"%s\" is empty or too long", dest);
    snprintf(d->dest, sizeof d->dest, "%.*s", (int)n, dest);
    snprintf(d->staging, sizeof d->staging, "%s.staging-%ld", d->dest, (long)getpid());
    d->owned = owned;
    remove_flat(d->staging);
    plait_status st = make_parents(d->staging);
    if (st != PLAIT_OK) return st;
    if (mkdir(d->staging, 0777) != 0) return sys_error("cannot create", d->staging);
    return PLAIT_OK;
}

const char *plait_staged_dir_path(const plait_staged_dir *d, const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s", d->staging, name);
    return buf;
}

plait_status plait_staged_dir_write(const plait_staged_dir *d, const char *name, const void *data, size_t n) {
    char path[PATH_MAX + 256];
    plait_staged_dir_path(d, name, path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return sys_error("cannot create", path);
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            plait_status st = sys_error("cannot write", path);
            close(fd);
            return st;
        }
        p += w;
        n -= (size_t)w;
    }
    int rc = fsync(fd);
    plait_status st = rc == 0 ? PLAIT_OK : sys_error("cannot fsync", path);
    if (close(fd) != 0 && st == PLAIT_OK) st = sys_error("cannot close", path);
    return st;
}

plait_status plait_staged_dir_sync_file(const plait_staged_dir *d, const char *name) {
    char path[PATH_MAX + 256];
    return fsync_path(plait_staged_dir_path(d, name, path, sizeof path), O_RDONLY);
}

/* Every entry of an existing destination must be the caller's own output. */
static plait_status check_replaceable(const plait_staged_dir *d) {
    DIR *dp = opendir(d->dest);
    if (!dp) return sys_error("cannot read", d->dest);
    struct dirent *e;
    plait_status st = PLAIT_OK;
    while (st == PLAIT_OK && (e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!d->owned(e->d_name))
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s already holds %s, which this command does not write; choose another output "
                                 "directory or remove it (nothing was changed)",
                                 d->dest, e->d_name);
    }
    closedir(dp);
    return st;
}

plait_status plait_staged_dir_commit(plait_staged_dir *d) {
    char parent[PATH_MAX], old[PATH_MAX + 32];
    plait_status st = fsync_path(d->staging, O_RDONLY | O_DIRECTORY);
    if (st != PLAIT_OK) return st;
    struct stat s;
    int exists = stat(d->dest, &s) == 0;
    if (exists && !S_ISDIR(s.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s exists and is not a directory (nothing was changed)",
                               d->dest);
    if (exists && (st = check_replaceable(d)) != PLAIT_OK) return st;
    snprintf(old, sizeof old, "%s.old-%ld", d->dest, (long)getpid());
    if (exists && rename(d->dest, old) != 0) return sys_error("cannot move aside", d->dest);
    if (rename(d->staging, d->dest) != 0) {
        st = sys_error("cannot rename into place", d->staging);
        if (exists) rename(old, d->dest);
        return st;
    }
    if (exists) remove_flat(old);
    parent_of(d->dest, parent, sizeof parent);
    return fsync_path(parent, O_RDONLY | O_DIRECTORY);
}

void plait_staged_dir_abort(plait_staged_dir *d) {
    if (d->staging[0]) remove_flat(d->staging);
}
