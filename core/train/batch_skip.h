/*
 * [data] skip_batches: training batches a run never reads, as large runs
 * skip the data around a loss spike (PaLM restarted from a checkpoint
 * before the spike and skipped a few hundred batches; Megatron-LM's
 * --iterations-to-skip). The key lists steps as metrics.csv numbers them,
 * "A-B" or "N", separated by commas or spaces: the batches those steps
 * would read without the key. From step A on every step reads a later
 * batch: step s reads batch s + the skipped batches at or before the one
 * it lands on. The mapping depends on the list alone, so it is the same on
 * every rank and layout, and a run resumed from a checkpoint before a spike
 * with a range added reads past it.
 *
 * Pure; thread-safe.
 */
#ifndef PLAIT_CORE_TRAIN_BATCH_SKIP_H
#define PLAIT_CORE_TRAIN_BATCH_SKIP_H

#include <stdint.h>
#include <plait/types.h>

#include "config/config.h"

/* The most ranges the key may list. */
#define PLAIT_SKIP_MAX 256

/* The ranges, sorted, overlapping and adjacent ones merged; steps from 1. */
typedef struct plait_batch_skip {
    int n;
    int64_t lo[PLAIT_SKIP_MAX], hi[PLAIT_SKIP_MAX];
} plait_batch_skip;

/* [data] skip_batches into *out (n = 0 when empty). PLAIT_ERR_INVALID_CONFIG
 * naming where the key was set, the item and what works: an item that is
 * not N or A-B with 1 <= A <= B, or more than PLAIT_SKIP_MAX of them. */
plait_status plait_batch_skip_parse(const plait_config *cfg, plait_batch_skip *out);

/* The batch step `step` (0-based: the steps done before it) reads, 0-based
 * as well: `step` itself without ranges. */
int64_t plait_batch_skip_map(const plait_batch_skip *k, int64_t step);

/* The batches skipped in all. */
int64_t plait_batch_skip_count(const plait_batch_skip *k);

#endif
