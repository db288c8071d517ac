/*
 * Checkpoints: float32 tensors under global names, so any layout
 * (DP/TP/PP/ZeRO, any sizes) resumes any other layout's checkpoint. Below
 * is the gathered format (full tensors); a sharded checkpoint (state.json
 * format 3, docs/checkpoints.md) holds the parameters and optimizer state
 * instead as the ranks' slices in shard-<rank>.safetensors files named by
 * index.json (checkpoint_index.h), its model file keeping only the
 * metadata, and every file in the manifest; a reader gets either through
 * plait_ckpt_read_slice and the source below.
 *
 * On disk, under the run directory:
 *   <out_dir>/ckpt-<step, 8+ digits>/
 *       model.safetensors   model tensors, nanoGPT names and PyTorch layouts
 *                           ("transformer.wte.weight" [vocab, n_embd],
 *                           "transformer.h.0.attn.c_attn.weight" [3C, C] as
 *                           nn.Linear stores [out, in], ...). A tied copy
 *                           (lm_head.weight, PLAIT_PARAM_TIED_COPY) is not
 *                           stored: it is transformer.wte.weight.
 *       optim.safetensors   optimizer state, "optim.<state>.<param name>" —
 *                           "optim.exp_avg.transformer.wte.weight",
 *                           "optim.exp_avg_sq.transformer.wte.weight" for the
 *                           Adam family (plait_optim_ops.state_names), same
 *                           global shapes as the parameter.
 *       state.json          run state and manifest (below)
 *       COMPLETE            completion marker, written last
 * Both .safetensors files carry their own CRC32C checksums (safetensors.h).
 *
 * state.json (one JSON object):
 *   "format": "plait-checkpoint", "format_version": 2, "plait_version",
 *   "step"        optimizer steps completed = the step training resumes at,
 *   "seed"        [run] seed. The trainer keeps no generator state: initial
 *                 values and batches are counter-based functions of the seed
 *                 (and the parameter and element, or the step and sequence,
 *                 data.h), so the seed and the data position are the whole
 *                 of the run's randomness,
 *   "data_step"   data position: the step whose batches are read next
 *                 (= "step"; kept so a reader need not know that),
 *   "optim_step"  the optimizer's own step count (plait_optim_ops.get_step),
 *   "data"        the training data read: {"path" (informational: data
 *                 moves between machines), "tokens" in the file,
 *                 "train_tokens" in its training split, "train_crc32c" of
 *                 the training split's bytes (8 hex digits)},
 *   "layout"      informational ("dp=2 tp=1 pp=1 optim=adam"): never used
 *                 to refuse a resume,
 *   "files"       {"model.safetensors": {"bytes": N, "crc32c": "xxxxxxxx"}, ...},
 *   "meta"        free-form string pairs from the trainer.
 * COMPLETE holds one line: "plait-checkpoint step=<N> state.json crc32c=<hex>".
 * Format 1 (before "data") is still read: its "rng_state" (always 0) is
 * ignored and has_data is 0. What a resumed run checks against this state is
 * in run_source.h.
 *
 * Atomicity. Every file is written under a temporary name of its own
 * ("<name>.<pid>-<random>.tmp"), fsync'd, renamed, and the directory
 * fsync'd; nothing is written, renamed or deleted through a symbolic link
 * (a ckpt-* link is not a checkpoint of the run: ignored, and a save onto
 * one refused); the marker goes last, after the manifest. A
 * directory without a valid marker is incomplete. Opening checks, in order:
 * marker present and well-formed, state.json's CRC, state.json's syntax and
 * step (= the directory's), each file's size and CRC32C against the
 * manifest, then each safetensors header strictly. Any failure refuses the
 * checkpoint with a message naming the file and what is wrong.
 * plait_ckpt_open_latest() walks checkpoints newest first and skips (with a
 * warning) every incomplete or damaged one.
 *
 * Writing is single-writer (one process writes a given out_dir); reading is
 * concurrent: an open checkpoint is read-only and every accessor is
 * thread-safe. Files are memory-mapped, so readers touch only what they use.
 */
