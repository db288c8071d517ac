#include "train/out_dir_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime/clock.h"
#include "runtime/error.h"
#include "runtime/out_file.h"

/* The refusal, naming the holder as its lock file does (its first line). */
static plait_status in_use(const char *out_dir, int f) {
    char holder[256] = "";
    ssize_t n = pread(f, holder, sizeof holder - 1, 0);
    holder[n > 0 ? n : 0] = '\0';
    holder[strcspn(holder, "\n")] = '\0';
    plait_error_mark_final();
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "run directory %s is in use by another run (%s); two runs in one directory would "
                           "overwrite each other's checkpoints and metrics.csv: wait for it to end, or choose "
                           "another [run] out_dir",
                           out_dir, *holder ? holder : "holder unknown");
}

/* A rank looking at the lock (plait_out_dir_enter) holds it shared for a
 * moment; a run holds it exclusively. So when the exclusive lock is
 * refused, a shared one tells the two apart: refused too, a run holds the
 * directory; granted, only a look was in the way, and the lock is tried
 * again. Looks come and go in microseconds: the lock refused for 10 s
 * while only shared holds were in the way is taken as held all the same.
 * Returns 0 (locked), or an errno (EWOULDBLOCK: a run holds it). */
static int lock_exclusive(int f) {
    double give_up = plait_clock_now() + 10.0;
    for (;;) {
        if (flock(f, LOCK_EX | LOCK_NB) == 0) return 0;
        if (errno != EWOULDBLOCK) return errno;
        if (flock(f, LOCK_SH | LOCK_NB) != 0) return errno;
        (void)flock(f, LOCK_UN);
        if (plait_clock_now() > give_up) return EWOULDBLOCK;
        plait_clock_sleep(0.001);
    }
}

plait_status plait_out_dir_lock(const char *out_dir, const char *job, int *fd) {
    *fd = -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/" PLAIT_OUT_DIR_LOCK_FILE, out_dir);
    int f = -1;
    /* never through a link, never a FIFO or a device (out_file.h) */
    plait_status opened = plait_out_open(path, O_RDWR, &f);
    if (opened != PLAIT_OK)
        return plait_wrap_error(opened, "cannot lock the run directory %s", out_dir);
    int err = lock_exclusive(f);
    if (err != 0) {
        plait_status st = err == EWOULDBLOCK ? in_use(out_dir, f)
                                             : plait_set_error(PLAIT_ERR_SYSTEM, "cannot lock %s: %s", path, strerror(err));
        close(f);
        return st;
    }
    char host[256] = "?", text[512], when[64] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &tm);
    int named = job && *job;
    int len = snprintf(text, sizeof text, "pid %ld on host %s, started %s\n%s%s%s", (long)getpid(), host, when,
                       named ? "job " : "", named ? job : "", named ? "\n" : "");
    if (ftruncate(f, 0) != 0 || pwrite(f, text, (size_t)len, 0) != len) {
        err = errno;
        close(f);
        return plait_set_error(PLAIT_ERR_SYSTEM, "cannot write %s: %s", path, strerror(err));
    }
    *fd = f;
    return PLAIT_OK;
}

/* Does the lock file `f` name `job` as its holder's? */
static int names_job(int f, const char *job) {
    char text[512];
    ssize_t n = pread(f, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = '\0';
    const char *line = strstr(text, "\njob ");
    if (!line) return 0;
    line += strlen("\njob ");
    size_t len = strcspn(line, "\n");
    return len == strlen(job) && strncmp(line, job, len) == 0;
}

plait_status plait_out_dir_enter(const char *out_dir, const char *job, double wait_s) {
    char path[4200];
    snprintf(path, sizeof path, "%s/" PLAIT_OUT_DIR_LOCK_FILE, out_dir);
    /* read-only and never created: this rank leaves no trace of its own
     * in a directory that turns out to be another run's */
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat sb;
    if (f < 0) return PLAIT_OK; /* no lock file, no holder; anything odd is rank 0's to name */
    if (fstat(f, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(f);
        return PLAIT_OK;
    }
    double give_up = plait_clock_now() + wait_s;
    plait_status st = PLAIT_OK;
    for (;;) {
        if (job && *job && names_job(f, job)) break; /* this job's rank 0 holds it, or did */
        if (flock(f, LOCK_SH | LOCK_NB) == 0) {      /* no holder: a stale file, or rank 0 yet to lock */
            (void)flock(f, LOCK_UN);
            break;
        }
        if (errno != EWOULDBLOCK) break; /* no locks here: rank 0 finds out */
        /* held, not under this job's name: another run, or this job's
         * rank 0 between taking the lock and writing its name */
        if (plait_clock_now() > give_up) {
            st = in_use(out_dir, f);
            break;
        }
        plait_clock_sleep(0.01);
    }
    close(f);
    return st;
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
