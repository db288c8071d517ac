/*
 * Saving and resuming a run. A gathered checkpoint holds full tensors with
 * global names, whatever the layout (a sharded one: run_ckpt_shard.c): for
 * each parameter (in global order) the
 * optimizer gathers its DP shards onto DP rank 0 (export_tensor), TP rank 0
 * assembles the TP slices, and the stage's (dp 0, tp 0) rank sends the full
 * tensor to world rank 0, the only writer. One tensor is in flight at a time.
 * Loading is the reverse without communication: every rank reads the slices
 * it needs from the checkpoint files (which must be on a filesystem every
 * rank can read).
 */
#include "train/run_ckpt.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "comm/comm.h"
#include "launch/restart.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/memory.h"
#include "runtime/log.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/llama_hf.h"
#include "runtime/regular_file.h"
#include "train/data.h"
#include "train/run_internal.h"
#include "train/run_kept.h"

/* 1 if none of the n checkpoint directories of out_dir has its COMPLETE
 * marker (none was ever complete, as opposed to complete but damaged). */
static int none_marked(const char *out_dir, int n) {
    plait_ckpt_entry *v = malloc((size_t)n * sizeof *v);
    int got = v ? plait_ckpt_list(out_dir, v, n) : -1, none = got == n;
    for (int i = 0; none && i < n; i++) none = !v[i].has_marker;
    free(v);
    return none;
}

plait_status plait_run_find_resume(const plait_config *cfg, const char *out_dir, plait_resume_mode mode, char **dir) {
    *dir = NULL;
    const char *policy = plait_config_str(cfg, "run", "resume");
    int must = mode == PLAIT_RESUME_REQUIRED || strcmp(policy, "yes") == 0;
    int may = must || mode == PLAIT_RESUME_IF_ANY || strcmp(policy, "auto") == 0;
    plait_ckpt *ck = NULL;
    plait_status st = plait_ckpt_open_latest(out_dir, &ck);
    if (st != PLAIT_OK) return st;
    if (!ck) {
        plait_ckpt_entry first[1];
        int dirs = must ? plait_ckpt_list(out_dir, first, 1) : 0;
        if (must && dirs > 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "--resume: no usable checkpoint in %s: its %d checkpoint director%s (the first: "
                                   "ckpt-%08lld) %s incomplete or damaged (see the warnings above), so there is "
                                   "nothing to resume from",
                                   out_dir, dirs, dirs == 1 ? "y" : "ies", (long long)first[0].step,
                                   dirs == 1 ? "is" : "are");
        if (must)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "--resume: no checkpoint in %s (nothing to resume from)", out_dir);
        /* Checkpoint directories but none complete (every save interrupted or
         * damaged): starting over from step 0 would overwrite the old run's
         * metrics.csv and, at its first save, its leftovers. */
        plait_ckpt_entry e[1];
        int n = plait_ckpt_list(out_dir, e, 1);
        if (n > 0 && plait_restart_count() > 0 && plait_restart_new_dir() && none_marked(out_dir, n)) {
            /* A restart after a crash during this job's first save: the
             * directory held no checkpoint before the job, so these are its
             * own interrupted saves and nothing complete exists to lose. */
            plait_log(PLAIT_LOG_WARN, "train",
                      "every checkpoint in %s is incomplete (%d director%s, the first: ckpt-%08lld: this job's "
                      "first save was interrupted), so the restart starts over from step 0",
                      out_dir, n, n == 1 ? "y" : "ies", (long long)e[0].step);
            return PLAIT_OK;
        }
        if (n > 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s holds %d checkpoint director%s (the first: ckpt-%08lld) but none is complete "
                                   "(saves interrupted, or damaged: see the warnings above), so there is nothing to "
                                   "resume from, and a fresh run here would overwrite that run's metrics.csv; move "
                                   "them away or choose another [run] out_dir",
                                   out_dir, n, n == 1 ? "y" : "ies", (long long)e[0].step);
        return PLAIT_OK;
    }
    if (!may) {
        int64_t step = plait_ckpt_state_of(ck)->step;
        char where[4096];
        snprintf(where, sizeof where, "%s", plait_ckpt_dir(ck));
        plait_ckpt_close(ck);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s already holds a checkpoint (%s, step %" PRId64 "); resume it with --resume or "
                               "[run] resume = auto, or choose another [run] out_dir (a fresh run would mix its "
                               "checkpoints with the old ones)",
                               out_dir, where, step);
    }
    *dir = strdup(plait_ckpt_dir(ck));
    plait_ckpt_close(ck);
    return *dir ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
}