#ifndef PLAIT_CORE_CHECKPOINT_H
#define PLAIT_CORE_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <plait/model.h>

#include "checkpoint/safetensors.h"

#define PLAIT_CKPT_MODEL_FILE "model.safetensors"
#define PLAIT_CKPT_OPTIM_FILE "optim.safetensors"
#define PLAIT_CKPT_STATE_FILE "state.json"
#define PLAIT_CKPT_MARKER_FILE "COMPLETE"
#define PLAIT_CKPT_DIR_PREFIX "ckpt-"

typedef enum plait_ckpt_file {
    PLAIT_CKPT_MODEL = 0,
    PLAIT_CKPT_OPTIM = 1
} plait_ckpt_file;

/* The training data a run read, as identified in a checkpoint. */
typedef struct plait_ckpt_data {
    const char *path;        /* as opened (informational); may be NULL when writing */
    int64_t tokens;          /* tokens in the file */
    int64_t train_tokens;    /* of which in the training split */
    uint32_t train_crc32c;   /* CRC32C of the training split's bytes */
} plait_ckpt_data;

/* Run state saved beside the tensors. */
typedef struct plait_ckpt_state {
    int64_t step;        /* optimizer steps completed (the resume step) */
    uint64_t seed;       /* [run] seed */
    int64_t data_step;   /* next step whose batches are read */
    int64_t optim_step;  /* plait_optim_ops.get_step() */
    int has_data;        /* `data` was recorded (0 only when reading format 1) */
    plait_ckpt_data data;
    const char *layout;  /* informational; may be NULL when writing */
} plait_ckpt_state;

/* ---- names -------------------------------------------------------------- */

/* Name under which parameter `param_index` of `spec` is stored: its own
 * name, or the tied original's for a PLAIT_PARAM_TIED_COPY. */
const char *plait_ckpt_param_name(const plait_model_spec *spec, int32_t param_index);
/* 1 if parameter `param_index` has its own tensors in a checkpoint (0 for tied copies). */
int plait_ckpt_param_stored(const plait_model_spec *spec, int32_t param_index);
/* "optim.<state>.<param_name>" into buf; returns the length it needs (like snprintf). */
int plait_ckpt_optim_name(char *buf, size_t cap, const char *state, const char *param_name);

/* ---- writing -------------------------------------------------------------
 * begin → declare* (+ file metadata, meta) → write* (tensors in any order,
 * each in consecutive chunks, so rank 0 can gather and write one tensor at a
 * time) → commit. One thread at a time. */
typedef struct plait_ckpt_writer plait_ckpt_writer;

/* Start checkpoint `step` under out_dir (created if missing, like mkdir -p).
 * If ckpt-<step> exists already (a crash, or the same step saved again), its
 * marker is removed first, so it is incomplete until this commit ends. */
plait_status plait_ckpt_writer_begin(const char *out_dir, int64_t step, plait_ckpt_writer **out);
/* The same under a run's directory, which must exist: a run directory
 * removed under a running job is never made again by its next checkpoint
 * (PLAIT_ERR_SYSTEM naming it instead). */
plait_status plait_ckpt_writer_begin_in_run(const char *out_dir, int64_t step, plait_ckpt_writer **out);
/* Whether a save into the existing directory `dir` could put its files in
 * place: each is renamed over its name, and a rename cannot replace a
 * directory, so a directory by a file's name (model.safetensors,
 * optim.safetensors, state.json, COMPLETE) is refused, naming it. Anything
 * else by those names (a file, a link) is replaced and never written
 * through. PLAIT_OK when `dir` does not exist. Thread-safe; touches nothing. */
plait_status plait_ckpt_check_replaceable(const char *dir);
/* Declare a tensor of `file` (global shape). */
plait_status plait_ckpt_declare(plait_ckpt_writer *w, plait_ckpt_file file, const char *name,
                                int32_t ndim, const int64_t *shape);
