/*
 * Training data: a token file, memory-mapped, split into training and
 * validation parts, read as batches whose content depends only on the seed,
 * the step and the global position of each sequence in the step — never on
 * the rank that reads it or on how the global batch is cut into micro-batches.
 *
 * The data is one file or several (a list or glob of shards, read back to
 * back in the order given, each pattern's matches sorted), and optionally a
 * separate validation set ([data] val_path, the same syntax).
 *
 * File formats ([data] format), per file:
 *   text  every byte is one token (vocab 256 at most; a smaller vocab_size
 *         makes bytes >= vocab_size an error).
 *   bin   (also spelt u16) a token file (token_file.h): llm.c's format, a
 *         header of 256 little-endian int32 with the magic, version and token
 *         count, then uint16 tokens (magic 20240520, version 1) or uint32
 *         tokens (magic 20240801, version 7); or raw little-endian uint16 as
 *         nanoGPT's prepare.py writes them. The file size must match the
 *         header's count exactly; raw files must have an even size.
 *   auto  bin if the file name ends in ".bin", text otherwise.
 * Every token is checked against vocab_size once, at open.
 *
 * Split: with val_path, the validation split is those files and the training
 * split all of path's; without it, the last floor(n * val_fraction) tokens
 * are the validation split and the rest (the head) the training split.
 * Token indices below run over the training files then the validation
 * files; a training sequence may run across two training files. Each split in use must hold at
 * least seq_len + 1 tokens (a sequence plus its last target).
 *
 * Sampling. A step's global batch is a list of sequences numbered
 * g = 0, 1, 2, ...; micro-batch j of B rows holds sequences j*B .. j*B+B-1.
 * Sequence g of training step s starts at a position drawn uniformly from
 * [0, n_train - T - 1] by a counter-based hash of (seed, split, s, g)
 * (splitmix64 rounds; the range reduction is a 128-bit multiply-shift), so
 *   - any rank can produce any micro-batch without reading the others;
 *   - the same (seed, s, g) gives the same tokens whatever B, the number of
 *     micro-batches or the layout (a global batch of 8 read as 1×8, 2×4 or
 *     8×1 is the same 8 sequences);
 *   - resuming at step s needs no saved position: the data position *is* the
 *     step (checkpoints record it anyway, see checkpoint.h).
 * A blend ([data] weights): the training files form datasets, one a
 * pattern of [data] path (its matches, back to back); sequence g of step s
 * first picks dataset k with probability weight k / the weights' sum (an
 * independent hash of the same counter), then a start drawn uniformly
 * within that dataset's training tokens, so a sequence never runs from one
 * dataset into the next, and the stream keeps every property above. The
 * validation split is unchanged: val_path's files, or the tail of the
 * training files (from the last patterns' datasets: give val_path for a
 * validation set of every dataset). A dataset of weight 0 is never read.
 * Epochs ([data] sampling = epochs, Megatron-LM's samples): the training
 * split is cut into its W = (n_train - 1) / T windows of T + 1 tokens
 * (window w starts at token w·T, so consecutive windows share one token,
 * the last target of one being the first token of the next); sequence g of
 * step s is sample i = s · global_batch + g of the run, window
 * plait_epoch_window(seed, i, W) (train/epoch_order.h): every window once
 * an epoch, each epoch in a seeded order of its own, every property above
 * kept but the start's uniform draw. Not with a blend.
 * Skipped batches ([data] skip_batches, train/batch_skip.h): training
 * step s reads the batch of step plait_batch_skip_map(s) in all of the
 * above, the same on every rank.
 * Validation is a fixed set: sequence g of the validation split is window
 * (g mod W) of the W = (n_val - 1) / T consecutive, non-overlapping windows
 * starting at the split's first token, whatever the step. Every evaluation
 * therefore scores the same tokens ([run] eval_batches micro-batches cover
 * the first eval_batches*B*T validation tokens, in file order).
 *
 * Thread-safety: after open, every function is read-only and thread-safe.
 */
#ifndef PLAIT_CORE_TRAIN_DATA_H
#define PLAIT_CORE_TRAIN_DATA_H

#include <stdint.h>
#include <plait/types.h>

#include "config/config.h"

