/*
 * The names of checkpoint directories ("ckpt-<digits>", at least 8 digits
 * written), inside the checkpoint module (checkpoint_name.c; the tensor
 * names are checkpoint.h's).
 *
 * Thread-safety: pure functions of their arguments.
 */
#ifndef PLAIT_CORE_CHECKPOINT_NAME_H
#define PLAIT_CORE_CHECKPOINT_NAME_H

#include <stddef.h>
#include <stdint.h>

/* 0 and *step if `name` is "ckpt-<1..18 digits>", else -1. */
int plait_ckpt_parse_dir_name(const char *name, int64_t *step);
/* "<out_dir>/ckpt-%08lld". */
void plait_ckpt_dir_path(char *buf, size_t cap, const char *out_dir, int64_t step);

#endif
