#include "train/run_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/llama_hf.h"
#include "comm/comm.h"
#include "device/device.h"
#include "model/model.h"
#include "model/tied.h"
#include "runtime/memory.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "train/run_ckpt.h"
#include "train/run_internal.h"
#include "train/run_kept.h"

/* Tensor `index` as this rank holds it: its parameter's slice, or a
 * buffer of its stage whole (the model's, PLAIT_PARAM_BUFFER); NULL for
 * one it does not hold. */
static const plait_param *held_param(const plait_run *run, int32_t index) {
    int32_t l = run->params.local_of_global[index];
    if (l >= 0) return &run->params.set.params[l];
    const plait_param *g = &run->model.spec->params[index];
    const int here = run->work.plan.layer_stage[g->layer] == run->work.stage;
    return here && (g->flags & PLAIT_PARAM_BUFFER) ? g : NULL;
}

/* Fresh run: parameters from the layout-independent initialiser (a tied copy
 * by its original's name, so both ends of a pipeline start equal); no
 * optimizer state (the optimizer zero-fills). */
static plait_status init_read(void *ctx, int32_t index, const char *which, size_t offset, size_t count, float *dst) {
    plait_run *run = ctx;
    if (strcmp(which, "param") != 0)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "a fresh run has no optimizer state '%s'", which);
    const plait_param *p = held_param(run, index);
    if (!p) return plait_set_error(PLAIT_ERR_INVALID_ARG, "parameter %d is not on this rank", index);
    plait_param as = plait_tied_init_as(run->model.spec, p);
    return plait_model_init_values(&run->model.init, &as, offset, count, dst);
}

static plait_status refuse_other_model(const plait_config *cfg, const plait_ckpt *ck, const char *key,
                                       const char *was, const char *now) {
    const char *where = "";
    plait_config_origin(cfg, "model", key, &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "cannot resume from %s: it holds a model with [model] %s = %s, but this run has %s = "
                           "%s (%s); a resume continues the same model: give model.%s=%s to continue it, or "
                           "start the new model fresh in another [run] out_dir",
                           plait_ckpt_dir(ck), key, was, key, now, where, key, was);
}

/* Another block_size resumes where the weights allow: rotary positions
 * (the llama arch) have none, and learned ones (the gpt arch) cover the
 * sequence they were trained at, whose first rows serve a shorter one.
 * *ok = 1 when it may resume; an error names both lengths. */
static plait_status check_block_size(const plait_run *run, const plait_ckpt *ck, const char *was, const char *now,
                                     int *ok) {
    const long long before = atoll(was), after = atoll(now);
    *ok = strcmp(run->model.spec->arch, "llama") == 0 || (strcmp(run->model.spec->arch, "gpt") == 0 && after < before);
    if (*ok) {
        if (run->world.mesh.world_rank == 0)
            PLAIT_INFO("train", "resuming %s, trained at block_size %lld, at block_size %lld (%s)", plait_ckpt_dir(ck),
                       before, after,
                       strcmp(run->model.spec->arch, "llama") == 0 ? "rotary positions have no weights"
                                                                   : "the first rows of its learned positions");
        return PLAIT_OK;
    }
    if (strcmp(run->model.spec->arch, "gpt") != 0) return PLAIT_OK; /* mlp: refuse_other_model speaks */
    const char *where = "";
    plait_config_origin(run->cfg, "model", "block_size", &where);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "cannot resume from %s: its learned positions (transformer.wpe.weight) cover a sequence of "
                           "%lld tokens ([model] block_size = %lld when it was trained), shorter than this run's "
                           "block_size = %lld (%s); resume at block_size <= %lld, or use rotary positions "
                           "(model.arch=llama), which resume at any length",
                           plait_ckpt_dir(ck), before, before, after, where, before);
}