/* Declare every stored parameter of `spec` in MODEL (global order, tied
 * copies skipped) and, for each name in the NULL-terminated `state_names`
 * (may be NULL), "optim.<state>.<param>" in OPTIM. */
plait_status plait_ckpt_declare_model(plait_ckpt_writer *w, const plait_model_spec *spec,
                                      const char *const *state_names);
/* __metadata__ entry of one safetensors file (e.g. the model config). */
plait_status plait_ckpt_file_metadata(plait_ckpt_writer *w, plait_ckpt_file file, const char *key,
                                      const char *value);
/* Free-form entry of state.json's "meta" object (strings copied). */
plait_status plait_ckpt_set_meta(plait_ckpt_writer *w, const char *key, const char *value);
/* Append the next `count` elements of tensor `name` (either file). */
plait_status plait_ckpt_write(plait_ckpt_writer *w, const char *name, const float *data, size_t count);
/* Finish both files, write state.json and COMPLETE (all atomically, fsync'd),
 * then keep only the newest `keep` complete checkpoints and those whose
 * step `keep_every` divides (keep <= 0: keep all; see plait_ckpt_prune). Frees `w` whatever the result; on failure the
 * temp files are removed and the checkpoint stays incomplete. */
plait_status plait_ckpt_commit(plait_ckpt_writer *w, const plait_ckpt_state *state, int keep, int64_t keep_every);
/* Give up: remove temp files, free. NULL is ignored. */
void plait_ckpt_writer_abort(plait_ckpt_writer *w);
/* A sharded save: list file `name` of the checkpoint directory (a shard
 * file another rank wrote, fsync'd and renamed into place) in state.json's
 * manifest with its size and CRC32C, so that opening checks it. */
plait_status plait_ckpt_writer_add_file(plait_ckpt_writer *w, const char *name, uint64_t bytes, uint32_t crc);
/* A sharded save: write index.json (atomically, fsync'd) and list it in
 * the manifest. Call after every shard file is in place, before commit. */
struct plait_ckpt_index;
plait_status plait_ckpt_write_index(plait_ckpt_writer *w, const struct plait_ckpt_index *ix);
/* The checkpoint directory being written. */
const char *plait_ckpt_writer_dir(const plait_ckpt_writer *w);
/* The pruning after this commit never deletes checkpoint `step` (the one
 * the run resumed from). */
void plait_ckpt_writer_protect(plait_ckpt_writer *w, int64_t step);

/* Testing: make commit stop as a crash would at `point`, leaving every file
 * as it is (commit then returns PLAIT_ERR_INTERNAL "simulated crash"). */
typedef enum plait_ckpt_crash {
    PLAIT_CKPT_CRASH_NONE = 0,
    PLAIT_CKPT_CRASH_BEFORE_RENAME = 1, /* model file written and fsync'd as .tmp, not renamed */
    PLAIT_CKPT_CRASH_BEFORE_MARKER = 2  /* every file in place except COMPLETE */
} plait_ckpt_crash;
void plait_ckpt_writer_crash_at(plait_ckpt_writer *w, plait_ckpt_crash point);

/* ---- reading ------------------------------------------------------------- */
typedef struct plait_ckpt plait_ckpt;

/* Open and fully verify the checkpoint directory `dir` (see above). Errors:
 * PLAIT_ERR_PROTOCOL (incomplete or damaged; the message names the file and
 * the problem), PLAIT_ERR_SYSTEM (cannot read). Caller closes *out. */
plait_status plait_ckpt_open(const char *dir, plait_ckpt **out);
/* The cheap part of that check: marker, state.json (its CRC and syntax) and
 * each file's size against the manifest; no tensor data is read. */
plait_status plait_ckpt_check_quick(const char *dir);
/* The newest checkpoint under out_dir that opens cleanly, skipping (and
 * logging a warning for) incomplete or damaged ones. *out = NULL and
 * PLAIT_OK when there is none (a missing out_dir counts as none). */
