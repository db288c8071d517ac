/* Checkpoint directories: listing, discovery of the latest complete one,
 * pruning. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_fs.h"

static int scan(const char *out_dir, plait_ckpt_entry **out, int warn_links);

const char *plait_ckpt_dir_role(const char *dir) {
    static const char *const ckpt_files[] = {PLAIT_CKPT_MARKER_FILE, PLAIT_CKPT_STATE_FILE, PLAIT_CKPT_OPTIM_FILE};
    static const char *const run_files[] = {".lock", "metrics.csv"};
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof ckpt_files / sizeof ckpt_files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[i]);
        if (access(path, F_OK) == 0) return "checkpoint directory";
    }
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, run_files[i]);
        if (access(path, F_OK) == 0) return "run directory";
    }
    plait_ckpt_entry *v = NULL;
    int n = scan(dir, &v, 0);
    free(v);
    return n > 0 ? "run directory" : NULL;
}

static int cmp_entry(const void *a, const void *b) {
    const plait_ckpt_entry *x = a, *y = b;
    return (x->step > y->step) - (x->step < y->step);
}

/* All checkpoint directories, ascending by step. Caller frees *out.
 * Returns the count, or -1 if out_dir cannot be read (ENOENT gives 0). A
 * ckpt-* that is a symbolic link is not one of the run's checkpoints (what
 * it points to is outside the run directory): skipped, with a warning when
 * `warn_links`. */
static int scan(const char *out_dir, plait_ckpt_entry **out, int warn_links) {
    *out = NULL;
    DIR *dir = opendir(out_dir);
    if (!dir) return errno == ENOENT ? 0 : -1;
    plait_ckpt_entry *v = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(dir))) {
        int64_t step;
        if (plait_ckpt_parse_dir_name(e->d_name, &step) != 0) continue;
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", out_dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISLNK(st.st_mode) && warn_links)
            plait_log(PLAIT_LOG_WARN, "checkpoint",
                      "%s is a symbolic link, not a checkpoint of this run: ignored (plait neither resumes from, "
                      "writes to nor deletes anything through a link in a run directory)",
                      path);
        if (!S_ISDIR(st.st_mode)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            plait_ckpt_entry *nv = realloc(v, (size_t)cap * sizeof *v);
            if (!nv) {
                free(v);
                closedir(dir);
                return -1;
            }
            v = nv;
        }
        char marker[PATH_MAX];
        snprintf(marker, sizeof marker, "%s/" PLAIT_CKPT_MARKER_FILE, path);
        v[n].step = step;
        v[n].has_marker = access(marker, F_OK) == 0;
        n++;
    }
    closedir(dir);
    if (n > 0) qsort(v, (size_t)n, sizeof *v, cmp_entry); /* v is NULL when the directory has none */
    *out = v;
    return n;
}

int plait_ckpt_scan(const char *out_dir, plait_ckpt_entry **out) { return scan(out_dir, out, 0); }

int plait_ckpt_list(const char *out_dir, plait_ckpt_entry *out, int cap) {
    plait_ckpt_entry *v;
    int n = plait_ckpt_scan(out_dir, &v);
    for (int i = 0; i < n && i < cap; i++) out[i] = v[i];
    free(v);
    return n;
}

