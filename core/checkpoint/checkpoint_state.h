/*
 * state.json of a checkpoint (its format is in checkpoint.h): the run state,
 * the manifest of the two tensor files and the free-form meta, rendered and
 * parsed strictly. Internal to the checkpoint module.
 *
 * Thread-safety: pure functions over caller-owned structs and buffers (no
 * shared state); safe from any thread.
 */
#ifndef PLAIT_CORE_CHECKPOINT_STATE_H
#define PLAIT_CORE_CHECKPOINT_STATE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_json.h"

#define PLAIT_CKPT_FORMAT_NAME "plait-checkpoint"
/* 2: "data" (the training data's identity) replaced format 1's "rng_state"
 * placeholder. Format 1 is still read (no data record: has_data = 0).
 * 3: "files" may list more files than the two tensor files (a sharded
 * checkpoint's index.json and shard files); written only by a sharded
 * save, so a gathered checkpoint stays readable by a plait that knows 2. */
#define PLAIT_CKPT_FORMAT_VERSION 3

/* Size and CRC32C of one tensor file, as the manifest records them. */
typedef struct plait_ckpt_file_fact {
    uint64_t bytes;
    uint32_t crc;
} plait_ckpt_file_fact;

/* Files of the manifest beyond the two tensor files: n names and facts. */
typedef struct plait_ckpt_extra_files {
    size_t n;
    char *const *name;
    const plait_ckpt_file_fact *fact;
} plait_ckpt_extra_files;

/* state.json of `state` into `b` (the caller checks b->failed). facts[f] is
 * file f (PLAIT_CKPT_MODEL, PLAIT_CKPT_OPTIM); `extra` (format 3 when it
 * lists any); meta: n_meta key/value pairs. */
void plait_ckpt_state_render(plait_jbuf *b, const plait_ckpt_state *state, const plait_ckpt_file_fact facts[2],
                             const plait_ckpt_extra_files *extra, char *const *meta_key, char *const *meta_val,
                             size_t n_meta);

/* Extra file i (0-based, beyond the two tensor files) of a parsed
 * state.json's manifest: 1 with *name (owned by doc) and *fact, 0 past the
 * last. The parse checked every entry. */
int plait_ckpt_state_extra_file(const plait_json_doc *doc, size_t i, const char **name, plait_ckpt_file_fact *fact);

/* Parse and check the state.json text of checkpoint `dir`. On success
 * *doc owns the strings *state and *meta point into (free it with
 * plait_json_free, also on failure). Errors: PLAIT_ERR_PROTOCOL via
 * plait_ckpt_refuse. */
plait_status plait_ckpt_state_parse(const char *dir, const char *text, size_t len, plait_json_doc **doc,
                                    plait_ckpt_state *state, const plait_json **meta, plait_ckpt_file_fact facts[2]);

/* "checkpoint refused: <dir>/<file>: <message>" as PLAIT_ERR_PROTOCOL. */
plait_status plait_ckpt_refuse(const char *dir, const char *file, const char *fmt, ...) PLAIT_PRINTF(3, 4);

#endif
