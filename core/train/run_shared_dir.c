/*
 * The check that every rank shares the run directory (run_shared_dir.h).
 * Markers both ways, so that each rank's view is tested with O(world)
 * lookups in all: a rank that sees rank 0's file writes where rank 0
 * reads, and rank 0 seeing each rank's file covers a rank whose out_dir is
 * another directory that happens to hold an old marker's name. On NFS a
 * marker closed before the barrier is at the server (close-to-open), and
 * each name is looked up for the first time (no cached negative entry).
 */
#include "train/run_shared_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "comm/comm.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/run_internal.h"

/* What a rank's slot of the outcome says (OR'd). */
enum {
    NOT_SEEING_0 = 1,  /* this rank does not see rank 0's marker */
    NOT_SEEN_BY_0 = 2, /* rank 0 does not see this rank's marker */
    NO_MARKER = 4,     /* this rank could not write its marker */
};

/* The shared token and rank 0's out_dir, broadcast as bytes. */
typedef struct probe {
    uint64_t token;
    char dir[4096];
} probe;

static void marker_path(char *buf, size_t cap, const char *out_dir, uint64_t token, int rank) {
    snprintf(buf, cap, "%s/.plait-shared-%016llx-%d", out_dir, (unsigned long long)token, rank);
}

static int sees(const char *out_dir, uint64_t token, int rank) {
    char path[4200];
    marker_path(path, sizeof path, out_dir, token, rank);
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* "1, 3, 5 and 2 more": the world ranks whose slot has any of `bits`. */
static int rank_list(const int32_t *slot, int world, int bits, char *buf, size_t cap) {
    int n = 0;
    size_t len = 0;
    buf[0] = '\0';
    for (int r = 0; r < world; r++) {
        if (!(slot[r] & bits)) continue;
        if (n < 8 && len < cap) len += (size_t)snprintf(buf + len, cap - len, "%s%d", n ? ", " : "", r);
        n++;
    }
    if (n > 8 && len < cap) snprintf(buf + len, cap - len, " and %d more", n - 8);
    return n;
}

plait_status plait_run_check_shared_dir(plait_run *run, const char *out_dir) {
    int me = run->world.mesh.world_rank, world = run->world.mesh.world_size;
    if (world <= 1) return PLAIT_OK;
    probe *pr = calloc(1, sizeof *pr);
    int32_t *slot = calloc((size_t)world, sizeof *slot);
    if (!pr || !slot) {
        free(pr);
        free(slot);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory checking the run directory is shared");
    }
    if (me == 0) {
        if (getrandom(&pr->token, sizeof pr->token, 0) != (ssize_t)sizeof pr->token)
            pr->token = (uint64_t)getpid() << 32 ^ (uint64_t)time(NULL);
        snprintf(pr->dir, sizeof pr->dir, "%s", out_dir);
    }
    plait_comm *comm = run->world.comm;
    plait_status st = plait_comm_broadcast(comm, pr, sizeof *pr, PLAIT_U8, 0, NULL, NULL);
    char mine[4200];
    marker_path(mine, sizeof mine, out_dir, pr->token, me);
    int made = 0;
    if (st == PLAIT_OK) {
        int f = open(mine, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (f >= 0) made = close(f) == 0;
        if (!made)
            plait_log(PLAIT_LOG_ERROR, "checkpoint", "world rank %d cannot write a marker file %s: %s", me, mine,
                      strerror(errno));
        /* every marker written before any is looked for */
        st = plait_comm_barrier(comm, NULL, NULL);
    }
    if (st == PLAIT_OK) {
        if (!made) slot[me] |= NO_MARKER;
        if (me != 0 && !sees(out_dir, pr->token, 0)) slot[me] |= NOT_SEEING_0;
        for (int r = 1; me == 0 && r < world; r++)
            if (!sees(out_dir, pr->token, r)) slot[r] |= NOT_SEEN_BY_0;
        /* also the barrier before any marker goes */
        st = plait_comm_allreduce(comm, slot, slot, (size_t)world, PLAIT_I32, PLAIT_MAX, NULL, NULL);
    }
    if (made) unlink(mine);
    char apart[512], failed[512];
    int n_apart = st == PLAIT_OK ? rank_list(slot, world, NOT_SEEING_0 | NOT_SEEN_BY_0, apart, sizeof apart) : 0;
    int n_failed = st == PLAIT_OK ? rank_list(slot, world, NO_MARKER, failed, sizeof failed) : 0;
    char own[4200] = ""; /* a rank apart names its own directory too */
    if (n_apart && me != 0 && slot[me]) snprintf(own, sizeof own, " (world rank %d's is %s)", me, out_dir);
    if (n_failed)
        st = plait_set_error(PLAIT_ERR_SYSTEM,
                             "[run] ckpt_format = sharded: world rank%s %s could not write a marker file in the run "
                             "directory (each rank's log says why), so whether every rank shares it is unknown",
                             n_failed == 1 ? "" : "s", failed);
    else if (n_apart)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "[run] ckpt_format = sharded needs the run directory on a file system every rank shares "
                             "(NFS, Lustre, GPFS...): world rank%s %s of %d do%s not share world rank 0's %s%s (each "
                             "rank wrote a marker file there and world rank 0 and %s did not see each other's); "
                             "give [run] out_dir on a shared file system, or use ckpt_format = gathered (world rank 0 "
                             "writes everything). Nothing was trained",
                             n_apart == 1 ? "" : "s", apart, world, n_apart == 1 ? "es" : "", pr->dir, own,
                             n_apart == 1 ? "it" : "they");
    free(pr);
    free(slot);
    return st;
}
