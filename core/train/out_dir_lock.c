#include "train/out_dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/out_file.h"

plait_status plait_out_dir_lock(const char *out_dir, int *fd) {
    *fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/" PLAIT_OUT_DIR_LOCK_FILE, out_dir);
    int f = -1;
    /* never through a link, never a FIFO or a device (out_file.h) */
    plait_status opened = plait_out_open(path, O_RDWR, &f);
    if (opened != PLAIT_OK)
        return plait_wrap_error(opened, "cannot lock the run directory %s", out_dir);
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t n = err == EWOULDBLOCK ? pread(f, holder, sizeof holder - 1, 0) : -1;
        close(f);
        if (err != EWOULDBLOCK)
            return plait_set_error(PLAIT_ERR_SYSTEM, "cannot lock %s: %s", path, strerror(err));
        holder[n > 0 ? n : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        plait_error_mark_final();
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "run directory %s is in use by another run (%s); two runs in one directory would "
                               "overwrite each other's checkpoints and metrics.csv: wait for it to end, or choose "
                               "another [run] out_dir",
                               out_dir, *holder ? holder : "holder unknown");
    }
    char host[256] = "?", text[512], when[64] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int len = snprintf(text, sizeof text, "pid %ld on host %s, started %s\n", (long)getpid(), host, when);
    if (ftruncate(f, 0) != 0 || pwrite(f, text, (size_t)len, 0) != len) {
        int err = errno;
        close(f);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", path, strerror(err));
    }
    *fd = f;
    return PLAIT_OK;
}

void plait_out_dir_unlock(int fd) {
    if (fd >= 0) close(fd);
}

plait_status plait_out_dir_check(const char *out_dir, int fd) {
    if (fd < 0) return PLAIT_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/" PLAIT_OUT_DIR_LOCK_FILE, out_dir);
    struct stat held, now;
    const char *what = NULL;
    if (fstat(fd, &held) != 0 || held.st_nlink == 0) what = "was removed";
    else if (lstat(path, &now) != 0) what = errno == ENOENT ? "was removed or moved away" : "can no longer be read";
    else if (now.st_dev != held.st_dev || now.st_ino != held.st_ino) what = "was replaced by another directory";
    if (!what) return PLAIT_OK;
    plait_error_mark_final();
    return plait_set_error(PLAIT_ERR_SYSTEM,
                           "the run directory %s %s while the run was writing there (its %s is not the one this "
                           "run locked): its metrics.csv, logs and checkpoints are gone with it; the run stops "
                           "rather than write into a directory that another run may now hold",
                           out_dir, what, path);
}
