/* plait export CHECKPOINT --format hf|nanogpt --out DIR */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint/weights_export.h"
#include "cli/cli.h"
#include "runtime/error.h"
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

/* The recorded tokenizer's <|endoftext|> id; a tokenizer that no longer
 * reads is said, and the export names no such token. */
static long long eot_of(const char *tokenizer, void *ctx) {
    (void)ctx;
    plait_tokenizer *t = NULL;
    if (plait_tokenizer_load(tokenizer, &t) != PLAIT_OK) {
        fprintf(stderr, "plait export: note: the run's tokenizer cannot be read (%s): config.json names no "
                        "end-of-text token\n", plait_last_error());
        plait_clear_error();
        return -1;
    }
    long long id = plait_tokenizer_eot(t);
    plait_tokenizer_free(t);
    return id >= 0 ? id : -1;
}

static int cmd_export(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    const char *checkpoint = NULL, *format = NULL, *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-') {
            if (checkpoint) return bad("give one checkpoint (got '%s' and '%s')", checkpoint, a);
            checkpoint = a;
            continue;
        }
        if (strcmp(a, "--format") != 0 && strcmp(a, "--out") != 0) return bad("unknown option '%s'", a);
        if (i + 1 >= argc) return bad("%s needs a value", a);
        *(strcmp(a, "--format") == 0 ? &format : &out) = argv[++i];
    }
    if (!checkpoint) return bad("give a checkpoint directory (runs/NAME/ckpt-<step>, or runs/NAME for its latest)");
    if (!format) return bad("give --format hf or --format nanogpt");
    if (strcmp(format, "hf") != 0 && strcmp(format, "nanogpt") != 0)
        return bad("--format %s: must be hf (Hugging Face GPT2LMHeadModel) or nanogpt", format);
    if (!out || !*out) return bad("give --out DIR");
    char used[4096];
    plait_export_format f = strcmp(format, "hf") == 0 ? PLAIT_EXPORT_HF : PLAIT_EXPORT_NANOGPT;
    if (plait_weights_export(checkpoint, f, out, eot_of, NULL, used, sizeof used) != PLAIT_OK) {
        plait_cli_print_error("export");
        return 1;
    }
    printf("exported %s as %s: %s/model.safetensors, %s/config.json\n", used,
           f == PLAIT_EXPORT_HF ? "Hugging Face GPT2LMHeadModel" : "nanoGPT", out, out);
    return 0;
}

const plait_command plait_cmd_export = {
    "export", "write a checkpoint's model for Hugging Face transformers or nanoGPT",
    "usage: plait export CHECKPOINT --format hf|nanogpt --out DIR\n\n"
    "CHECKPOINT is a checkpoint directory (runs/NAME/ckpt-<step>) or a run directory (its latest\n"
    "complete checkpoint). Writes DIR/model.safetensors and DIR/config.json, each atomically:\n"
    "  --format hf       GPT2LMHeadModel layout (Conv1D weights [in, out], tied lm_head omitted) and\n"
    "                    its config.json: GPT2LMHeadModel.from_pretrained(DIR) loads it\n"
    "  --format nanogpt  nanoGPT's state dict (nn.Linear weights, lm_head.weight included) and its\n"
    "                    GPTConfig fields in config.json\n"
    "  --out DIR         created if missing (its parent must exist); other files in it are kept\n"
    "Weights only (float32, the checkpoint's exact values); [run] init_from reads both layouts back.\n",
    cmd_export};
