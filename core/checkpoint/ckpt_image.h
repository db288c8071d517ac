/*
 * A checkpoint shard as one block of memory: the image an elastic job keeps
 * of one pipeline stage's part of a checkpoint in its launchers' memory
 * (docs/multi-node.md "Recovery from memory"). It holds exactly what a
 * checkpoint directory holds for that stage's parameters (full float32
 * tensors under their global names, optimizer state as
 * "optim.<state>.<name>") and the run state, so a restarted job of any dp
 * reads it as it reads a checkpoint (plait_ckpt_source over its tensors).
 * The same layout also holds named 1-D tensors instead of a stage's: one
 * rank's kept buffers (plait_ckpt_image_begin_tensors).
 *
 * Layout (little-endian, every offset from the image's start):
 *   header       magic "PLAITIMG", version, the run state (step, seed,
 *                optimizer step, training data), the stage and the number
 *                of stages, the layout that wrote it, the tensor count,
 *                the names' and data's offsets, total bytes, and CRC32C of
 *                the whole image computed with that field zero
 *   entries      per tensor: name offset and length, ndim, shape, data
 *                offset, element count
 *   names        the tensor names, back to back (no terminator)
 *   data         the tensors' float32 elements, each 64-byte aligned
 * The size is a function of the model, the optimizer's state names and the
 * stage alone, so the rank receiving a peer's image knows its size.
 *
 * Pure functions over caller-owned memory; thread-safe. The reader trusts
 * nothing: every offset and count is checked against the image's size
 * before use (fuzz/fuzz_ckpt_image.c).
 */
#ifndef PLAIT_CORE_CHECKPOINT_CKPT_IMAGE_H
#define PLAIT_CORE_CHECKPOINT_CKPT_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include <plait/model.h>

#include "checkpoint/checkpoint.h"

/* The run state an image carries (a checkpoint's state.json). */
typedef struct plait_ckpt_image_state {
    int64_t step, optim_step;
    uint64_t seed;
    int64_t data_tokens, data_train_tokens;
    uint32_t data_train_crc32c;
    int32_t stage, stages;   /* which pipeline stage's tensors, of how many */
    int32_t dp, tp, pp;      /* the layout that wrote it (informational) */
} plait_ckpt_image_state;

/* The tensors of `stage` in an image: every stored parameter g with
 * stage_of[g] == stage (tied copies are their original's), in global order,
 * the parameter then each of `state_names` (NULL-terminated, may be NULL). */
size_t plait_ckpt_image_size(const plait_model_spec *spec, const char *const *state_names, const int32_t *stage_of,
                             int32_t stage);

/* Lay out an image in `buf` (exactly plait_ckpt_image_size bytes, zeroed
 * or not): header and entries; the data is written afterwards through
 * plait_ckpt_image_slot, then plait_ckpt_image_seal. */
plait_status plait_ckpt_image_begin(void *buf, size_t bytes, const plait_ckpt_image_state *state,
                                    const plait_model_spec *spec, const char *const *state_names,
                                    const int32_t *stage_of);
/* Where the elements of parameter g's tensor `which` ("param" or a state
 * name) go: the full global tensor, numel floats. NULL if the image has
 * no such tensor. */
float *plait_ckpt_image_slot(void *buf, const plait_model_spec *spec, int32_t g, const char *which);

/* An image of named 1-D tensors instead of a stage's parameters: one rank's
 * kept buffers (train/run_kept.h), which an elastic job's launcher keeps
 * beside the stages' images. The same layout and reader. */
typedef struct plait_ckpt_image_tensors {
    size_t n;
    const char *const *names;
    const size_t *counts; /* floats of each */
} plait_ckpt_image_tensors;
size_t plait_ckpt_image_tensors_size(const plait_ckpt_image_tensors *t);
plait_status plait_ckpt_image_begin_tensors(void *buf, size_t bytes, const plait_ckpt_image_state *state,
                                            const plait_ckpt_image_tensors *t);
/* Where the elements of tensor `name` go; NULL if the image has none. */
float *plait_ckpt_image_slot_named(void *buf, const char *name);
/* Compute and store the image's CRC32C (after every slot is written);
 * returns it. */
uint32_t plait_ckpt_image_seal(void *buf);

/* A parsed image: its state and its tensors (pointing into the image). */
typedef struct plait_ckpt_image {
    plait_ckpt_image_state state;
    uint32_t crc;
    size_t n;
    plait_st_tensor *tensors; /* malloc'd; names and data point into the image */
    char *names;              /* malloc'd, NUL-terminated copies of the names */
} plait_ckpt_image;

/* Parse and check an image of `bytes` bytes: PLAIT_ERR_PROTOCOL naming what
 * is wrong (`what` says which image) for anything malformed, and with
 * `verify` for a CRC32C that does not match its contents. The image must
 * stay mapped while `out` is used; free with plait_ckpt_image_free. */
plait_status plait_ckpt_image_open(const void *buf, size_t bytes, int verify, const char *what,
                                   plait_ckpt_image *out);
void plait_ckpt_image_free(plait_ckpt_image *img);
/* Tensor `name` of the image, or NULL. */
const plait_st_tensor *plait_ckpt_image_find(const plait_ckpt_image *img, const char *name);

#endif