plait_status plait_ckpt_open_latest(const char *out_dir, plait_ckpt **out);
/* The checkpoint a user names: a checkpoint directory, or a run directory
 * (its newest checkpoint that opens, as plait_ckpt_open_latest). Errors: a
 * checkpoint's own refusal, or a run directory's "holds no usable
 * checkpoint"; *out is NULL then. */
plait_status plait_ckpt_open_named(const char *path, plait_ckpt **out);
void plait_ckpt_close(plait_ckpt *ck);

const char *plait_ckpt_dir(const plait_ckpt *ck);
/* The run state (strings owned by ck). */
const plait_ckpt_state *plait_ckpt_state_of(const plait_ckpt *ck);
/* state.json "meta" value, or NULL. */
const char *plait_ckpt_meta(const plait_ckpt *ck, const char *key);
/* __metadata__ value of one file, or NULL. */
const char *plait_ckpt_file_meta(const plait_ckpt *ck, plait_ckpt_file file, const char *key);
/* The open safetensors file (for listing tensors). */
const plait_st_file *plait_ckpt_st(const plait_ckpt *ck, plait_ckpt_file file);
/* A sharded checkpoint's index (its slices' data mapped), or NULL for a
 * checkpoint of full tensors. */
const struct plait_ckpt_index *plait_ckpt_index_of(const plait_ckpt *ck);
/* Give back the resident pages of tensor `name`'s mapped bytes (in the
 * model or optimizer file, or its slices in the shard files; plait_st_release),
 * for a reader that reads each tensor once: plait export holds one
 * tensor's pages at a time, not every file's. A later read is correct. */
void plait_ckpt_release_tensor(const plait_ckpt *ck, const char *name);
/* Tensor `name` from either file, or NULL (also for a sharded checkpoint's
 * parameters and optimizer state, which only plait_ckpt_read_slice and the
 * source read). Its data is mapped, read-only. */
const plait_st_tensor *plait_ckpt_tensor(const plait_ckpt *ck, const char *name);
/* Copy elements [offset, offset+count) of tensor `name` (global, row-major).
 * PLAIT_ERR_UNSUPPORTED if absent, PLAIT_ERR_INVALID_ARG if out of range. */
plait_status plait_ckpt_read(const plait_ckpt *ck, const char *name, size_t offset, size_t count,
                             float *dst);
/* Fill local elements [offset, offset+count) of `param`'s slice (its shard,
 * padding = 0) from tensor `name`, whose shape must equal param->shape
 * (else PLAIT_ERR_INVALID_CONFIG naming both shapes: a different model). */
plait_status plait_ckpt_read_slice(const plait_ckpt *ck, const char *name, const plait_param *param,
                                   size_t offset, size_t count, float *dst);

/* A plait_value_source over a checkpoint, for plait_optim_ops.materialize():
 * which = "param" reads the parameter, any other `which` reads
 * "optim.<which>.<name>" (PLAIT_ERR_UNSUPPORTED when the checkpoint has no
 * such tensor, so the optimizer zero-fills). `param_index` is the global
 * parameter index (plait_param.index); the parameter is looked up in
 * `local` for its shard. Tied copies read their original's tensors. All
 * pointers are borrowed and must outlive the source. Thread-safe. */
/* Where a source finds a tensor by its checkpoint name: NULL when absent. */
typedef const plait_st_tensor *(*plait_ckpt_find_fn)(const void *ctx, const char *name);

typedef struct plait_ckpt_source {
    plait_value_source src;       /* pass &s.src */
    plait_ckpt_find_fn find;
    const void *find_ctx;
    const char *what;             /* "checkpoint DIR", for messages */
    const plait_model_spec *spec;
    const plait_param_set *local;
    const plait_ckpt *sharded; /* a sharded checkpoint: tensors `find` lacks come from its slices */
    /* The plan's second splits by global parameter index, or NULL: a slice
     * cut twice (tp × ep) is read as its first split's block, then cut
     * again. Set by the caller after init; borrowed. */
    const plait_shard *second;
} plait_ckpt_source;
void plait_ckpt_source_init(plait_ckpt_source *s, const plait_ckpt *ck, const plait_model_spec *spec,
                            const plait_param_set *local);
