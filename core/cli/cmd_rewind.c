/* plait rewind RUN_DIR STEP */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/checkpoint_rewind.h"
#include "cli/cli.h"
#include "runtime/error.h"
#include "runtime/out_file.h"
#include "train/out_dir_lock.h"

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plait rewind: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; 'plait help rewind' says how\n");
    return 2;
}

/* metrics.csv beside the moved checkpoints: the rows of their steps,
 * which the resumed run's rows replace in the run directory. */
static plait_status copy_metrics(const char *run_dir, const char *to_dir) {
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/metrics.csv", run_dir);
    snprintf(to, sizeof to, "%s/metrics.csv", to_dir);
    int in = open(from, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0) return errno == ENOENT ? PLAIT_OK : plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", from, strerror(errno));
    int out = -1;
    plait_status st = plait_out_open(to, O_TRUNC, &out);
    char buf[1 << 16];
    ssize_t got = 0;
    while (st == PLAIT_OK && ((got = read(in, buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR)))
        if (got > 0 && write(out, buf, (size_t)got) != got)
            st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", to, strerror(errno));
    if (st == PLAIT_OK && got < 0) st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", from, strerror(errno));
    if (out >= 0 && close(out) != 0 && st == PLAIT_OK)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", to, strerror(errno));
    close(in);
    return st;
}

static int cmd_rewind(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc != 3) return bad("needs RUN_DIR and STEP");
    char *end = NULL;
    long long step = strtoll(argv[2], &end, 10);
    if (!*argv[2] || *end || step < 0)
        return bad("STEP '%s' is not a step (a checkpoint's number, 0 or more)", argv[2]);
    int lock = -1;
    /* a run training in the directory holds its lock: refused, naming it */
    plait_status st = plait_out_dir_lock(argv[1], NULL, &lock);
    plait_ckpt_rewound r;
    if (st == PLAIT_OK) st = plait_ckpt_rewind(argv[1], step, &r);
    if (st == PLAIT_OK && r.moved > 0) st = copy_metrics(argv[1], r.dir);
    plait_out_dir_unlock(lock);
    if (st != PLAIT_OK) {
        plait_cli_print_error("rewind");
        return 1;
    }
    if (r.moved == 0 && r.links_left == 0)
        printf("nothing to move: ckpt-%08lld is the newest checkpoint in %s\n", step, argv[1]);
    else if (r.moved > 0)
        printf("moved %d checkpoint%s after step %lld into %s (with a copy of metrics.csv); --resume now continues "
               "from step %lld\n",
               r.moved, r.moved == 1 ? "" : "s", step, r.dir, step);
    if (r.links_left > 0)
        printf("left %d link%s named like a checkpoint after step %lld in place: remove %s by hand, or --resume "
               "may take %s\n",
               r.links_left, r.links_left == 1 ? "" : "s", step, r.links_left == 1 ? "it" : "them",
               r.links_left == 1 ? "it" : "them");
    return 0;
}

const plait_command plait_cmd_rewind = {
    "rewind", "move a run's checkpoints after a step aside, so --resume continues from it",
    "usage: plait rewind RUN_DIR STEP\n\n"
    "Moves every checkpoint directory of RUN_DIR after STEP, whole, into RUN_DIR/rewound-STEP-<UTC time>/\n"
    "(with a copy of metrics.csv), so that `plait train CONFIG --resume` continues from STEP's checkpoint,\n"
    "as a run is restarted from before a loss spike (with [data] skip_batches to read past its data).\n"
    "Nothing is deleted: the moved checkpoints stay complete and can be moved back. STEP must have a\n"
    "complete checkpoint; a run training in RUN_DIR (its .lock held) is refused.\n",
    cmd_rewind};