/* A resume continues the same model: fewer layers or another n_head would
 * load a subset of the tensors (or all of them, reshaped in meaning) without
 * complaint, and pruning would later delete the original checkpoints. Every
 * key that defines the model must match the checkpoint's (checkpoints that
 * predate the metadata are checked by tensor shapes alone); a llama's own
 * keys too, as the model resolved them (a gpt checkpoint records none). */
static plait_status check_model_keys(const plait_run *run, const plait_ckpt *ck) {
    const plait_config *cfg = run->cfg;
    for (size_t i = 0; plait_ckpt_model_keys[i]; i++) {
        const char *key = plait_ckpt_model_keys[i];
        char meta[64];
        snprintf(meta, sizeof meta, "plait.model.%s", key);
        const char *was = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, meta);
        plait_value v;
        if (!was || plait_config_get(cfg, "model", key, &v) != PLAIT_OK) continue;
        char now[64];
        if (v.type == PLAIT_KEY_INT) snprintf(now, sizeof now, "%lld", (long long)v.i);
        else snprintf(now, sizeof now, "%s", v.s ? v.s : "");
        int ok = 0;
        if (strcmp(was, now) != 0 && strcmp(key, "block_size") == 0) {
            plait_status st = check_block_size(run, ck, was, now, &ok);
            if (st != PLAIT_OK) return st;
        }
        if (strcmp(was, now) != 0 && !ok) return refuse_other_model(cfg, ck, key, was, now);
    }
    /* a mixture of experts' shape and router, as init_from checks them (a
     * checkpoint with the model's metadata but no moe_experts is dense) */
    const int has_meta = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, "plait.model.arch") != NULL;
    for (size_t i = 0; has_meta && plait_ckpt_moe_shape_keys[i]; i++) {
        const char *key = plait_ckpt_moe_shape_keys[i];
        char meta[64], now[64];
        snprintf(meta, sizeof meta, "plait.model.%s", key);
        const char *was = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, meta);
        if (!was && i == 0) was = "0";
        plait_value v;
        if (!was || plait_config_get(cfg, "model", key, &v) != PLAIT_OK) continue;
        if (v.type == PLAIT_KEY_INT) snprintf(now, sizeof now, "%lld", (long long)v.i);
        else snprintf(now, sizeof now, "%s", v.s ? v.s : "");
        if (i == 0 && strcmp(was, "0") == 0 && strcmp(now, "0") == 0) break; /* dense, both */
        if (strcmp(was, now) != 0) return refuse_other_model(cfg, ck, key, was, now);
    }
    plait_llama_shape llama;
    if (strcmp(run->model.spec->arch, "llama") != 0) return PLAIT_OK;
    plait_status st = plait_llama_shape_of(run->model.spec, cfg, &llama);
    for (size_t i = 0; st == PLAIT_OK && plait_llama_ckpt_keys[i]; i++) {
        char meta[64], now[64];
        snprintf(meta, sizeof meta, "plait.model.%s", plait_llama_ckpt_keys[i]);
        const char *was = plait_ckpt_file_meta(ck, PLAIT_CKPT_MODEL, meta);
        plait_llama_key_text(&llama, i, now, sizeof now);
        if (was && strcmp(was, now) != 0) st = refuse_other_model(cfg, ck, plait_llama_ckpt_keys[i], was, now);
    }
    return st;
}

static plait_status weights_block(void *ctx, const plait_param *block, float *all) {
    return plait_weights_read(ctx, block, 0, block->numel, all);
}

/* A fresh run from [run] init_from: the parameters only. */
static plait_status weights_read(void *ctx, int32_t index, const char *which, size_t offset, size_t count,
                                 float *dst) {
    plait_run_source *src = ctx;
    plait_run *run = src->run;
    if (strcmp(which, "param") != 0)
        return plait_set_error(PLAIT_ERR_UNSUPPORTED, "pretrained weights have no optimizer state '%s'", which);
    const plait_param *p = held_param(run, index);
    if (!p) return plait_set_error(PLAIT_ERR_INVALID_ARG, "parameter %d is not on this rank", index);
    /* an expert slice cut twice (tp × ep): its block of whole experts, then its width's part */
    if (plait_param_split_twice(p))
        return plait_shard_read_twice(p, &run->work.plan.second_shards[index], weights_block, src->weights, offset,
                                      count, dst);
    return plait_weights_read(src->weights, p, offset, count, dst);
}

