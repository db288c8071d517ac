/* plait export CHECKPOINT --format hf|nanogpt --out DIR [--dtype fp32|bf16|fp16] */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint/weights_export.h"
#include "cli/cli.h"
#include "runtime/error.h"
#include "runtime/memory.h"
#include "tokenizer/tokenizer.h"

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plait export: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; 'plait help export' lists the options\n");
    return 2;
}

/* The recorded tokenizer's <|endoftext|> id and, for hf, its files. One
 * that no longer reads, or that was replaced since the run trained with it
 * (its ids would be other text), is said, and the export uses nothing of it. */
static void tokenizer_of(const char *path, const char *fingerprint, int files, void *ctx,
                         plait_export_tokenizer *out) {
    *(int *)ctx = 1; /* the run recorded a tokenizer */
    const char *without = files ? "config.json names no end-of-text token and no tokenizer files are written"
                                : "config.json names no end-of-text token";
    plait_tokenizer *t = NULL;
    if (plait_tokenizer_load(path, &t) != PLAIT_OK) {
        fprintf(stderr, "plait export: note: the run's tokenizer cannot be read (%s): %s\n", plait_last_error(),
                without);
        plait_clear_error();
        return;
    }
    char have[24];
    snprintf(have, sizeof have, "%016llx", (unsigned long long)plait_tokenizer_fingerprint(t));
    if (fingerprint && strcmp(have, fingerprint) != 0) {
        fprintf(stderr, "plait export: note: the tokenizer at %s has changed since this run trained with it "
                        "(fingerprint %s, recorded %s): %s\n", path, have, fingerprint, without);
    } else if (files && plait_tokenizer_gpt2_text(t, &out->vocab, &out->merges) != PLAIT_OK) {
        fprintf(stderr, "plait export: note: %s: %s\n", plait_last_error(), without);
        plait_clear_error();
    } else {
        out->eot = plait_tokenizer_eot(t);
    }
    plait_tokenizer_free(t);
}

