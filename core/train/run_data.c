/* The run's training and validation data (core/train/data.h). */
#include <stdio.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "train/batch_skip.h"
#include "train/data.h"
#include "train/run.h"
#include "train/run_internal.h"

plait_status plait_run_data_open(plait_run *run) {
    plait_status st = plait_data_open_config(run->cfg, run->work.batch.global_batch, &run->data);
    /* a blend's shares and sizes, once for the job: a dataset much smaller
     * than its share repeats often, which the user should see */
    for (int k = 0; st == PLAIT_OK && run->world.mesh.world_rank == 0 && k < plait_data_sets(run->data); k++)
        PLAIT_INFO("data", "blend: dataset %d of %d: %.1f%% of the sequences, %lld training tokens", k + 1,
                   plait_data_sets(run->data), 100.0 * plait_data_set_share(run->data, k),
                   (long long)plait_data_set_tokens(run->data, k));
    plait_batch_skip skip;
    if (st == PLAIT_OK && run->world.mesh.world_rank == 0 && plait_batch_skip_parse(run->cfg, &skip) == PLAIT_OK &&
        skip.n > 0)
        PLAIT_INFO("data",
                   "[data] skip_batches = %s: %lld batches never read; from step %lld on each step reads a "
                   "later batch (step %lld reads step %lld's)",
                   plait_config_str(run->cfg, "data", "skip_batches"), (long long)plait_batch_skip_count(&skip),
                   (long long)skip.lo[0], (long long)skip.lo[0],
                   (long long)plait_batch_skip_map(&skip, skip.lo[0] - 1) + 1);
    plait_val_sets sets;
    if (st == PLAIT_OK) st = plait_val_sets_parse(run->cfg, &sets);
    for (int k = 0; st == PLAIT_OK && k < sets.n; k++) {
        st = plait_data_open_val_set(run->cfg, sets.name[k], sets.pattern[k], &run->val_data[k]);
        if (st != PLAIT_OK) break;
        snprintf(run->val_names[k], sizeof run->val_names[k], "%s", sets.name[k]);
        run->n_val_sets = k + 1;
        if (run->world.mesh.world_rank == 0)
            PLAIT_INFO("data", "validation set %s: %s, %lld tokens", sets.name[k], plait_data_path(run->val_data[k]),
                       (long long)plait_data_split_tokens(run->val_data[k], PLAIT_DATA_VAL));
    }
    /* epochs: how long one is, which a run of few of them should see */
    const int64_t windows = st == PLAIT_OK ? plait_data_epoch_windows(run->data) : 0;
    if (windows > 0 && run->world.mesh.world_rank == 0)
        PLAIT_INFO("data", "epochs of %lld sequences of %d tokens: %.3g steps an epoch, %.3g epochs in %lld steps",
                   (long long)windows, run->model.block_size, (double)windows / run->work.batch.global_batch,
                   (double)run->steps * run->work.batch.global_batch / windows, (long long)run->steps);
    return st;
}

void plait_run_data_close(plait_run *run) {
    if (run->data) plait_data_close(run->data);
    run->data = NULL;
    for (int k = 0; k < run->n_val_sets; k++) plait_data_close(run->val_data[k]);
    run->n_val_sets = 0;
    run->eval_data = NULL;
}

/* The data a read of `split` takes: an evaluation's set, or the run's own. */
const plait_data *plait_run_data_of(const plait_run *run, plait_data_split split) {
    return split == PLAIT_DATA_VAL && run->eval_data ? run->eval_data : run->data;
}

void plait_run_data_record(const plait_run *run, plait_ckpt_data *out) {
    *out = (plait_ckpt_data){.path = plait_data_path(run->data),
                             .tokens = plait_data_tokens(run->data),
                             .train_tokens = plait_data_split_tokens(run->data, PLAIT_DATA_TRAIN),
                             .train_crc32c = plait_data_train_crc32c(run->data)};
}

plait_status plait_run_fetch_batch(plait_run *run, plait_data_split split, int64_t step, int64_t global_mb,
                                   int32_t *tokens, int32_t *targets) {
    return plait_data_batch(plait_run_data_of(run, split), split, step, global_mb, (int32_t)run->work.batch.micro_batch,
                            run->model.block_size, tokens, targets);
}