static plait_status open_weights(plait_run *run, const char *path, plait_run_source *src) {
    plait_status st = plait_weights_open(path, run->model.spec, run->cfg, &src->weights);
    if (st != PLAIT_OK) return st;
    if (run->world.mesh.world_rank == 0) {
        const char *note = plait_weights_note(src->weights);
        PLAIT_INFO("train", "initial weights from %s (%s)%s%s", plait_weights_path(src->weights),
                   plait_weights_format(src->weights), *note ? ": " : "", note);
    }
    src->source = (plait_value_source){.struct_size = sizeof(plait_value_source), .ctx = src, .read = weights_read};
    return PLAIT_OK;
}

/* The checkpoint directory `resume_dir`, or fresh values when NULL. */
static plait_status open_dir(plait_run *run, const char *resume_dir, plait_run_source *src) {
    const char *init_from = plait_config_str(run->cfg, "run", "init_from");
    if (!resume_dir && init_from && *init_from) return open_weights(run, init_from, src);
    if (!resume_dir) {
        src->source = (plait_value_source){.struct_size = sizeof(plait_value_source), .ctx = run, .read = init_read};
        return PLAIT_OK;
    }
    if (init_from && *init_from && run->world.mesh.world_rank == 0)
        PLAIT_INFO("train", "resuming from %s: [run] init_from = %s applies to fresh runs only", resume_dir,
                   init_from);
    snprintf(run->resumed_from, sizeof run->resumed_from, "%s", resume_dir);
    plait_status st = plait_ckpt_open(resume_dir, &src->ck);
    if (st == PLAIT_OK) st = check_model_keys(run, src->ck);
    if (st == PLAIT_OK) st = plait_ckpt_check_finite(src->ck);
    if (st != PLAIT_OK) {
        plait_run_source_close(src);
        return st;
    }
    plait_ckpt_source_init(&src->cks, src->ck, run->model.spec, &run->params.set);
    src->cks.second = run->work.plan.second_shards;
    src->source = src->cks.src;
    return PLAIT_OK;
}

/* An elastic restart: the replicas in memory when they serve, else the
 * checkpoint on disk found in full (*dir malloc'd, NULL for none). */
static plait_status from_replicas(plait_run *run, const plait_run_origin *origin, plait_run_source *src, char **dir) {
    *dir = NULL;
    plait_status st = plait_run_replica_find(run, origin->disk_step, &src->replicas);
    if (st != PLAIT_OK || src->replicas) return st;
    return plait_run_find_resume(run->cfg, origin->out_dir, (plait_resume_mode)origin->resume_mode, dir);
}

/* Every rank starts from the same point. Each rank found its checkpoint in
 * its own view of out_dir; ranks that do not share the directory (hosts
 * with local disks) find different ones, or none, and would otherwise fail
 * later at a collective whose sizes differ, with nothing naming why.
 * Collective over the world: one allreduce of the step each starts from
 * (0: fresh). */
