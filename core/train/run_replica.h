/*
 * Recovery from memory: an elastic job's checkpoints kept in its launchers'
 * memory (docs/multi-node.md "Recovery from memory").
 *
 * Every [run] replica_every steps each pipeline stage's part of a
 * checkpoint (its shard: the stage's full tensors and optimizer state, and
 * the run state; checkpoint/ckpt_image.h) is assembled on the stage's
 * (dp 0, tp 0) rank, the owner, exactly as a checkpoint save assembles it,
 * into a memfd that the owner hands to its own launcher's replica keeper
 * (elastic/agent.h) and sends, over the comm plugin, to the rank with the
 * same local index on the next host, which hands its copy to that host's
 * keeper. The send is posted at once and waited for at the end of the next
 * step, so it overlaps that step: a failure loses at most replica_every
 * steps (a failure in the step after a snapshot resumes from the one
 * before).
 *
 * After a restart (plait_run_replica_find, collective) the ranks list what
 * every host still holds, take the newest step whose every shard has an
 * intact copy (its CRC32C checked where it lies) if it is at least the
 * newest disk checkpoint, and bring each rank the images it needs: mapped
 * from its own host's keeper, or received from a rank on a host that holds
 * one. A shard whose copies are all gone or damaged makes that step
 * unusable; with no usable step the restart reads the disk checkpoint.
 *
 * Not thread-safe: one thread drives a run (train/run.h).
 */
#ifndef PLAIT_CORE_TRAIN_RUN_REPLICA_H
#define PLAIT_CORE_TRAIN_RUN_REPLICA_H

#include "checkpoint/checkpoint.h"
#include "checkpoint/ckpt_image.h"
#include "train/run.h"

/* 1 when this run keeps replicas: an elastic launcher started it and
 * [run] replica_every > 0. */
int plait_run_replicas_on(const plait_run *run);

/* Snapshot the current step (collective over the world): the images are
 * built and the owners' own copies handed over before it returns; the
 * copies to the peers travel meanwhile. */
plait_status plait_run_replicate(plait_run *run);

/* The step of the first snapshot a run at its current step takes with a
 * snapshot every `every` steps (none at the last step, where the run's end
 * saves a checkpoint); 0 for none. */
int64_t plait_run_first_snapshot(const plait_run *run, int64_t every);

/* Whether this host can hold its replicas, in a job's first round, on
 * each host's first rank, for the snapshot of step `first` (0: none to
 * check): the bytes this host's keeper will hold (the two newest snapshots
 * of every stage whose owner is on this host, and of every stage whose
 * owner is on the host before it) against what the host can still give
 * (runtime/host_memory.h). Called before step 1, when the ranks' weights
 * and optimizer state are taken but their activations not yet touched,
 * and again just before the first snapshot, when they are. The images are
 * memfd pages, taken as a snapshot is written, so a host short of them
 * ends processes (the OOM killer) rather than failing an allocation: a
 * shortfall is refused (PLAIT_ERR_NO_MEMORY, marked final so that no round
 * retries it), naming both sizes and the snapshot; with [run] memory_check
 * = false it is a warning. Not checked at a restart, where the keepers
 * already hold images the host's figures count. */
plait_status plait_run_check_replica_room(plait_run *run, int64_t first);
/* Finish the last snapshot's transfers and hand the received copies over
 * (collective in effect: the matching sends and receives). A no-op when
 * nothing is in flight. */
plait_status plait_run_replica_settle(plait_run *run);
/* Drop what is in flight without waiting (the run failed). */
void plait_run_replica_close(plait_run *run);

/* The images a restarted run reads instead of a checkpoint directory. */
typedef struct plait_replica_set plait_replica_set;

/* Collective over the world: *out the images of the newest usable step
 * newer than or equal to `disk_step` (-1: no checkpoint on disk), or NULL
 * when the replicas do not serve (rank 0 logs why). */
plait_status plait_run_replica_find(plait_run *run, int64_t disk_step, plait_replica_set **out);
/* A checkpoint source over the images (set->what names them) and their
 * run state as a checkpoint's. */
void plait_replica_set_source(plait_replica_set *set, const plait_run *run, plait_ckpt_source *src);
void plait_replica_set_state(const plait_replica_set *set, plait_ckpt_state *state);
const char *plait_replica_set_what(const plait_replica_set *set);
void plait_replica_set_free(plait_replica_set *set);

#endif