plait_status plait_ckpt_open_latest(const char *out_dir, plait_ckpt **out) {
    *out = NULL;
    plait_ckpt_entry *v;
    int n = scan(out_dir, &v, 1);
    if (n < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot list checkpoints in %s: %s", out_dir, strerror(errno));
    for (int i = n - 1; i >= 0; i--) {
        char dir[PATH_MAX];
        plait_ckpt_dir_path(dir, sizeof dir, out_dir, v[i].step);
        plait_ckpt *ck;
        if (plait_ckpt_open(dir, &ck) == PLAIT_OK) {
            *out = ck;
            break;
        }
        plait_log(PLAIT_LOG_WARN, "checkpoint", "%s; trying older checkpoints", plait_last_error());
    }
    free(v);
    return PLAIT_OK;
}

plait_status plait_ckpt_open_named(const char *path, plait_ckpt **out) {
    *out = NULL;
    plait_status st = plait_ckpt_open(path, out);
    if (st == PLAIT_OK) return st;
    char why[2048];
    snprintf(why, sizeof why, "%s", plait_last_error());
    struct stat sb;
    const char *role = plait_ckpt_dir_role(path);
    if ((role && strcmp(role, "checkpoint directory") == 0) || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return plait_set_error(st, "%s", why);
    plait_status latest = plait_ckpt_open_latest(path, out);
    if (latest != PLAIT_OK || *out) return latest;
    if (role)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "run directory %s holds no usable checkpoint (a complete, undamaged ckpt-<step>; "
                               "a warning above names each one's fault, if it has any)",
                               path);
    return plait_set_error(st, "%s", why);
}

/* Delete one checkpoint directory without following any link: it is opened
 * with O_NOFOLLOW and its entries are examined and removed relative to that
 * descriptor, so a directory swapped for a link is never entered. Every
 * entry must be a plain file (else nothing is deleted); the marker goes
 * first (durably), then the files, then the directory. */
static plait_status remove_checkpoint(const char *dir) {
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return plait_set_error(errno == ELOOP || errno == ENOTDIR ? PLAIT_ERR_INVALID_ARG : PLAIT_ERR_SYSTEM,
                               "not deleting %s: %s", dir,
                               errno == ELOOP || errno == ENOTDIR ? "it is not a directory of this run (a link?)"
                                                                  : strerror(errno));
    DIR *d = fdopendir(dup(dfd));
    plait_status st = d ? PLAIT_OK : plait_set_error(PLAIT_ERR_SYSTEM, "listing %s: %s", dir, strerror(errno));
    struct dirent *e;
    while (st == PLAIT_OK && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        struct stat sb;
        if (fstatat(dfd, e->d_name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(sb.st_mode))
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "not deleting %s: it holds %s/%s, which is not a plain file plait wrote", dir, dir,
                                 e->d_name);
    }
    if (st == PLAIT_OK && unlinkat(dfd, PLAIT_CKPT_MARKER_FILE, 0) != 0 && errno != ENOENT)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "removing %s/%s: %s", dir, PLAIT_CKPT_MARKER_FILE, strerror(errno));
    if (st == PLAIT_OK && fsync(dfd) != 0 && errno != EINVAL)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "syncing directory %s: %s", dir, strerror(errno));
    if (d && st == PLAIT_OK) {
        rewinddir(d);
        while (st == PLAIT_OK && (e = readdir(d))) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
            if (unlinkat(dfd, e->d_name, 0) != 0)
                st = plait_set_error(PLAIT_ERR_SYSTEM, "removing %s/%s: %s", dir, e->d_name, strerror(errno));
        }
    }
    if (d) closedir(d);
    close(dfd);
    if (st == PLAIT_OK && rmdir(dir) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "removing %s: %s", dir, strerror(errno));
    return st;
}

plait_status plait_ckpt_prune(const char *out_dir, int keep, int64_t keep_every, int64_t newest, int64_t protect) {
    if (keep <= 0) return PLAIT_OK;
    plait_ckpt_entry *v;
    int n = plait_ckpt_scan(out_dir, &v);
    if (n < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot list checkpoints in %s: %s", out_dir, strerror(errno));
    int complete_seen = 0;
    int64_t newest_complete = -1;
    plait_status result = PLAIT_OK;
    for (int i = n - 1; i >= 0; i--) {
        /* Newer than the step just saved: a timeline the run left behind
         * (a damaged checkpoint it resumed past): neither counted nor deleted. */
        if (newest >= 0 && v[i].step > newest) continue;
        char dir[PATH_MAX];
        plait_ckpt_dir_path(dir, sizeof dir, out_dir, v[i].step);
        int drop;
        /* A damaged checkpoint (marker present, files truncated or altered)
         * is no checkpoint to keep: it goes the way of crash leftovers. */
        if (v[i].has_marker && plait_ckpt_check_quick(dir) == PLAIT_OK) {
            if (newest_complete < 0) newest_complete = v[i].step;
            /* one of the newest `keep`, or a multiple of keep_every (which
             * counts among the newest as any other) */
            drop = ++complete_seen > keep && !(keep_every > 0 && v[i].step % keep_every == 0);
        } else {
            drop = newest_complete >= 0; /* an older crash leftover, or damaged */
        }
        if (!drop || v[i].step == protect) continue;
        plait_status st = remove_checkpoint(dir);
        if (st != PLAIT_OK) {
            plait_log(PLAIT_LOG_WARN, "checkpoint", "pruning: %s", plait_last_error());
            if (result == PLAIT_OK) result = st;
        } else {
            plait_log(PLAIT_LOG_DEBUG, "checkpoint", "pruned %s", dir);
        }
    }
    free(v);
    if (result == PLAIT_OK) {
        plait_clear_error(); /* the damaged ones' reasons: pruning went well */
        result = plait_fs_fsync_dir(out_dir);
    }
    return result;
}
