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
 * placeholder. Format 1 is still read (no data record: has_data = 0). */
#define PLAIT_CKPT_FORMAT_VERSION 2

/* Size and CRC32C of one tensor file, as the manifest records them. */
typedef struct plait_ckpt_file_fact {
    uint64_t bytes;
    uint32_t crc;
} plait_ckpt_file_fact;

/* state.json of `state` into `b` (the caller checks b->failed). facts[f] is
 * file f (PLAIT_CKPT_MODEL, PLAIT_CKPT_OPTIM); meta: n_meta key/value pairs. */
void plait_ckpt_state_render(plait_jbuf *b, const plait_ckpt_state *state, const plait_ckpt_file_fact facts[2],
                             char *const *meta_key, char *const *meta_val, size_t n_meta);

/* Parse and check the state.json text of checkpoint `dir`. On success
 * *doc owns the strings *state and *meta point into (free it with
 * plait_json_free, also on failure). Errors: PLAIT_ERR_PROTOCOL via
 * plait_ckpt_refuse. */
plait_status plait_ckpt_state_parse(const char *dir, const char *text, size_t len, plait_json_doc **doc,
                                    plait_ckpt_state *state, const plait_json **meta, plait_ckpt_file_fact facts[2]);

/* "checkpoint refused: <dir>/<file>: <message>" as PLAIT_ERR_PROTOCOL. */
plait_status plait_ckpt_refuse(const char *dir, const char *file, const char *fmt, ...) PLAIT_PRINTF(3, 4);

#endif