typedef enum plait_data_split {
    PLAIT_DATA_TRAIN = 0,
    PLAIT_DATA_VAL = 1
} plait_data_split;

typedef enum plait_data_format {
    PLAIT_DATA_FORMAT_AUTO = 0,
    PLAIT_DATA_FORMAT_TEXT = 1,
    PLAIT_DATA_FORMAT_U16 = 2,   /* for options: any token file ("bin") */
    PLAIT_DATA_FORMAT_U32 = 3    /* only reported: an llm.c uint32 file */
} plait_data_format;

typedef struct plait_data_options {
    const char *path;          /* the file to map when paths is NULL; relative to the CWD */
    const char *const *paths;  /* training files, in order (n_paths of them), or NULL */
    int n_paths;
    const char *const *val_paths; /* validation files (n_val_paths, may be 0) */
    int n_val_paths;
    plait_data_format format;
    double val_fraction;       /* share of tokens held out (the tail), 0 <= f < 1; unused with val_paths */
    int32_t vocab_size;        /* every token must be below it */
    int32_t seq_len;           /* T: each split in use must hold T+1 tokens */
    uint64_t seed;             /* [run] seed */
    /* a blend: the training files in n_sets consecutive groups of
     * set_files[k] files (summing to n_paths), dataset k drawn with
     * probability weights[k] / their sum; n_sets = 0: no blend */
    int n_sets;
    const int *set_files;
    const double *weights;
    /* [data] sampling = epochs (1; no blend): the training windows once an
     * epoch, sample g of step s being s * global_batch + g; 0 = random */
    int epochs;
    int64_t global_batch;
    /* [data] skip_batches: training batches never read (NULL = none; copied) */
    const struct plait_batch_skip *skip;
    /* [data] eod_mask_loss: a target whose input token is eod_token is
     * left out of the loss (-1 in the batch's targets) */
    int mask_eod;
    int32_t eod_token;
    /* a validation set alone ([data] val_sets): val_paths are every file,
     * paths and the options of training reads unused; TRAIN reads fail */
    int val_only;
} plait_data_options;

typedef struct plait_data plait_data;

/* Open and map `opts->path`, check the format and every token, compute the
 * split. Errors (message names the file and, for a bad token, its byte offset
 * and token index):
 *   PLAIT_ERR_SYSTEM         the file cannot be opened or mapped;
 *   PLAIT_ERR_PROTOCOL       malformed file (odd size, bad llm.c header,
 *                            size not matching the header, token >= vocab_size);
 *   PLAIT_ERR_INVALID_CONFIG a split too short for one sequence, bad options.
 * The caller owns *out (plait_data_close). */
plait_status plait_data_open(const plait_data_options *opts, plait_data **out);

/* The same with the options from the configuration: [data] path, val_path,
 * format, val_fraction, skip_batches, sampling (with `global_batch`, the sequences a
 * step as the run resolved them); [model] vocab_size, block_size; [run]
 * seed. path and
 * val_path are lists of files or glob patterns separated by commas or
 * spaces. A relative pattern that matches nothing in the CWD is also tried
 * relative to the directory of the config file and then to the plait source
 * tree (so the bundled data/corpus.txt is found from a build directory); the
 * error lists every place tried. */
plait_status plait_data_open_config(const plait_config *cfg, int64_t global_batch, plait_data **out);

/* One of [data] val_sets (val_sets.h): `pattern`'s files as a validation
 * split alone, with the configuration's format, vocab_size, block_size,
 * tokenizer and eod_mask_loss, found as val_path's are. Its VAL reads are
 * windows of its files as the run's validation split's are of its own;
 * `name` is for the messages. Errors as plait_data_open_config's. */
plait_status plait_data_open_val_set(const plait_config *cfg, const char *name, const char *pattern, plait_data **out);

/* Whether the files plait_data_open_config would open are there: [data]
 * tokenizer, path, val_path and val_sets found as it finds them (each pattern
 * matching a file), without reading them. PLAIT_ERR_INVALID_CONFIG with
 * its message ("no such file (tried ...)", an empty path) otherwise. For
 * a run to refuse before its run directory, and `plait config check` to
 * note. */