plait_status plait_run_find_resume_quick(const char *out_dir, char **dir, int64_t *step) {
    *dir = NULL;
    *step = -1;
    int n = plait_ckpt_list(out_dir, NULL, 0);
    if (n <= 0) return PLAIT_OK;
    plait_ckpt_entry *v = malloc((size_t)n * sizeof *v);
    if (!v) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    n = plait_ckpt_list(out_dir, v, n);
    for (int i = n - 1; i >= 0 && !*dir; i--) {
        if (!v[i].has_marker) continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/" PLAIT_CKPT_DIR_PREFIX "%08lld", out_dir, (long long)v[i].step);
        if (plait_ckpt_check_quick(path) != PLAIT_OK) {
            plait_clear_error();
            continue;
        }
        *dir = strdup(path);
        *step = v[i].step;
    }
    free(v);
    return PLAIT_OK;
}

int plait_run_stage_owner(const plait_run *run, int32_t stage) {
    const plait_mesh *m = &run->world.mesh;
    int axes[PLAIT_MESH_AXES], sizes[PLAIT_MESH_AXES] = {m->dp, m->tp, m->pp, m->cp},
                               c[PLAIT_MESH_AXES] = {0, 0, stage, 0};
    if (plait_mesh_parse_order(run->world.mesh.order, axes) != PLAIT_OK) return 0;
    return plait_mesh_rank_of(c, sizes, axes);
}

