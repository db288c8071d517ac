/* plait sample CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
 *              [--tokenizer DIR] [--config FILE] [device.* / run.* overrides] */
#include <stdarg.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/sample.h"

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plait sample: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; 'plait help sample' lists the options\n");
    return 2;
}

static int known_option(const char *a) {
    static const char *const options[] = {"--prompt", "--tokens", "--temperature", "--top-k",
                                          "--top-p",  "--seed",   "--tokenizer",   "--config"};
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++)
        if (!strcmp(a, options[i])) return 1;
    return 0;
}

/* A section.key=value override sample uses: [device], [device.<plugin>]
 * and [run]; the model is the checkpoint's. 0 = refused (printed). */
static int sample_override(const char *a) {
    size_t n = strcspn(a, ".=");
    if (a[n] != '.') return bad("'%s': expected section.key=value (device.plugin=cuda, run.precision=bf16)", a), 0;
    if ((n == 6 && !strncmp(a, "device", 6)) || (n == 3 && !strncmp(a, "run", 3))) return 1;
    if (n == 5 && !strncmp(a, "model", 5))
        return bad("'%s': the model is the checkpoint's; sample's settings choose where and how it computes "
                   "([device], [run] precision)", a), 0;
    return bad("'%s': sample uses [device] and [run] settings only (device.plugin, device.ordinal, run.precision)",
               a), 0;
}

/* The command line into `o` (overrides collected in `over`, argc long);
 * 0, or 2 after printing a usage error. */
static int sample_args(int argc, char **argv, plait_sample_options *o, char **over) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (a[0] != '-' && strchr(a, '=')) {
            if (!sample_override(a)) return 2;
            over[o->n_overrides++] = argv[i];
            continue;
        }
        if (a[0] != '-') {
            if (o->checkpoint) return bad("give one checkpoint");
            o->checkpoint = a;
            continue;
        }
        if (!known_option(a)) return bad("unknown option '%s'", a);
        if (!v) return bad("%s needs a value", a);
        i++;
        if (!strcmp(a, "--prompt")) {
            o->prompt = v;
        } else if (!strcmp(a, "--config")) {
            o->config = v;
        } else if (!strcmp(a, "--tokenizer")) {
            o->tokenizer = v;
        } else if (!strcmp(a, "--tokens")) {
            o->tokens = strtoll(v, &end, 10);
            if (!*v || *end || o->tokens < 0 || o->tokens > 1000000) return bad("--tokens %s: must be 0..1000000", v);
        } else if (!strcmp(a, "--temperature")) {
            o->temperature = strtod(v, &end);
            if (!*v || *end || !(o->temperature >= 0) || o->temperature > 100)
                return bad("--temperature %s: must be 0..100", v);
        } else if (!strcmp(a, "--top-k")) {
            long k = strtol(v, &end, 10);
            if (!*v || *end || k < 0 || k > 1 << 30) return bad("--top-k %s: must be 0 (all) .. %d", v, 1 << 30);
            o->top_k = (int32_t)k;
        } else if (!strcmp(a, "--top-p")) {
            o->top_p = strtod(v, &end);
            if (!*v || *end || !(o->top_p > 0 && o->top_p <= 1))
                return bad("--top-p %s: must be above 0 and at most 1 (1 = every token)", v);
        } else if (!strcmp(a, "--seed")) {
            errno = 0;
            o->seed = strtoull(v, &end, 10);
            if (!*v || *end || v[0] == '-' || errno == ERANGE)
                return bad("--seed %s: must be an integer from 0 to 18446744073709551615", v);
        }
    }
    if (!o->checkpoint) return bad("give a checkpoint directory (runs/NAME/ckpt-<step>, or runs/NAME for its latest)");
    o->overrides = over;
    return 0;
}

static int cmd_sample(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    plait_sample_options o = {.prompt = NULL, .tokens = 200, .temperature = 0.8, .top_k = 0, .top_p = 1, .seed = 1};
    char **over = calloc((size_t)argc + 1, sizeof *over);
    if (!over) return bad("out of memory");
    int rc = sample_args(argc, argv, &o, over);
    if (rc == 0 && plait_sample(&o, stdout) != PLAIT_OK) {
        plait_cli_print_error("sample");
        rc = 1;
    }
    free(over);
    return rc;
}
const plait_command plait_cmd_sample = {
    "sample", "generate text from a checkpoint",
    "usage: plait sample CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                    [--seed S] [--tokenizer DIR] [--config FILE] [section.key=value ...]\n\n"
    "CHECKPOINT is a checkpoint directory (runs/NAME/ckpt-<step>) or a run directory (its latest\n"
    "complete checkpoint). The model is rebuilt from the checkpoint alone, on one process; where it\n"
    "computes is chosen as for plait train: [device] plugin and ordinal, [run] precision, from\n"
    "--config (the run's config file; its [model] is ignored: the checkpoint's is used), PLAIT_*\n"
    "variables (PLAIT_DEVICE_PLUGIN=cuda) and device.* / run.* overrides, later ones winning.\n"
    "On a terminal, control characters of the text are shown as \\xNN; piped, bytes are written as they are.\n"
    "  --prompt TEXT        start of the text, encoded with the run's tokenizer (without one: bytes,\n"
    "                       or token ids for vocabularies larger than 256); default \"" PLAIT_SAMPLE_DEFAULT_PROMPT
    "\"\n"
    "                       (said on stderr); '' starts from <|endoftext|>, or a line break; a\n"
    "                       tokenizer.json whose post-processor puts a token first (Llama 3's\n"
    "                       <|begin_of_text|>) has it before every prompt, '' too\n"
    "  --tokenizer DIR      the tokenizer to encode and decode with (default: the one [data] tokenizer\n"
    "                       named when the run was trained, recorded in the checkpoint)\n"
    "  --tokens N           tokens to generate (default 200)\n"
    "  --temperature T      softmax temperature (default 0.8); 0 = greedy (argmax) decoding\n"
    "  --top-k K            sample among the K most likely tokens only (default 0 = all)\n"
    "  --top-p P            then among the most likely tokens holding the share P of the probability\n"
    "                       (nucleus sampling, 0 < P <= 1; default 1 = all)\n"
    "  --seed S             sampling seed (default 1): same seed, same text\n"
    "  --config FILE        the run's config: its [device] and [run] choose the device and precision\n"
    "  section.key=value    [device] or [run] settings, e.g. device.plugin=cuda run.precision=bf16\n",
    cmd_sample};