static plait_status agree(plait_run *run, const plait_run_source *src) {
    if (run->world.mesh.world_size <= 1) return PLAIT_OK;
    int64_t step = 0;
    if (src->replicas) {
        plait_ckpt_state s;
        plait_replica_set_state(src->replicas, &s);
        step = s.step;
    } else if (src->ck) {
        step = plait_ckpt_state_of(src->ck)->step;
    }
    int64_t v[2] = {step, -step};
    plait_status st = plait_comm_allreduce(run->world.comm, v, v, 2, PLAIT_I64, PLAIT_MAX, NULL, NULL);
    if (st != PLAIT_OK || v[0] == -v[1]) return st;
    char here[4200];
    if (src->replicas || src->ck)
        snprintf(here, sizeof here, "resumes at step %lld from %s", (long long)step, run->resumed_from);
    else snprintf(here, sizeof here, "starts fresh (it found no complete checkpoint)");
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "the ranks would start from different steps, from %lld to %lld (0: fresh): world rank %d "
                           "%s. The ranks do not see the same checkpoints: [run] out_dir must be on a file system "
                           "every rank shares (NFS, Lustre, GPFS...), as every rank reads the checkpoint it resumes "
                           "from; copy the checkpoint there, or start fresh in another out_dir",
                           (long long)-v[1], (long long)v[0], run->world.mesh.world_rank, here);
}

static plait_status open_any(plait_run *run, const plait_run_origin *origin, plait_run_source *src);

plait_status plait_run_source_open(plait_run *run, const plait_run_origin *origin, plait_run_source *src) {
    plait_status st = open_any(run, origin, src);
    if (st == PLAIT_OK) st = agree(run, src);
    if (st != PLAIT_OK) plait_run_source_close(src);
    return st;
}

static plait_status open_any(plait_run *run, const plait_run_origin *origin, plait_run_source *src) {
    memset(src, 0, sizeof *src);
    src->run = run;
    run->resumed_from[0] = '\0';
    const char *resume_dir = origin->resume_dir;
    char *found = NULL;
    if (origin->try_replicas) {
        plait_status st = from_replicas(run, origin, src, &found);
        if (st != PLAIT_OK) return st;
        if (src->replicas) {
            snprintf(run->resumed_from, sizeof run->resumed_from, "%s", plait_replica_set_what(src->replicas));
            plait_replica_set_source(src->replicas, run, &src->cks);
            src->source = src->cks.src;
            return PLAIT_OK;
        }
        resume_dir = found;
    }
    plait_status st = open_dir(run, resume_dir, src);
    free(found);
    return st;
}


/* The source writes host memory; the parameters are the device's: each
 * tensor goes through one host staging buffer (the largest tensor's size). */
plait_status plait_run_source_fill_params(plait_run *run, plait_run_source *src) {
    size_t most = 1;
    for (int32_t i = 0; i < run->params.set.n_params; i++)
        if (run->params.set.params[i].numel > most) most = run->params.set.params[i].numel;
    float *staging = plait_alloc(most * sizeof(float), PLAIT_MEM_HOST, 64, "parameter staging");
    if (!staging) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (int32_t i = 0; st == PLAIT_OK && i < run->params.set.n_params; i++) {
        plait_param *p = &run->params.set.params[i];
        if (!p->data) continue; /* its master is the optimizer's (plait_run_keep_masters) */
        int shared = 0;
        for (int32_t j = 0; j < i && !shared; j++) shared = run->params.set.params[j].data == p->data;
        if (shared) continue;
        st = src->source.read(src->source.ctx, p->index, "param", 0, p->numel, staging);
        if (st == PLAIT_OK) st = plait_device_copy(p->data, staging, p->numel * sizeof(float), PLAIT_COPY_TO_DEVICE);
        if (st != PLAIT_OK) st = plait_wrap_error(st, "initial values of %s", p->name);
    }
    plait_free(staging);
    return st;
}

plait_status plait_run_source_fill_buffers(plait_run *run, plait_run_source *src) {
    const plait_model_spec *spec = run->model.spec;
    plait_status st = PLAIT_OK;
    for (int32_t g = 0; st == PLAIT_OK && g < spec->n_params; g++) {
        const plait_param *p = &spec->params[g];
        if (!plait_model_has_buffer(run->model.instance, g)) continue;
        float *host = malloc((p->numel ? p->numel : 1) * sizeof *host);
        st = host ? src->source.read(src->source.ctx, g, "param", 0, p->numel, host)
                  : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        if (st == PLAIT_OK) st = plait_model_buffer_write(run->model.instance, g, host);
        if (st != PLAIT_OK) st = plait_wrap_error(st, "initial values of %s", p->name);
        free(host);
    }
    return st;
}

