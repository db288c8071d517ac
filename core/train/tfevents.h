/*
 * TensorBoard's event files ([run] tensorboard): each metrics.csv row also
 * as scalars, so `tensorboard --logdir runs/NAME` draws the run as it does
 * Megatron-LM's (--tensorboard-dir) and torchtitan's.
 *
 * The format, written here without TensorFlow or protobuf: a file of
 * records, each a little-endian uint64 length, the masked CRC32C of those
 * 8 bytes, the data, and the masked CRC32C of the data (masked: the CRC
 * rotated right by 15 bits plus 0xa282ead8). The data is an Event
 * protobuf: wall_time (field 1, double), step (2, varint), file_version (3,
 * "brain.Event:2", the first record) or summary (5), whose values (field 1)
 * each hold a tag (1, string) and a simple_value (2, float).
 *
 * One file a run start, events.out.tfevents.<seconds>.<host>.<pid>, in
 * <out_dir>/tensorboard, opened without following a link; a resumed run
 * writes a file of its own beside the earlier ones (TensorBoard reads them
 * all, and drops the steps a run trained again). Written by rank 0 alone.
 * Not thread-safe; each row is flushed, so a crash loses at most one.
 */
#ifndef PLAIT_CORE_TRAIN_TFEVENTS_H
#define PLAIT_CORE_TRAIN_TFEVENTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <plait/types.h>

typedef struct plait_tfevents {
    FILE *file;
    char path[4400];
} plait_tfevents;

/* Create <out_dir>/tensorboard when missing (something else in its place,
 * or a link, is an error naming it and what to do) and a new event file
 * in it, with its file_version record. PLAIT_ERR_INVALID_CONFIG for what is
 * in the way, PLAIT_ERR_SYSTEM naming the path and errno's text. */
plait_status plait_tfevents_open(plait_tfevents *t, const char *out_dir);

/* One record of the scalars `names[i]` = `values[i]` at `step`, written at
 * `wall_time` (seconds since the epoch; 0 = now) (NaN values
 * and a column named "step" are left out; nothing is written when none is
 * left), flushed. PLAIT_ERR_SYSTEM naming the file when it cannot be
 * written. */
plait_status plait_tfevents_scalars(plait_tfevents *t, int64_t step, double wall_time, int n, const char (*names)[32],
                                    const double *values);

/* Close the file (a closed or never opened one is ignored). */
void plait_tfevents_close(plait_tfevents *t);

/* The bytes of one Event record of a summary of scalars, for tests and
 * plait_tfevents_scalars: written into `out` (cap bytes), its length
 * returned (0 when it does not fit). */
size_t plait_tfevents_record(uint8_t *out, size_t cap, int64_t step, double wall_time, int n, const char (*names)[32],
                             const double *values);

#endif