static size_t global_numel(const plait_param *p) {
    size_t n = 1;
    for (int d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

/* An expert tensor cut twice (tp × ep): on each of the first ep ranks the
 * tp ranks' width slices of its experts assembled on tp rank 0 (a block
 * of E / ep whole experts), then those blocks gathered along dimension 0
 * over the ep group onto dp × cp rank 0, as at tp 1. */
static plait_status gather_twice(plait_run *run, int32_t g, const plait_param *lp, float *full, float *slice,
                                 float *slices, int dp0) {
    const plait_mesh *m = &run->world.mesh;
    const plait_param *gp = &run->model.spec->params[g];
    plait_status st = plait_comm_gather(m->tp_comm, slice, slices, lp->numel, PLAIT_F32, 0, NULL, NULL);
    if (st != PLAIT_OK || m->tp_rank != 0) return st;
    int64_t shape[PLAIT_MAX_DIMS];
    memcpy(shape, gp->shape, sizeof shape);
    shape[0] = lp->local_shape[0];
    const size_t n = lp->numel * (size_t)m->tp;
    float *block = plait_alloc(n * sizeof(float) + 64, PLAIT_MEM_HOST, 64, "checkpoint buffer");
    if (!block) return plait_set_error(PLAIT_ERR_NO_MEMORY, "checkpoint: %s's experts (%zu floats)", gp->name, n);
    for (int k = 0; k < m->tp && st == PLAIT_OK; k++) {
        plait_shard sh = run->work.plan.second_shards[g];
        sh.index = k;
        st = plait_shard_insert(gp->ndim, shape, &sh, slices + (size_t)k * lp->numel, block);
    }
    if (st == PLAIT_OK) st = plait_comm_gather(m->ep_comm, block, dp0 ? full : NULL, n, PLAIT_F32, 0, NULL, NULL);
    plait_free(block);
    return st;
}

plait_status plait_run_gather_full(plait_run *run, int32_t g, const char *which, uint32_t tag, float *full,
                                   float *slice, float *slices, int to_rank0) {
    const plait_param *gp = &run->model.spec->params[g];
    int32_t stage = run->work.plan.layer_stage[gp->layer];
    int owner = plait_run_stage_owner(run, stage);
    int me = run->world.mesh.world_rank;
    plait_status st = PLAIT_OK;
    if (run->work.stage == stage && (gp->flags & PLAIT_PARAM_BUFFER)) {
        /* a model buffer, whole on every rank of the stage: the owner's;
         * no optimizer state (zeros where the layout has a state's tensor,
         * as a parameter without gradient has, so checkpoints keep one
         * layout) */
        if (me == owner && strcmp(which, "param") == 0) st = plait_model_buffer_read(run->model.instance, g, full);
        else if (me == owner) memset(full, 0, global_numel(gp) * sizeof(float));
        if (st == PLAIT_OK && me == owner && owner != 0 && to_rank0)
            st = plait_comm_send(run->world.comm, full, global_numel(gp), PLAIT_F32, 0, tag, NULL);
    } else if (run->work.stage == stage) {
        int32_t l = run->params.local_of_global[g];
        const plait_param *lp = &run->params.set.params[l];
        int dp0 = run->world.mesh.dpcp_rank == 0; /* dp_rank 0 of cp rank 0: the cp ranks hold the same */
        /* experts split over ep: the first ep group holds each once, its
         * slices along dimension 0 in ep-rank order are the whole tensor */
        int ep_split = (lp->flags & PLAIT_PARAM_EXPERT) && lp->shard.dim == 0 && lp->shard.parts > 1;
        int holds = ep_split ? run->world.mesh.dpcp_rank < run->world.mesh.ep : dp0;
        const int twice = ep_split && plait_param_split_twice(lp); /* tp × ep */
        st = run->optim.ops->export_tensor(run->optim.state, g, which, holds ? slice : NULL);
        if (st == PLAIT_OK && twice && holds) st = gather_twice(run, g, lp, full, slice, slices, dp0);
        else if (st == PLAIT_OK && ep_split && holds)
            st = plait_comm_gather(run->world.mesh.ep_comm, slice, dp0 ? full : NULL, lp->numel, PLAIT_F32, 0, NULL,
                                   NULL);
        if (st == PLAIT_OK && dp0) {
            int tp = run->world.mesh.tp;
            if (tp > 1 && !twice)
                st = plait_comm_gather(run->world.mesh.tp_comm, slice, slices, lp->numel, PLAIT_F32, 0, NULL, NULL);
            if (st == PLAIT_OK && me == owner) {
                if (ep_split) {
                    /* gathered into full above */
                } else if (tp == 1 || lp->shard.parts <= 1) {
                    memcpy(full, slice, global_numel(gp) * sizeof(float));
                } else {
                    for (int k = 0; k < tp && st == PLAIT_OK; k++) {
                        plait_shard sh = lp->shard;
                        sh.index = k;
                        st = plait_shard_insert(gp->ndim, gp->shape, &sh, slices + (size_t)k * lp->numel, full);
                    }
                }
                if (st == PLAIT_OK && owner != 0 && to_rank0)
                    st = plait_comm_send(run->world.comm, full, global_numel(gp), PLAIT_F32, 0, tag, NULL);
            }
        }
    }
    if (st == PLAIT_OK && me == 0 && owner != 0 && to_rank0)
        st = plait_comm_recv(run->world.comm, full, global_numel(gp), PLAIT_F32, owner, tag, NULL);
    return st;
}

static void layout_text(const plait_run *run, char *buf, size_t len) {
    char cp[16] = "";
    if (run->world.mesh.cp > 1) snprintf(cp, sizeof cp, " x cp%d", run->world.mesh.cp);
    snprintf(buf, len, "dp%d%s x tp%d x pp%d, %s, %s", run->world.mesh.dp, cp, run->world.mesh.tp, run->world.mesh.pp,
             plait_config_str(run->cfg, "parallel", "plugin"), plait_config_str(run->cfg, "optim", "plugin"));
}

/* [model] keys, so `plait sample` rebuilds the model from the checkpoint alone. */
static plait_status write_model_meta(plait_run *run, plait_ckpt_writer *w) {
    for (size_t i = 0; plait_ckpt_model_keys[i]; i++) {
        char k[64];
        snprintf(k, sizeof k, "plait.model.%s", plait_ckpt_model_keys[i]);
        plait_value v;
        plait_status st = plait_config_get(run->cfg, "model", plait_ckpt_model_keys[i], &v);
        if (st == PLAIT_OK) st = plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, k, v.s);
        if (st != PLAIT_OK) return st;
    }
    /* a mixture of experts' keys, as the config gives them */
    for (size_t i = 0; plait_model_moe_experts(run->model.desc) > 0 && plait_ckpt_moe_keys[i]; i++) {
        char k[64], text[64];
        plait_value v;
        snprintf(k, sizeof k, "plait.model.%s", plait_ckpt_moe_keys[i]);
        plait_status st = plait_config_get(run->cfg, "model", plait_ckpt_moe_keys[i], &v);
        if (st != PLAIT_OK) return st;
        if (v.type == PLAIT_KEY_INT) snprintf(text, sizeof text, "%lld", (long long)v.i);
        else if (v.type == PLAIT_KEY_FLOAT) snprintf(text, sizeof text, "%.17g", v.f);
        else snprintf(text, sizeof text, "%s", v.s ? v.s : "");
        if ((st = plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, k, text)) != PLAIT_OK) return st;
    }
    /* a llama's own keys, resolved (n_kv_head and ffn_hidden as the model has them) */
    plait_llama_shape llama;
    if (strcmp(run->model.spec->arch, "llama") == 0) {
        plait_status st = plait_llama_shape_of(run->model.spec, run->cfg, &llama);
        for (size_t i = 0; st == PLAIT_OK && plait_llama_ckpt_keys[i]; i++) {
            if (!plait_llama_key_recorded(&llama, i)) continue;
            char k[64], v[64];
            snprintf(k, sizeof k, "plait.model.%s", plait_llama_ckpt_keys[i]);
            plait_llama_key_text(&llama, i, v, sizeof v);
            st = plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, k, v);
        }
        if (st != PLAIT_OK) return st;
    }
    /* text read as bytes: the ids are bytes, which export says */
    if (run->data && plait_data_format_of(run->data) == PLAIT_DATA_FORMAT_TEXT) {
        plait_status st = plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, "plait.data.format", "bytes");
        if (st != PLAIT_OK) return st;
    }
    /* the tokenizer the run's data was made with, for `plait sample` */
    const char *tokenizer = run->data ? plait_data_tokenizer(run->data) : "";
    if (!*tokenizer) return PLAIT_OK;
    char fp[24];
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)plait_data_tokenizer_fingerprint(run->data));
    plait_status st = plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, "plait.data.tokenizer", tokenizer);
    return st == PLAIT_OK ? plait_ckpt_file_metadata(w, PLAIT_CKPT_MODEL, "plait.data.tokenizer_fingerprint", fp) : st;
}

