/*
 * Text generation from a checkpoint (`plait sample`): rebuilds the model from
 * the [model] keys stored in the checkpoint, loads its weights on one process
 * and samples tokens one at a time (temperature, top-k, top-p, seed; temperature 0
 * is greedy argmax decoding). Each new token runs the model over the last
 * block_size tokens of the context (no key/value cache: the models plait
 * trains here are small enough that this costs milliseconds).
 *
 * Not thread-safe: it sets the process's math threads; the CLI calls it
 * once from its main thread.
 */
#ifndef PLAIT_CORE_SAMPLE_H
#define PLAIT_CORE_SAMPLE_H

#include <stdint.h>
#include <stdio.h>

#include <plait/types.h>

/* The prompt when none is given: the start of an English sentence, which
 * every text model trained here can continue (an empty one would start at
 * a line break, and a model of an indented text then writes spaces). */
#define PLAIT_SAMPLE_DEFAULT_PROMPT "The"

typedef struct plait_sample_options {
    const char *checkpoint;  /* a ckpt-<step> directory, or a run directory (its latest checkpoint) */
    const char *prompt;      /* text when there is a tokenizer or the vocab is 256, else space-separated ids;
                                NULL = PLAIT_SAMPLE_DEFAULT_PROMPT, said on stderr */
    const char *tokenizer;   /* overrides the checkpoint's plait.data.tokenizer (NULL = use it) */
    int64_t tokens;          /* how many to generate */
    double temperature;      /* 0 = argmax */
    int32_t top_k;           /* 0 = all */
    double top_p;            /* nucleus: the most likely tokens holding this share of the mass, after
                                top_k (0 < top_p <= 1; 1 = all) */
    uint64_t seed;
    /* Where and how it computes, as `plait train` chooses: the run's config
     * file (NULL = none), then PLAIT_* variables, then the overrides
     * (section.key=value; callers keep them to [device], [device.*] and
     * [run]). Only [device] (plugin, ordinal, its plugin's keys) and [run]
     * (precision, deterministic, log_level) are used; the model is the
     * checkpoint's, whatever the file's [model] says. */
    const char *config;
    int n_overrides;
    char *const *overrides;
} plait_sample_options;

/* Generate and write the prompt followed by the new tokens to `out`. With a
 * tokenizer (--tokenizer, or the one the run was trained with, recorded in
 * the checkpoint from [data] tokenizer) the prompt is encoded with it, the
 * output decoded, and only its ids are sampled (a padded vocabulary's extra
 * ids never are); without one, text is bytes when the vocabulary is 256 and
 * token ids otherwise. No prompt (NULL) is PLAIT_SAMPLE_DEFAULT_PROMPT,
 * which a line on stderr names; an empty one starts from <|endoftext|> when
 * the tokenizer has it (a newline without a tokenizer). A tokenizer whose
 * tokenizer.json post-processor puts a token first (plait_tokenizer_bos,
 * Llama 3's <|begin_of_text|>) has it before every prompt, an empty one
 * too, as Hugging Face encodes a prompt. With a vocabulary
 * of token ids and no tokenizer there is no default text: NULL is an empty
 * prompt. */
plait_status plait_sample(const plait_sample_options *opts, FILE *out);

#endif
