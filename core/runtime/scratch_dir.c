#include "runtime/scratch_dir.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

plait_status plait_scratch_dir_make(const char *prefix, char *buf, size_t cap) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if ((size_t)snprintf(buf, cap, "%s/%s-XXXXXX", tmp, prefix) >= cap)
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s/%s-XXXXXX: path too long for a scratch directory", tmp, prefix);
    if (!mkdtemp(buf)) return plait_set_error(PLAIT_ERR_SYSTEM, "cannot create a scratch directory %s: %s", buf,
                                              strerror(errno));
    return PLAIT_OK;
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

plait_status plait_scratch_dir_remove(const char *path) {
    /* FTW_PHYS: a link is an entry of its own, removed without being followed */
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        return plait_set_error(PLAIT_ERR_SYSTEM, "could not remove %s: %s", path, strerror(errno));
    return PLAIT_OK;
}
