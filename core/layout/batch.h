/*
 * Batch arithmetic: global_batch = dp × micro_batch × accumulation_steps.
 * Give any two of the three keys in [data] and plait derives the third for the
 * layout at hand (so changing dp keeps a given global batch); give one and the
 * defaults fill in (micro_batch 8, accumulation_steps 1); give none and the
 * run uses micro_batch 8, accumulation_steps 1. A contradiction, or a global
 * batch that the layout cannot split evenly, is one error naming all three.
 *
 * Thread-safety: pure arithmetic over caller-owned structs.
 */
#ifndef PLAIT_CORE_BATCH_H
#define PLAIT_CORE_BATCH_H

#include <stdint.h>

#include "config/config.h"

typedef struct plait_batch {
    int64_t global_batch;      /* sequences per optimizer step, all ranks */
    int64_t micro_batch;       /* sequences per forward/backward */
    int64_t accumulation;      /* micro-batches per data-parallel rank per step */
    int64_t dp;
} plait_batch;

/* Micro-batches of a step over all data-parallel ranks (dp × accumulation):
 * the length of the step's loss vector. */
static inline int64_t plait_batch_micro_batches(const plait_batch *b) { return b->global_batch / b->micro_batch; }

/* Pure arithmetic (0 = not given). Fills *out or fails with
 * PLAIT_ERR_INVALID_CONFIG and a message. */
plait_status plait_batch_solve(int64_t global_batch, int64_t micro_batch, int64_t accumulation,
                               int64_t dp, plait_batch *out);

/* Read [data] and [parallel] dp from `cfg`, solve, and record the derived
 * values in the config (origin "derived") so `config show` prints them. */
plait_status plait_batch_from_config(plait_config *cfg, plait_batch *out);

#endif