static int cmd_export(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    const char *checkpoint = NULL, *format = NULL, *out = NULL, *dtype = "fp32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (checkpoint) return bad("give one checkpoint (got '%s' and '%s')", checkpoint, a);
            checkpoint = a;
            continue;
        }
        if (strcmp(a, "--format") != 0 && strcmp(a, "--out") != 0 && strcmp(a, "--dtype") != 0)
            return bad("unknown option '%s'", a);
        if (i + 1 >= argc) return bad("%s needs a value", a);
        *(strcmp(a, "--format") == 0 ? &format : strcmp(a, "--out") == 0 ? &out : &dtype) = argv[++i];
    }
    /* PyTorch's names too, as torchtitan's export_dtype takes them */
    const plait_st_dtype d = !strcmp(dtype, "bf16") || !strcmp(dtype, "bfloat16")  ? PLAIT_ST_BF16
                             : !strcmp(dtype, "fp16") || !strcmp(dtype, "float16") ? PLAIT_ST_F16
                                                                                   : PLAIT_ST_F32;
    if (d == PLAIT_ST_F32 && strcmp(dtype, "fp32") != 0 && strcmp(dtype, "float32") != 0)
        return bad("--dtype %s: must be fp32 (the checkpoint's exact values), bf16 or fp16 (each weight rounded to "
                   "nearest, half the bytes)",
                   dtype);
    if (!checkpoint) return bad("give a checkpoint directory (runs/NAME/ckpt-<step>, or runs/NAME for its latest)");
    if (!format) return bad("give --format hf or --format nanogpt");
    if (strcmp(format, "hf") != 0 && strcmp(format, "nanogpt") != 0)
        return bad("--format %s: must be hf (Hugging Face GPT2LMHeadModel, or LlamaForCausalLM for a llama) or "
                   "nanogpt (GPT only)", format);
    if (!out || !*out) return bad("give --out DIR");
    char used[4096];
    plait_export_format f = strcmp(format, "hf") == 0 ? PLAIT_EXPORT_HF : PLAIT_EXPORT_NANOGPT;
    int recorded = 0, tok_files = 0;
    const char *what = "";
    plait_export_memory mem;
    if (plait_weights_export(checkpoint, f, d, out, tokenizer_of, &recorded, used, sizeof used, &tok_files, &what,
                             &mem) != PLAIT_OK) {
        plait_cli_print_error("export");
        return 1;
    }
    printf("exported %s as %s in %s: %s/model.safetensors, %s/config.json", used, what,
           d == PLAIT_ST_BF16  ? "bfloat16"
           : d == PLAIT_ST_F16 ? "float16"
                               : "float32",
           out, out);
    if (tok_files > 0) printf(", the run's tokenizer as %s/vocab.json, merges.txt, tokenizer_config.json", out);
    printf("\n");
    /* the streaming's evidence: one tensor at a time, never the model */
    printf("memory: at most %llu bytes of tensors held at once, of the model's %llu; peak resident set %llu bytes\n",
           (unsigned long long)mem.largest_held, (unsigned long long)mem.model_bytes,
           (unsigned long long)plait_peak_rss());
    if (f == PLAIT_EXPORT_HF && tok_files <= 0) {
        /* an earlier export's or a hand-placed tokenizer is kept, but it may
         * not be this model's: say so rather than let it load silently */
        char p[4200];
        snprintf(p, sizeof p, "%s/vocab.json", out);
        if (access(p, F_OK) == 0)
            printf("note: no tokenizer written; the vocab.json and merges.txt already in %s are left as they were: "
                   "check they are this model's tokenizer\n", out);
        else if (tok_files < 0)
            printf("note: no tokenizer written: the run recorded none and its model's ids are bytes (a byte-level "
                   "model); no Hugging Face tokenizer file describes that: encode text as its UTF-8 bytes "
                   "(ids 0-255) and decode ids back to bytes\n");
        else if (!recorded) /* one recorded but unusable was said already */
            printf("note: no tokenizer written (the run recorded none: its tokens are taken as GPT-2's); for "
                   "AutoTokenizer.from_pretrained(%s) put GPT-2's vocab.json and merges.txt there\n", out);
    }
    return 0;
}

const plait_command plait_cmd_export = {
    "export", "write a checkpoint's model for Hugging Face transformers or nanoGPT",
    "usage: plait export CHECKPOINT --format hf|nanogpt --out DIR [--dtype fp32|bf16|fp16]\n\n"
    "CHECKPOINT is a checkpoint directory (runs/NAME/ckpt-<step>) or a run directory (its latest\n"
    "complete checkpoint). Writes DIR/model.safetensors and DIR/config.json, each atomically:\n"
    "  --format hf       GPT2LMHeadModel layout (Conv1D weights [in, out], tied lm_head omitted) and\n"
    "                    its config.json: GPT2LMHeadModel.from_pretrained(DIR) loads it; the run's\n"
    "                    tokenizer ([data] tokenizer) as vocab.json, merges.txt and tokenizer_config.json\n"
    "                    for AutoTokenizer.from_pretrained(DIR)\n"
    "                    (a llama: LlamaForCausalLM's names and config.json, lm_head left out when tied)\n"
    "  --format nanogpt  nanoGPT's state dict (nn.Linear weights, lm_head.weight included) and its\n"
    "                    GPTConfig fields in config.json (no tokenizer: nanoGPT encodes with tiktoken)\n"
    "  --out DIR         created if missing (its parent must exist); other files in it are kept\n"
    "  --dtype T         fp32 (default: the checkpoint's exact values), bf16 or fp16 (bfloat16, float16\n"
    "                    also taken): each weight rounded to nearest, ties to even, in half the bytes;\n"
    "                    config.json's torch_dtype says which. fp16 refuses a weight past 65504\n"
    "Weights only; [run] init_from reads both layouts back, in each dtype.\n",
    cmd_export};