plait_status plait_data_check_files(const plait_config *cfg);

/* The most datasets a blend names. */
#define PLAIT_DATA_MAX_SETS 256

/* [data] weights against [data] path: PLAIT_OK when empty or one finite
 * number >= 0 per pattern of path (comma or space separated, as path's),
 * their sum above 0, at most PLAIT_DATA_MAX_SETS, and [data] sampling not
 * epochs; PLAIT_ERR_INVALID_CONFIG naming where the key was set
 * and what is wrong otherwise. `weights` (may be NULL) receives the values
 * (at most `cap`), *n their count (0 for no blend). Reads only the
 * configuration. */
plait_status plait_data_check_weights(const plait_config *cfg, double *weights, int cap, int *n);

/* The blend's datasets: how many (0 without [data] weights), and dataset
 * k's weight share and training tokens. */
int plait_data_sets(const plait_data *d);
double plait_data_set_share(const plait_data *d, int k);
int64_t plait_data_set_tokens(const plait_data *d, int k);

/* Under [data] sampling = epochs, the training windows an epoch reads; 0
 * under random sampling. */
int64_t plait_data_epoch_windows(const plait_data *d);

/* Unmap and free. NULL is ignored. */
void plait_data_close(plait_data *d);

/* [data] tokenizer as an absolute path ("" when unset or opened without a
 * config). plait_data_open_config loads it once and refuses one with more
 * ids than [model] vocab_size. */
const char *plait_data_tokenizer(const plait_data *d);
/* plait_tokenizer_fingerprint of that tokenizer (0 when none). */
uint64_t plait_data_tokenizer_fingerprint(const plait_data *d);

/* Facts of an open file. */
/* The path actually opened, or the first file's and "(+N more)". */
const char *plait_data_path(const plait_data *d);
plait_data_format plait_data_format_of(const plait_data *d); /* the first file's: TEXT, U16 or U32 */
int plait_data_has_llmc_header(const plait_data *d);         /* the first file's */
int64_t plait_data_tokens(const plait_data *d);             /* all tokens, both splits */
/* Tokens in a split (0 for VAL when val_fraction is 0). */
int64_t plait_data_split_tokens(const plait_data *d, plait_data_split split);
/* CRC32C of the training split's bytes (computed at open): with the token
 * counts, what identifies the training data in a checkpoint. */
uint32_t plait_data_train_crc32c(const plait_data *d);
/* Token `index` (0-based over the training then the validation files). */
int32_t plait_data_token(const plait_data *d, int64_t index);

/* Position (token index within the whole file) where sequence `sequence`
 * (the global index g in the step, see above) of `split` starts for `step`.
 * For VAL, `step` is ignored. Always in the split, with T+1 tokens after it
 * inside the split. */
int64_t plait_data_sequence_start(const plait_data *d, plait_data_split split, int64_t step,
                                  int64_t sequence);

/* Fill micro-batch `micro_batch` (global index j within step `step`) of B
 * sequences of T tokens: row r is sequence g = j*B + r; tokens[r*T + t] =
 * data[start + t], targets[r*T + t] = data[start + t + 1]. T must equal the
 * seq_len given at open or be smaller. `targets` may be NULL (tokens only).
 * With [data] eod_mask_loss a target whose token (the input before it) is
 * eod_token is -1: no loss there (Megatron-LM's --eod-mask-loss: nothing
 * predicts a document's first token from the end of the one before).
 * Fails with PLAIT_ERR_INVALID_ARG for B < 1, T out of range, negative step
 * or micro-batch, or a VAL read without a validation split. */
plait_status plait_data_batch(const plait_data *d, plait_data_split split, int64_t step,
                              int64_t micro_batch, int32_t B, int32_t T, int32_t *tokens,
                              int32_t *targets);

/* *count = the targets that count in the loss among sequences 0 .. n-1 of
 * `split` at `step`, T tokens each: n·T, less those whose input token is
 * the masked end-of-document token ([data] eod_mask_loss; none without
 * it). Fails only where a file changed under the run (as plait_data_batch). */
plait_status plait_data_step_targets(const plait_data *d, plait_data_split split, int64_t step, int64_t n, int32_t T,
                                     int64_t *count);

#endif