/* A checkpoint holds finite parameters: one with NaN or Inf could start no
 * run (init_from and --resume refuse it), so it is not saved. */
static plait_status check_finite(const plait_run *run, const char *name, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "parameter %s holds %s at element %zu: not saved (no run could start from it); "
                                   "the last update of [optim] plugin %s wrote non-finite values, or the training "
                                   "diverged",
                                   name, isnan(v[i]) ? "NaN" : "Inf", i, plait_config_str(run->cfg, "optim", "plugin"));
    return PLAIT_OK;
}

/* A gathered save: each tensor assembled on world rank 0, which writes it.
 * Rank 0's writing fails alone (a full disk): it keeps taking part in the
 * gathers, writing nothing more, so the owners' sends still find their
 * receive and every rank reaches the outcome at once with rank 0's reason,
 * instead of waiting for [comm] timeout; *wst is that failure. */
static plait_status gather_and_write(plait_run *run, plait_ckpt_writer *w, plait_status *wst_out) {
    const plait_model_spec *spec = run->model.spec;
    int me = run->world.mesh.world_rank;
    size_t max_global = 0, max_local = 0;
    for (int32_t g = 0; g < spec->n_params; g++)
        if (global_numel(&spec->params[g]) > max_global) max_global = global_numel(&spec->params[g]);
    for (int32_t i = 0; i < run->params.set.n_params; i++)
        if (run->params.set.params[i].numel > max_local) max_local = run->params.set.params[i].numel;
    float *full = plait_alloc((max_global + max_local) * sizeof(float) + 64, PLAIT_MEM_HOST, 64, "checkpoint buffer");
    float *slices = run->world.mesh.tp > 1 ? plait_alloc(max_local * (size_t)run->world.mesh.tp * sizeof(float) + 64,
                                                   PLAIT_MEM_HOST, 64, "checkpoint buffer")
                                     : NULL;
    if (!full || (run->world.mesh.tp > 1 && !slices)) {
        plait_free(full);
        plait_free(slices);
        return PLAIT_ERR_NO_MEMORY;
    }
    float *slice = full + max_global;
    plait_status st = PLAIT_OK, wst = PLAIT_OK;
    const char *const *states = run->optim.ops->state_names;
    uint32_t tag = 0x5a000000u;
    for (int32_t g = 0; st == PLAIT_OK && g < spec->n_params; g++) {
        if (!plait_ckpt_param_stored(spec, g)) continue;
        const char *pname = plait_ckpt_param_name(spec, g);
        for (int k = -1; st == PLAIT_OK && (k < 0 || (states && states[k])); k++) {
            const char *which = k < 0 ? "param" : states[k];
            st = plait_run_gather_full(run, g, which, tag++, full, slice, slices, 1);
            if (st == PLAIT_OK && me == 0 && wst == PLAIT_OK) {
                char name[512];
                if (k < 0)
                    snprintf(name, sizeof name, "%s", pname);
                else
                    plait_ckpt_optim_name(name, sizeof name, which, pname);
                if (k < 0) wst = check_finite(run, pname, full, global_numel(&spec->params[g]));
                if (wst == PLAIT_OK) wst = plait_ckpt_write(w, name, full, global_numel(&spec->params[g]));
            }
        }
    }
    plait_free(full);
    plait_free(slices);
    *wst_out = wst;
    return st;
}

