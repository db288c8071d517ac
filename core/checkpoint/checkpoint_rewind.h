/*
 * Rewinding a run to an earlier checkpoint (`plait rewind`): the
 * checkpoint directories after a step are moved aside, whole, into
 * <out_dir>/rewound-<step>-<UTC time>/, so that the run's next --resume
 * continues from that step's checkpoint (the newest complete one left),
 * as a run is restarted from before a loss spike (with [data]
 * skip_batches). Nothing is deleted: the moved checkpoints stay complete
 * and can be moved back.
 *
 * Only real directories named ckpt-<digits> are moved, each by one rename
 * inside out_dir (never through a link: a link by such a name is left
 * where it is and counted). The caller keeps other runs out of out_dir
 * meanwhile (its .lock: train/out_dir_lock.h). Not thread-safe on one
 * out_dir.
 */
#ifndef PLAIT_CORE_CHECKPOINT_REWIND_H
#define PLAIT_CORE_CHECKPOINT_REWIND_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

typedef struct plait_ckpt_rewound {
    char dir[4096]; /* the directory they went to ("" when nothing was moved) */
    int moved;      /* checkpoint directories moved */
    int links_left; /* links by a checkpoint's name, after the step, left in place */
} plait_ckpt_rewound;

/* Move every checkpoint directory of out_dir after `step` aside. `step`
 * must have a complete checkpoint (PLAIT_ERR_INVALID_ARG naming the
 * checkpoints there are, else). Nothing after it: PLAIT_OK, moved 0.
 * PLAIT_ERR_SYSTEM naming the path when a directory cannot be made or a
 * rename fails (those moved stay moved, said in *out). */
plait_status plait_ckpt_rewind(const char *out_dir, int64_t step, plait_ckpt_rewound *out);

#endif