/* The same over tensors found by `find` (the images of an elastic job's
 * replicas: checkpoint/ckpt_image.h), `what` naming them in messages. */
void plait_ckpt_source_init_find(plait_ckpt_source *s, plait_ckpt_find_fn find, const void *ctx, const char *what,
                                 const plait_model_spec *spec, const plait_param_set *local);

/* ---- housekeeping ---------------------------------------------------------- */

/* Keep the newest `keep` complete checkpoints under out_dir, and beside
 * them every complete one whose step is a multiple of `keep_every` (> 0;
 * 0: none; llm.c's major checkpoints, [run] keep_every), and delete the
 * other older complete ones, plus incomplete or damaged ones older than the
 * newest complete one (crash leftovers). A checkpoint counts as complete
 * when its marker, state.json and file sizes check out
 * (plait_ckpt_check_quick): a damaged one is never kept in place of a good
 * one. Checkpoints newer than `newest` (the step just saved; -1 = no
 * limit), such as a damaged one a resume skipped, are neither counted nor
 * deleted, and `protect` (the step the run resumed from; -1 none) is never
 * deleted. Deletion removes the marker first, so a half-deleted checkpoint
 * is never taken for complete. Only real directories named ckpt-<digits>
 * holding plain files are touched, never through a link. keep <= 0: nothing. */
plait_status plait_ckpt_prune(const char *out_dir, int keep, int64_t keep_every, int64_t newest, int64_t protect);

/* Steps of the checkpoint directories under out_dir (complete or not),
 * ascending, with their completeness (marker present). Returns the count
 * (<= cap written); -1 if out_dir cannot be read. For tests and `plait`
 * tools. */
/* Refuse a checkpoint holding NaN or Inf (a diverged run's, or another
 * tool's): PLAIT_ERR_PROTOCOL naming the file, the tensor and the element.
 * Called before its values are used (resume, sample); plait_ckpt_open
 * itself accepts them so that tools can inspect such checkpoints. Reads
 * every tensor (pread, not the mapping). */
plait_status plait_ckpt_check_finite(const plait_ckpt *ck);

/* The [model] keys that define a model's shape, NULL-terminated: plait
 * train stores each in the model file's metadata as "plait.model.<key>"; a
 * resume must match every one and `plait sample` rebuilds the model from them.
 * A llama model records its own keys beside them (llama_hf.h,
 * plait_llama_ckpt_keys). */
extern const char *const plait_ckpt_model_keys[];
/* A mixture of experts' [model] keys, recorded (as plait.model.<key>)
 * only by a model with experts, so a dense checkpoint's metadata is as
 * before and `plait sample` rebuilds the sparse blocks. */
extern const char *const plait_ckpt_moe_keys[];
/* Of those, the keys that shape a mixture of experts or change what its
 * router's weights mean, NULL-terminated, moe_experts first: a resume and
 * [run] init_from of a plait checkpoint refuse a run that differs in one
 * (a checkpoint without plait.model.moe_experts is dense: 0). The others
 * (moe_top_k, the coefficients of the losses and of the bias, the
 * capacity) are how it trains on. */
extern const char *const plait_ckpt_moe_shape_keys[];

typedef struct plait_ckpt_entry {
    int64_t step;
    int has_marker;
} plait_ckpt_entry;
int plait_ckpt_list(const char *out_dir, plait_ckpt_entry *out, int cap);

/* What `dir` is to plait: "checkpoint directory" (it holds a checkpoint's
 * COMPLETE, state.json or optim.safetensors), "run directory" (.lock,
 * metrics.csv or a ckpt-* directory), else NULL. Commands that write into a
 * directory the user names refuse the first two. */
const char *plait_ckpt_dir_role(const char *dir);

#endif
