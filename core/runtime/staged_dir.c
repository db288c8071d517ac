#include "runtime/staged_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/regular_file.h"

static plait_status sys_error(const char *what, const char *path) {
    return plait_set_error(PLAIT_ERR_SYSTEM, "%s %s: %s", what, path, strerror(errno));
}

/* Remove the plain files of a flat directory, then the directory, never
 * through a link: a link in its place is not entered (O_NOFOLLOW), and
 * entries are removed relative to the directory opened. Only
 * async-signal-safe calls (raw getdents64), so the interruption handler
 * below uses it too. */
static void remove_flat(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return;
    char buf[4096] __attribute__((aligned(8)));
    long n;
    /* entries are unlinked while reading: read again from the start until a
     * pass removes nothing (what is left cannot be removed) */
    for (int removed = 1; removed;) {
        removed = 0;
        if (lseek(fd, 0, SEEK_SET) != 0) break;
        while ((n = syscall(SYS_getdents64, fd, buf, sizeof buf)) > 0) {
            for (long off = 0; off < n;) {
                struct linux_dirent64 {
                    uint64_t d_ino;
                    int64_t d_off;
                    unsigned short d_reclen;
                    unsigned char d_type;
                    char d_name[];
                } *e = (struct linux_dirent64 *)(buf + off);
                off += e->d_reclen;
                if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
                if (unlinkat(fd, e->d_name, 0) == 0) removed = 1;
            }
        }
    }
    close(fd);
    rmdir(dir);
}

/* ---- interruption: SIGINT, SIGTERM or SIGHUP while a directory is staged
 * removes it, then ends the process as the signal would have. */

static const int caught_signals[] = {SIGINT, SIGTERM, SIGHUP};
#define N_CAUGHT (sizeof caught_signals / sizeof caught_signals[0])
static struct sigaction previous_actions[N_CAUGHT];
static char interrupted_staging[PATH_MAX]; /* written only while no handler is installed */
static volatile sig_atomic_t handler_installed;

