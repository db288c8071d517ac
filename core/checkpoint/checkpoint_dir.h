/*
 * Internal helpers shared by the checkpoint writer and reader: directory
 * names ("ckpt-<digits>", at least 8 digits written) and scanning.
 *
 * Thread-safety: no shared state; the directories themselves are written
 * by one rank's run thread (rank 0), so no two writers race in-process.
 */
#ifndef PLAIT_CORE_CHECKPOINT_DIR_H
#define PLAIT_CORE_CHECKPOINT_DIR_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"

/* 0 and *step if `name` is "ckpt-<1..18 digits>", else -1. */
int plait_ckpt_parse_dir_name(const char *name, int64_t *step);
/* "<out_dir>/ckpt-%08lld". */
void plait_ckpt_dir_path(char *buf, size_t cap, const char *out_dir, int64_t step);
/* Checkpoint directories ascending by step (malloc'd into *out, caller
 * frees); count, 0 when out_dir does not exist, -1 with errno on failure. */
int plait_ckpt_scan(const char *out_dir, plait_ckpt_entry **out);

#endif
