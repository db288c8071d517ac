/*
 * Internal helpers shared by the checkpoint writer and reader: scanning
 * checkpoint directories (their names are checkpoint_name.h's).
 *
 * Thread-safety: no shared state; the directories themselves are written
 * by one rank's run thread (rank 0), so no two writers race in-process.
 */
#ifndef PLAIT_CORE_CHECKPOINT_DIR_H
#define PLAIT_CORE_CHECKPOINT_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_name.h"

/* Checkpoint directories ascending by step (malloc'd into *out, caller
 * frees); count, 0 when out_dir does not exist, -1 with errno on failure. */
int plait_ckpt_scan(const char *out_dir, plait_ckpt_entry **out);

#endif
