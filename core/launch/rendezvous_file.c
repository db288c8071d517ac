#include "launch/rendezvous_file.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launch/net.h"
#include "launch/store.h"
#include "runtime/error.h"

static plait_status safe_dir(const char *dir) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", dir, strerror(errno));
    struct stat sb;
    if (lstat(dir, &sb) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot inspect %s: %s", dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode) || sb.st_uid != getuid() || (sb.st_mode & 077) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM,
                               "%s is not a private directory of this user (it must be a real "
                               "directory owned by uid %u with mode 0700); remove it or set "
                               "PLAIT_JOB_TOKEN and [comm] rendezvous", dir, (unsigned)getuid());
    return PLAIT_OK;
}

plait_status plait_rdv_file_path(const char *job_id, char *path, size_t cap) {
    char dir[512];
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat sb;
    if (xdg && *xdg && stat(xdg, &sb) == 0 && S_ISDIR(sb.st_mode) && sb.st_uid == getuid())
        snprintf(dir, sizeof dir, "%s/plait", xdg);
    else
        snprintf(dir, sizeof dir, "/tmp/plait-%u", (unsigned)getuid());
    plait_status st = safe_dir(dir);
    if (st != PLAIT_OK) return st;
    if ((size_t)snprintf(path, cap, "%s/job-%s.rdv", dir, job_id) >= cap)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "rendezvous file path too long");
    return PLAIT_OK;
}

plait_status plait_rdv_file_publish(const char *path, int port, const char *token) {
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create %s: %s", tmp, strerror(errno));
    char text[PLAIT_STORE_MAX_TOKEN + 128];
    int n = snprintf(text, sizeof text, "plait-rendezvous 1\npid %d\nport %d\ntoken %s\n", (int)getpid(),
                     port, token);
    ssize_t w = write(fd, text, (size_t)n);
    int e = errno;
    if (close(fd) != 0 || w != n) {
        unlink(tmp);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", tmp, strerror(w < 0 ? e : EIO));
    }
    if (rename(tmp, path) != 0) {
        e = errno;
        unlink(tmp);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot publish %s: %s", path, strerror(e));
    }
    return PLAIT_OK;
}

/* 1 = read a valid file from a live writer, 0 = not (yet). */
static int try_read(const char *path, int *port, char *token, size_t cap) {
    /* O_NONBLOCK: a FIFO in the file's place is refused below, never
     * waited on */
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return 0;
    struct stat sb;
    char text[PLAIT_STORE_MAX_TOKEN + 128];
    ssize_t n = -1;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == getuid() && (sb.st_mode & 077) == 0)
        n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) return 0;
    text[n] = '\0';
    int pid = 0, p = 0;
    char tok[PLAIT_STORE_MAX_TOKEN + 1];
    if (sscanf(text, "plait-rendezvous 1\npid %d\nport %d\ntoken %256s\n", &pid, &p, tok) != 3) return 0;
    if (pid <= 0 || p < 1 || p > 65535 || strlen(tok) + 1 > cap) return 0;
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0; /* stale: its writer is gone */
    *port = p;
    memcpy(token, tok, strlen(tok) + 1);
    return 1;
}

plait_status plait_rdv_file_wait(const char *path, double deadline, int *port, char *token,
                                 size_t token_cap) {
    for (;;) {
        if (try_read(path, port, token, token_cap)) return PLAIT_OK;
        if (plait_clock_now() >= deadline)
            return plait_set_error(PLAIT_ERR_TIMEOUT,
                                   "rank 0 did not publish the job's rendezvous file %s in time: rank 0 "
                                   "never joined the job or is stuck", path);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

void plait_rdv_file_remove(const char *path) {
    if (path && *path) unlink(path);
}