/* A save's ending on world rank 0's side: its writer (NULL elsewhere) and
 * the run state it records, as they were at the save's step. */
typedef struct plait_pending_save {
    plait_ckpt_writer *w;
    plait_shard_job *job; /* sharded: this rank's file */
    int64_t step;
    plait_ckpt_state state;
    char layout[256];
} plait_pending_save;

/* The save's end, collective: the shard files told to rank 0 (sharded),
 * then rank 0 commits (manifest, marker, pruning) unless a rank failed, and
 * everyone learns the outcome. `st`: this rank's status so far. */
static plait_status end_save(plait_run *run, plait_pending_save *ps, plait_status st) {
    int me = run->world.mesh.world_rank, others_failed = 0;
    if (ps->job) {
        plait_status est = plait_run_shards_end(run, ps->job, ps->w, &others_failed);
        if (st == PLAIT_OK) st = est;
        ps->job = NULL;
    }
    if (me == 0 && st == PLAIT_OK && plait_restart_count() == 0 &&
        plait_config_int(run->cfg, "run", "debug_die_in_save") == ps->step &&
        plait_config_int(run->cfg, "run", "debug_die_in_save_rank") == 0)
        raise(SIGKILL); /* for tests: a crash with the tensors written, nothing renamed */
    /* the checkpoint's directory is renamed into place by its path under
     * out_dir: not through a process the gathers' calls changed */
    if (me == 0 && st == PLAIT_OK) st = plait_run_check_process(run, "the save's calls");
    if (me == 0) {
        /* another rank's shard failed (it said why): no marker, and the
         * allreduce below names that rank */
        if (st == PLAIT_OK && !others_failed) {
            ps->state.layout = ps->layout;
            st = plait_ckpt_commit(ps->w, &ps->state, (int)plait_config_int(run->cfg, "run", "keep_checkpoints"),
                                   plait_config_int(run->cfg, "run", "keep_every"));
        } else if (ps->w) {
            plait_ckpt_writer_abort(ps->w);
        }
        ps->w = NULL;
    }
    /* The save is complete only when rank 0 committed; tell everyone, and
     * which rank failed first-hand (the lowest), so that the others' errors
     * relay to it and the launcher reports its error, the cause. */
    int world = run->world.mesh.world_size, failed_rank = st == PLAIT_OK ? world : me;
    plait_status cst = plait_comm_allreduce(run->world.comm, &failed_rank, &failed_rank, 1, PLAIT_I32, PLAIT_MIN, NULL,
                                            NULL);
    if (st == PLAIT_OK && cst != PLAIT_OK) st = cst;
    if (st == PLAIT_OK && failed_rank < world)
        st = plait_set_error(PLAIT_ERR_SYSTEM,
                             "world rank %d stopped after world rank %d failed to save the checkpoint", me,
                             failed_rank);
    if (st != PLAIT_OK) return plait_wrap_error(st, "checkpoint at step %" PRId64, ps->step);
    return PLAIT_OK;
}