static void on_interrupt(int sig) {
    static const char msg[] = "plait: interrupted; removing the staging directory ";
    remove_flat(interrupted_staging);
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    w = write(STDERR_FILENO, interrupted_staging, strlen(interrupted_staging));
    w = write(STDERR_FILENO, "\n", 1);
    (void)w;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void catch_interrupts(const char *staging) {
    snprintf(interrupted_staging, sizeof interrupted_staging, "%s", staging);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    sigfillset(&sa.sa_mask); /* one handler at a time */
    for (size_t i = 0; i < N_CAUGHT; i++) {
        struct sigaction old;
        sigaction(caught_signals[i], NULL, &old);
        previous_actions[i] = old;
        /* ignored (nohup, a background job), or handled by the process
         * itself ([run] exit_signal: the run saves and stops once this
         * checkpoint is written): leave it so */
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
        sigaction(caught_signals[i], &sa, NULL);
    }
    handler_installed = 1;
}

static void release_interrupts(void) {
    if (!handler_installed) return;
    for (size_t i = 0; i < N_CAUGHT; i++) sigaction(caught_signals[i], &previous_actions[i], NULL);
    handler_installed = 0;
}

/* ---- stale staging directories: "<dest>.staging-<pid>" and
 * "<dest>.old-<pid>" left by a process that is gone (killed, or its machine
 * crashed). A live one holds a lock on its directory (flock, which a
 * process's end releases), and its pid is alive when it runs here. */

static int stale_pid(const char *name, const char *prefix, long *pid) {
    size_t n = strlen(prefix);
    if (strncmp(name, prefix, n) != 0 || !name[n]) return 0;
    char *end = NULL;
    errno = 0;
    long p = strtol(name + n, &end, 10);
    if (errno || *end || p <= 0 || p == (long)getpid()) return 0;
    if (kill((pid_t)p, 0) == 0 || errno != ESRCH) return 0; /* alive here */
    *pid = p;
    return 1;
}

static void remove_stale(const plait_staged_dir *d) {
    char parent[PATH_MAX], staging[PATH_MAX + 16], old[PATH_MAX + 16];
    const char *slash = strrchr(d->dest, '/');
    const char *base = slash ? slash + 1 : d->dest;
    if (slash == d->dest) snprintf(parent, sizeof parent, "/");
    else if (slash) snprintf(parent, sizeof parent, "%.*s", (int)(slash - d->dest), d->dest);
    else snprintf(parent, sizeof parent, ".");
    snprintf(staging, sizeof staging, "%s.staging-", base);
    snprintf(old, sizeof old, "%s.old-", base);
    int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) return;
    DIR *dp = fdopendir(pfd);
    if (!dp) {
        close(pfd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(dp)) != NULL) {
        long pid;
        if (!stale_pid(e->d_name, staging, &pid) && !stale_pid(e->d_name, old, &pid)) continue;
        int fd = openat(pfd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue; /* not a directory, or a link: not ours */
        int free_lock = flock(fd, LOCK_EX | LOCK_NB) == 0;
        close(fd);
        if (!free_lock) continue;
        char path[2 * PATH_MAX + 2];
        snprintf(path, sizeof path, "%s/%s", parent, e->d_name);
        remove_flat(path);
        PLAIT_INFO("staging", "removed %s, left behind by process %ld, which is gone", path, pid);
    }
    closedir(dp);
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

static plait_status check_dest(const char *dest, int (*owned)(const char *name));

plait_status plait_staged_dir_begin(plait_staged_dir *d, const char *dest, int (*owned)(const char *name)) {
    memset(d, 0, sizeof *d);
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') n--; /* "out/" and "out" are one destination */
    if (n == 0 || n + 32 >= sizeof d->dest)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "output directory \"%s\" is empty or too long", dest);
    snprintf(d->dest, sizeof d->dest, "%.*s", (int)n, dest);
    snprintf(d->staging, sizeof d->staging, "%s.staging-%ld", d->dest, (long)getpid());
    d->owned = owned;
    d->lock_fd = -1;
    struct stat sb;
    if (lstat(d->dest, &sb) == 0 && S_ISLNK(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s is a symbolic link: plait does not replace a directory through a link (it "
                               "would write where the link points); give the directory itself",
                               d->dest);
    /* refused now, before the caller's work, not at commit after it */
    plait_status st = check_dest(d->dest, owned);
    if (st != PLAIT_OK) return st;
    remove_flat(d->staging);
    st = make_parents(d->staging);
    if (st != PLAIT_OK) return st;
    remove_stale(d);
    /* caught before the directory exists, so that no signal can come
     * between its creation and the handler that removes it */
    catch_interrupts(d->staging);
    if (mkdir(d->staging, 0777) != 0) {
        st = sys_error("cannot create", d->staging);
        release_interrupts();
        return st;
    }
    /* held until commit or abort: the staging directory is in use */
    d->lock_fd = open(d->staging, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (d->lock_fd < 0 || flock(d->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        st = sys_error("cannot lock", d->staging);
        plait_staged_dir_abort(d);
        return st;
    }
    return PLAIT_OK;
}

static void end_staging(plait_staged_dir *d) {
    release_interrupts();
    if (d->lock_fd >= 0) close(d->lock_fd);
    d->lock_fd = -1;
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
static plait_status check_replaceable(const char *dest, int (*owned)(const char *name)) {
    DIR *dp = opendir(dest);
    if (!dp) return sys_error("cannot read", dest);
    struct dirent *e;
    plait_status st = PLAIT_OK;
    while (st == PLAIT_OK && (e = readdir(dp)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (!owned(e->d_name)) {
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s already holds %s, which this command does not write; choose another output "
                                 "directory or remove it (nothing was changed)",
                                 dest, e->d_name);
            continue;
        }
        /* the name alone is not enough: what commit replaces is only
         * removed if it is a plain file (remove_flat), so a directory or a
         * link by an output's name would be carried off into the staging
         * directory and left there, the command saying it succeeded */
        struct stat sb;
        if (fstatat(dirfd(dp), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(sb.st_mode))
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s already holds %s, which is %s, not a file this command writes; choose another "
                                 "output directory or remove it (nothing was changed)",
                                 dest, e->d_name, plait_file_kind(sb.st_mode));
    }
    closedir(dp);
    return st;
}

/* What commit would refuse about `dest` as it is now: a link, something
 * other than a directory, a directory holding files the caller does not
 * write. */
static plait_status check_dest(const char *dest, int (*owned)(const char *name)) {
    struct stat s;
    if (lstat(dest, &s) != 0) return PLAIT_OK;
    if (!S_ISDIR(s.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s exists and is %s, not a directory (nothing was changed)",
                               dest, S_ISLNK(s.st_mode) ? "a symbolic link" : plait_file_kind(s.st_mode));
    return check_replaceable(dest, owned);
}

plait_status plait_staged_dir_check(const char *dest, int (*owned)(const char *name)) {
    size_t n = strlen(dest);
    while (n > 1 && dest[n - 1] == '/') n--;
    char trimmed[PATH_MAX];
    if (n == 0 || n + 32 >= sizeof trimmed)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "output directory \"%s\" is empty or too long", dest);
    snprintf(trimmed, sizeof trimmed, "%.*s", (int)n, dest);
    return check_dest(trimmed, owned);
}

plait_status plait_staged_dir_commit(plait_staged_dir *d) {
    char parent[PATH_MAX], old[PATH_MAX + 32];
    plait_status st = fsync_path(d->staging, O_RDONLY | O_DIRECTORY);
    if (st != PLAIT_OK) return st;
    /* checked again: the destination may have changed since begin */
    struct stat s;
    int exists = lstat(d->dest, &s) == 0;
    if ((st = check_dest(d->dest, d->owned)) != PLAIT_OK) return st;
    if (exists && renameat2(AT_FDCWD, d->staging, AT_FDCWD, d->dest, RENAME_EXCHANGE) == 0) {
        /* one step, so the destination is never missing; the staging name
         * now holds the old outputs (removed by the interruption handler
         * too, should a signal come now) */
        remove_flat(d->staging);
    } else {
        /* no RENAME_EXCHANGE here (an older kernel, some network file
         * systems): aside, then in */
        snprintf(old, sizeof old, "%s.old-%ld", d->dest, (long)getpid());
        if (exists && rename(d->dest, old) != 0) return sys_error("cannot move aside", d->dest);
        if (rename(d->staging, d->dest) != 0) {
            st = sys_error("cannot rename into place", d->staging);
            if (exists) rename(old, d->dest);
            return st;
        }
        if (exists) remove_flat(old);
    }
    end_staging(d);
    parent_of(d->dest, parent, sizeof parent);
    return fsync_path(parent, O_RDONLY | O_DIRECTORY);
}

void plait_staged_dir_abort(plait_staged_dir *d) {
    if (d->staging[0]) remove_flat(d->staging);
    end_staging(d);
}
