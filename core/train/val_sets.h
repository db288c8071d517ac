/*
 * [data] val_sets: named validation sets beside the run's own validation
 * split, each scored at every evaluation and reported as its own column
 * (val_loss_<name>), as OLMo's in-loop evaluators score several held-out
 * corpora and Megatron-LM its --multiple-validation-sets. The key lists
 * NAME=PATTERN items separated by commas or spaces; PATTERN is a file or a
 * glob of files ([data] val_path's rules: relative to the working
 * directory, then the config's directory, then the source tree).
 *
 * Pure; thread-safe. The parsed names and patterns point into `out`.
 */
#ifndef PLAIT_CORE_TRAIN_VAL_SETS_H
#define PLAIT_CORE_TRAIN_VAL_SETS_H

#include <plait/types.h>

#include "config/config.h"

/* The most sets the key may name, and the longest name. */
#define PLAIT_VAL_SETS_MAX 16
#define PLAIT_VAL_SET_NAME_MAX 32

typedef struct plait_val_sets {
    int n;
    char name[PLAIT_VAL_SETS_MAX][PLAIT_VAL_SET_NAME_MAX + 1];
    char pattern[PLAIT_VAL_SETS_MAX][1024];
} plait_val_sets;

/* [data] val_sets into *out (n = 0 when empty). PLAIT_ERR_INVALID_CONFIG
 * naming where the key was set, the item and what works: an item that is
 * not NAME=PATTERN, a name not of 1 to PLAIT_VAL_SET_NAME_MAX letters,
 * digits, '_' or '-', a name given twice, a pattern too long, or more than
 * PLAIT_VAL_SETS_MAX sets. */
plait_status plait_val_sets_parse(const plait_config *cfg, plait_val_sets *out);

#endif