plait_status plait_run_save_settle(plait_run *run, int wait, int ok) {
    plait_pending_save *ps = run->pending_save;
    if (!ps) return PLAIT_OK;
    if (!ok) { /* the run is failing: this rank's writer joined, the save given up (no marker) */
        plait_run_shards_drop(ps->job);
        if (ps->w) plait_ckpt_writer_abort(ps->w);
        free(ps);
        run->pending_save = NULL;
        return PLAIT_OK;
    }
    int done = plait_run_shards_written(ps->job);
    if (!wait) {
        plait_status st = plait_comm_allreduce(run->world.comm, &done, &done, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
        if (st != PLAIT_OK || !done) return st;
    } else if (!done && run->world.mesh.world_rank == 0) {
        PLAIT_INFO("checkpoint", "waiting for the checkpoint of step %lld, still being written in the background",
                   (long long)ps->step);
    }
    run->pending_save = NULL;
    plait_status st = end_save(run, ps, PLAIT_OK);
    free(ps);
    return st;
}

plait_status plait_run_save(plait_run *run, const char *out_dir) {
    const plait_model_spec *spec = run->model.spec;
    int me = run->world.mesh.world_rank;
    /* at most one save in flight: the previous one ends first */
    plait_status st = plait_run_save_settle(run, 1, 1);
    if (st != PLAIT_OK) return st;
    plait_pending_save *ps = calloc(1, sizeof *ps);
    if (!ps) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    ps->step = run->step;
    /* every rank's kept buffers (onebit's error feedback), declared with the
     * tensors: rank 0 learns their names and sizes first */
    plait_kept_manifest kept;
    st = plait_run_kept_manifest(run, &kept);
    int sharded = strcmp(plait_config_str(run->cfg, "run", "ckpt_format"), "sharded") == 0;
    /* the last save is waited for: the run ends with it */
    int async = sharded && plait_config_bool(run->cfg, "run", "ckpt_async") && run->step < run->steps;
    if (me == 0 && st == PLAIT_OK) {
        st = plait_ckpt_writer_begin_in_run(out_dir, run->step, &ps->w);
        if (st == PLAIT_OK) plait_ckpt_writer_protect(ps->w, run->resumed_step);
        /* sharded: the tensors are in the ranks' shard files, named by index.json */
        if (st == PLAIT_OK && !sharded) st = plait_ckpt_declare_model(ps->w, spec, run->optim.ops->state_names);
        if (st == PLAIT_OK) st = plait_run_kept_declare(run, &kept, ps->w);
        if (st == PLAIT_OK) st = write_model_meta(run, ps->w);
    }
    /* Everyone learns whether rank 0 could start, so nobody waits for it. */
    int ok = st == PLAIT_OK;
    plait_status cst = plait_comm_broadcast(run->world.comm, &ok, 1, PLAIT_I32, 0, NULL, NULL);
    if (cst != PLAIT_OK) st = cst;
    else if (!ok && me != 0) /* worded as a relay, so that the launcher reports rank 0's own error */
        st = plait_set_error(PLAIT_ERR_SYSTEM,
                             "world rank %d stopped after world rank 0 failed to start the checkpoint", me);
    plait_status wst = PLAIT_OK;
    if (sharded && st == PLAIT_OK) st = plait_run_shards_begin(run, out_dir, async, &ps->job);
    else if (st == PLAIT_OK) st = gather_and_write(run, ps->w, &wst);
    if (async) { /* in the background only if every rank's snapshot and thread started */
        int good = st == PLAIT_OK;
        cst = plait_comm_allreduce(run->world.comm, &good, &good, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
        if (cst != PLAIT_OK && st == PLAIT_OK) st = cst;
        async = good && st == PLAIT_OK;
    }
    if (st == PLAIT_OK) st = plait_run_kept_write(run, &kept, wst == PLAIT_OK ? ps->w : NULL);
    plait_run_kept_manifest_free(&kept);
    if (st == PLAIT_OK) st = wst;
    if (me == 0) {
        layout_text(run, ps->layout, sizeof ps->layout);
        ps->state = (plait_ckpt_state){.step = run->step,
                                       .seed = run->seed,
                                       .data_step = run->step,
                                       .optim_step = run->optim.ops->get_step
                                                         ? run->optim.ops->get_step(run->optim.state)
                                                         : run->step,
                                       .has_data = 1};
        plait_run_data_record(run, &ps->state.data);
    }
    if (async && st == PLAIT_OK) { /* written while training goes on; ended by plait_run_save_settle */
        run->pending_save = ps;
        return PLAIT_OK;
    }
    st = end_save(run, ps, st);
    free(ps);
    return st;
}

plait_status plait_run_check_ckpt_names(const char *out_dir, int64_t from_step, int64_t steps, int64_t every) {
    DIR *d = opendir(out_dir);
    if (!d) return PLAIT_OK; /* not made yet: nothing in the way */
    plait_status st = PLAIT_OK;
    for (struct dirent *e; st == PLAIT_OK && (e = readdir(d));) {
        int64_t step;
        if (plait_ckpt_parse_dir_name(e->d_name, &step) != 0 || step <= from_step || step > steps) continue;
        if (step != steps && (every <= 0 || step % every != 0)) continue;
        char path[4200];
        plait_ckpt_dir_path(path, sizeof path, out_dir, step);
        const char *slash = strrchr(path, '/');
        if (strcmp(slash ? slash + 1 : path, e->d_name) != 0) continue; /* "ckpt-6" is not ckpt-00000006 */
        struct stat sb;
        if (lstat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s is %s, where this run saves its checkpoint of step %lld: the save would refuse "
                                 "it only after training to that step; remove it or choose another out_dir "
                                 "(nothing was trained)",
                                 path, plait_file_kind(sb.st_mode),
                                 (long long)step);
        else if (plait_ckpt_check_replaceable(path) != PLAIT_OK) {
            char why[1024];
            snprintf(why, sizeof why, "%s", plait_last_error());
            st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                                 "%s: the save of step %lld would fail only after training to it; remove it or "
                                 "choose another out_dir (nothing was trained)",
                                 why, (long long)step);
        }
    }
    closedir(d);
    return st;
}

uint64_t plait_run_ckpt_bytes(const plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    size_t states = 0;
    for (const char *const *n = run->optim.ops->state_names; n && *n; n++) states++;
    uint64_t elems = 0;
    for (int32_t i = 0; i < spec->n_params; i++) {
        if (!plait_ckpt_param_stored(spec, i)) continue;
        uint64_t e = 1;
        for (int32_t d = 0; d < spec->params[i].ndim; d++) e *= (uint64_t)spec->params[i].shape[d];
        elems += e;
    }
    return elems * sizeof(float) * (1 + states);
}

void plait_run_warn_ckpt_room(const plait_run *run, const char *out_dir, int64_t every) {
    if (run->step >= run->steps) return; /* nothing to train, nothing to save */
    /* the first save: the first multiple of `every` after this step, else the last step */
    int64_t first = every > 0 ? (run->step / every + 1) * every : run->steps;
    if (first > run->steps) first = run->steps;
    struct statvfs fs;
    if (statvfs(out_dir, &fs) != 0) return; /* not made yet: its parent's room is asked when it is */
    uint64_t room = (uint64_t)fs.f_bavail * (uint64_t)fs.f_frsize, need = plait_run_ckpt_bytes(run);
    if (room >= need) return;
    char a[32], b[32];
    PLAIT_WARN("train",
               "the file system of %s has %s free, and a checkpoint of this model takes about %s (the "
               "parameters and the optimizer's state in float32): the save at step %lld will fail unless room is "
               "made before then",
               out_dir, plait_bytes_text((double)room, a, sizeof a), plait_bytes_text((double)need, b, sizeof b),
               (long long)first);
}
