/* Moving a run's checkpoints after a step aside (checkpoint_rewind.h). */
#include "checkpoint/checkpoint_rewind.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_name.h"
#include "runtime/error.h"

/* The steps of out_dir's checkpoints, for a refusal: "2, 4 and 6". */
static void list_steps(const plait_ckpt_entry *v, int n, char *buf, size_t cap) {
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && off + 32 < cap; i++)
        off += (size_t)snprintf(buf + off, cap - off, "%s%lld%s",
                                i == 0       ? ""
                                : i == n - 1 ? " and "
                                             : ", ",
                                (long long)v[i].step, v[i].has_marker ? "" : " (incomplete)");
    if (n == 0) snprintf(buf, cap, "none");
}

plait_status plait_ckpt_rewind(const char *out_dir, int64_t step, plait_ckpt_rewound *out) {
    memset(out, 0, sizeof *out);
    int n = plait_ckpt_list(out_dir, NULL, 0);
    if (n < 0) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot list checkpoints in %s: %s", out_dir, strerror(errno));
    plait_ckpt_entry *v = calloc((size_t)(n > 0 ? n : 1), sizeof *v);
    if (!v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory listing %s", out_dir);
    n = plait_ckpt_list(out_dir, v, n);
    char dir[4200], steps[512];
    plait_ckpt_dir_path(dir, sizeof dir, out_dir, step);
    int found = 0, after = 0;
    for (int i = 0; i < n; i++) {
        found |= v[i].step == step;
        after += v[i].step > step;
    }
    plait_status st = PLAIT_OK;
    if (!found || plait_ckpt_check_quick(dir) != PLAIT_OK) {
        list_steps(v, n, steps, sizeof steps);
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "%s holds no complete checkpoint of step %lld to rewind to (its checkpoints: %s)", out_dir,
                             (long long)step, steps);
    }
    if (st != PLAIT_OK || after == 0) {
        free(v);
        return st;
    }
    int dfd = open(out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char name[96], stamp[32];
    time_t now = time(NULL);
    struct tm tmv;
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", gmtime_r(&now, &tmv));
    snprintf(name, sizeof name, "rewound-%lld-%s", (long long)step, stamp);
    snprintf(out->dir, sizeof out->dir, "%s/%s", out_dir, name);
    if (dfd < 0 || mkdirat(dfd, name, 0755) != 0)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", dfd < 0 ? out_dir : out->dir, strerror(errno));
    int to = st == PLAIT_OK ? openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (st == PLAIT_OK && to < 0) st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", out->dir, strerror(errno));
    for (int i = 0; st == PLAIT_OK && i < n; i++) {
        if (v[i].step <= step) continue;
        snprintf(name, sizeof name, "ckpt-%08lld", (long long)v[i].step);
        struct stat sb;
        if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(sb.st_mode)) {
            out->links_left++; /* a link (or gone meanwhile): not plait's to move */
            continue;
        }
        if (renameat(dfd, name, to, name) != 0)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "moving %s/%s into %s: %s", out_dir, name, out->dir,
                                 strerror(errno));
        else out->moved++;
    }
    if (to >= 0) {
        if (st == PLAIT_OK && fsync(to) != 0)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", out->dir, strerror(errno));
        close(to);
    }
    if (dfd >= 0) {
        if (st == PLAIT_OK && fsync(dfd) != 0)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", out_dir, strerror(errno));
        close(dfd);
    }
    free(v);
    return st;
}