plait_status plait_run_check_resume(const plait_ckpt_state *saved, const char *dir, uint64_t seed,
                                    const plait_ckpt_data *now, int warn, unsigned *differs) {
    *differs = 0;
    if (saved->data_step != saved->step)
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "checkpoint %s: its data position (data_step %lld) is not its step (%lld), which "
                               "plait always writes equal (batches are a function of seed, step and sequence): "
                               "the state was not written by this trainer, and where its data continues is unknown",
                               dir, (long long)saved->data_step, (long long)saved->step);
    long long step = (long long)saved->step;
    if (saved->seed != seed) {
        *differs |= PLAIT_RESUME_OTHER_SEED;
        if (warn)
            PLAIT_WARN("train",
                       "checkpoint %s was trained with [run] seed = %llu; this run has seed = %llu: parameters and "
                       "optimizer state continue, but the batches from step %lld on are drawn with the new seed, "
                       "not the ones the interrupted run would have read (run.seed=%llu continues it exactly)",
                       dir, (unsigned long long)saved->seed, (unsigned long long)seed, step + 1,
                       (unsigned long long)saved->seed);
    }
    if (!saved->has_data) {
        if (warn)
            PLAIT_INFO("train", "checkpoint %s (format 1) does not record its training data: not checked", dir);
        return PLAIT_OK;
    }
    const plait_ckpt_data *was = &saved->data;
    if (was->tokens != now->tokens || was->train_tokens != now->train_tokens ||
        was->train_crc32c != now->train_crc32c) {
        *differs |= PLAIT_RESUME_OTHER_DATA;
        if (warn)
            PLAIT_WARN("train",
                       "checkpoint %s was trained on other data (%s: %lld tokens, training split %lld tokens with "
                       "CRC32C %08x); this run reads %s (%lld tokens, training split %lld with CRC32C %08x): "
                       "training continues on this data from step %lld (point [data] path and val_fraction at "
                       "the original data to continue the interrupted run exactly)",
                       dir, was->path, (long long)was->tokens, (long long)was->train_tokens,
                       (unsigned)was->train_crc32c, now->path, (long long)now->tokens,
                       (long long)now->train_tokens, (unsigned)now->train_crc32c, step + 1);
    }
    return PLAIT_OK;
}

plait_status plait_run_source_restore_state(plait_run *run, plait_run_source *src) {
    if (!src->ck && !src->replicas) return PLAIT_OK;
    plait_ckpt_state from_memory;
    const plait_ckpt_state *state = &from_memory;
    if (src->ck) state = plait_ckpt_state_of(src->ck);
    else plait_replica_set_state(src->replicas, &from_memory);
    plait_ckpt_data now;
    plait_run_data_record(run, &now);
    unsigned differs;
    plait_status st = plait_run_check_resume(state, run->resumed_from, run->seed, &now,
                                             run->world.mesh.world_rank == 0, &differs);
    if (st != PLAIT_OK) return st;
    run->step = state->step;
    run->resumed_step = state->step;
    if (run->optim.ops->set_step) run->optim.ops->set_step(run->optim.state, state->optim_step);
    /* the plugins' kept buffers exist now (create, materialize, bind) */
    return plait_run_kept_restore(run, &src->cks);
}

void plait_run_source_close(plait_run_source *src) {
    if (src->ck) plait_ckpt_close(src->ck);
    src->ck = NULL;
    plait_replica_set_free(src->replicas);
    src->replicas = NULL;
    plait_weights_close(src->weights);
    src->weights = NULL;
}
