/* plait data prepare INPUT... --tokenizer DIR --out DIR [--val-fraction F] [--shard-tokens N] [--dtype D]
 * [--format F] [--json-key KEY] [--workers N]; INPUT - is stdin */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "runtime/error.h"
#include "runtime/phase.h"
#include "runtime/scratch_dir.h"
#include "train/data_prepare.h"

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plait data: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; 'plait help data' lists the options\n");
    return 2;
}

/* The bar (runtime/phase.h: in place on a terminal, plain lines now and
 * then when piped, and a closing line). */
static void progress(void *ctx, uint64_t done, uint64_t total, int64_t tokens) {
    plait_phase *p = ctx;
    if (done < total && !plait_phase_due(p)) return;
    double t = plait_phase_elapsed(p);
    double frac = total ? (double)done / (double)total : 1;
    double rate = t > 0 ? (double)done / t / 1e6 : 0;
    char cells[31];
    int filled = (int)(frac * 30);
    for (int i = 0; i < 30; i++) cells[i] = i < filled ? '#' : '.';
    cells[30] = '\0';
    if (done < total)
        plait_phase_report(p, "prepare [%s] %5.1f%%  %.1f/%.1f MB  %lld tokens  %.2f MB/s", cells, 100 * frac,
                           (double)done / 1e6, (double)total / 1e6, (long long)tokens, rate);
    else
        plait_phase_end(p, "prepare [%s] %5.1f%%  %.1f/%.1f MB  %lld tokens  %.2f MB/s", cells, 100 * frac,
                        (double)done / 1e6, (double)total / 1e6, (long long)tokens, rate);
}

/* "-": standard input, copied to a file in a scratch directory first
 * (the validation cut needs the input's length, and the encoder maps its
 * input), so that a compressed corpus is prepared through a pipe
 * (`zstdcat x.jsonl.zst | plait data prepare - --format jsonl ...`). */
static plait_status spool_stdin(char *dir, size_t dcap, char *path, size_t pcap) {
    if (isatty(STDIN_FILENO))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "- reads the input from stdin, which is a terminal: pipe the "
                                                      "text in (cat, zstdcat, zcat ...) or name a file");
    plait_status st = plait_scratch_dir_make("plait-prepare", dir, dcap);
    if (st != PLAIT_OK) return st;
    snprintf(path, pcap, "%s/stdin", dir);
    FILE *f = fopen(path, "wbx");
    if (!f) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", path, strerror(errno));
    char buf[1 << 16];
    ssize_t got;
    while ((got = read(STDIN_FILENO, buf, sizeof buf)) > 0 || (got < 0 && errno == EINTR))
        if (got > 0 && fwrite(buf, 1, (size_t)got, f) != (size_t)got) break;
    int failed = got != 0 || ferror(f);
    int saved = errno;
    if (fclose(f) != 0 && !failed) failed = 1, saved = errno;
    if (failed) return plait_set_error(PLAIT_ERR_SYSTEM, "copying stdin to %s: %s", path, strerror(saved));
    return PLAIT_OK;
}

static int cmd_prepare(int argc, char **argv) {
    const char *tok_dir = NULL, *out = NULL, *json_key = NULL;
    int format = 0, stdin_at = -1;
    long long workers = 0;
    double val = 0.1;
    long long shard = 100000000;
    int dtype = 0, n = 0;
    const char **inputs = calloc((size_t)argc, sizeof *inputs);
    if (!inputs) return 1;
    int rc = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (a[0] != '-' || !a[1]) {
            if (!strcmp(a, "-") && stdin_at >= 0) rc = bad("- (stdin) may be given once");
            if (!strcmp(a, "-")) stdin_at = n;
            inputs[n++] = a;
            continue;
        }
        if (strcmp(a, "--tokenizer") && strcmp(a, "--out") && strcmp(a, "--val-fraction") &&
            strcmp(a, "--shard-tokens") && strcmp(a, "--dtype") && strcmp(a, "--json-key") && strcmp(a, "--format") &&
            strcmp(a, "--workers")) {
            rc = bad("unknown option '%s'", a);
            break;
        }
        if (!v) {
            rc = bad("%s needs a value", a);
            break;
        }
        i++;
        if (!strcmp(a, "--tokenizer")) tok_dir = v;
        else if (!strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--json-key")) json_key = v;
        else if (!strcmp(a, "--workers")) {
            workers = strtoll(v, &end, 10);
            if (!*v || *end || workers < 0 || workers > PLAIT_PREPARE_MAX_WORKERS)
                rc = bad("--workers %s: must be 0 (the cores) .. %d", v, PLAIT_PREPARE_MAX_WORKERS);
        } else if (!strcmp(a, "--format")) {
            format = !strcmp(v, "text")    ? PLAIT_PREPARE_TEXT
                     : !strcmp(v, "jsonl") ? PLAIT_PREPARE_JSONL
                     : !strcmp(v, "auto")  ? 0
                                           : -1;
            if (format < 0) rc = bad("--format %s: must be auto, text or jsonl", v);
        } else if (!strcmp(a, "--val-fraction")) {
            val = strtod(v, &end);
            if (!*v || *end || !(val >= 0 && val < 1)) rc = bad("--val-fraction %s: must be 0 <= F < 1", v);
        } else if (!strcmp(a, "--shard-tokens")) {
            shard = strtoll(v, &end, 10);
            if (!*v || *end || shard < 1 || shard > 2147483647LL) rc = bad("--shard-tokens %s: must be 1..2147483647", v);
        } else {
            dtype = !strcmp(v, "u16") ? 2 : !strcmp(v, "u32") ? 4 : !strcmp(v, "auto") ? 0 : -1;
            if (dtype < 0) rc = bad("--dtype %s: must be auto, u16 or u32", v);
        }
    }
    if (!rc && (!n || !tok_dir || !out)) rc = bad("prepare needs INPUT..., --tokenizer DIR and --out DIR");
    if (rc) {
        free(inputs);
        return rc;
    }
    plait_tokenizer *tok = NULL;
    char spool_dir[PATH_MAX] = "", spooled[PATH_MAX + 16];
    plait_status st = stdin_at >= 0 ? spool_stdin(spool_dir, sizeof spool_dir, spooled, sizeof spooled) : PLAIT_OK;
    if (stdin_at >= 0 && st == PLAIT_OK) inputs[stdin_at] = spooled;
    if (st == PLAIT_OK) st = plait_tokenizer_load(tok_dir, &tok);
    plait_phase bar;
    plait_phase_begin(&bar, stderr, -1);
    plait_prepare_options o = {.inputs = inputs,
                               .n_inputs = n,
                               .tokenizer = tok,
                               .out_dir = out,
                               .val_fraction = val,
                               .shard_tokens = shard,
                               .dtype_bytes = dtype,
                               .json_key = json_key,
                               .format = format,
                               .workers = (int)workers,
                               .progress = progress,
                               .ctx = &bar};
    plait_prepare_result r;
    if (st == PLAIT_OK) st = plait_data_prepare(&o, &r);
    if (st == PLAIT_OK) {
        int64_t tokens = r.train_tokens + r.val_tokens;
        printf("wrote %s: %lld training tokens in %d shard%s, %lld validation tokens in %d shard%s (uint%d); "
               "%llu bytes of text, %.2f bytes per token\n",
               out, (long long)r.train_tokens, r.train_shards, r.train_shards == 1 ? "" : "s", (long long)r.val_tokens,
               r.val_shards, r.val_shards == 1 ? "" : "s", 8 * r.dtype_bytes, (unsigned long long)r.bytes,
               tokens ? (double)r.bytes / (double)tokens : 0.0);
    }
    plait_tokenizer_free(tok);
    free(inputs);
    if (spool_dir[0]) (void)plait_scratch_dir_remove(spool_dir);
    if (st != PLAIT_OK) {
        plait_cli_print_error("data prepare");
        return 1;
    }
    return 0;
}

static int cmd_data(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc < 2) return bad("give a subcommand: prepare");
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc - 1, argv + 1);
    return bad("no subcommand '%s'", argv[1]);
}

const plait_command plait_cmd_data = {
    "data", "tokenize text into token files for training",
    "usage: plait data prepare INPUT... --tokenizer DIR --out DIR [--val-fraction F] [--shard-tokens N]\n"
    "                          [--dtype auto|u16|u32] [--format auto|text|jsonl] [--json-key KEY]\n"
    "                          [--workers N]\n\n"
    "Encodes each INPUT file (one document each, preceded by the token a tokenizer.json's post-processor\n"
    "puts first, e.g. Llama 3's <|begin_of_text|>, else by <|endoftext|> when the vocabulary has it;\n"
    "a JSON Lines file, *.jsonl or *.ndjson, one document a line: the string under --json-key;\n"
    "- reads stdin, copied to $TMPDIR first: zstdcat x.jsonl.zst | plait data prepare - --format jsonl ...)\n"
    "and writes llm.c's token files into DIR: train_000000.bin, ... and val_000000.bin, ..., plus the\n"
    "tokenizer's vocab.json and merges.txt (a copy of its tokenizer.json when those cannot describe it,\n"
    "as for Llama 3's). Train with [data] path = DIR/train_*.bin and\n"
    "val_path = DIR/val_*.bin.\n"
    "  --tokenizer DIR      vocab.json + merges.txt (GPT-2's, or from plait tokenizer train) or tokenizer.json\n"
    "  --out DIR            output directory; replaced whole, and only if it holds nothing but such files\n"
    "  --val-fraction F     the last F of the input bytes, from a line start, is the validation set (default 0.1)\n"
    "  --shard-tokens N     tokens per shard file (default 100000000, as llm.c's)\n"
    "  --dtype D            auto (uint16 up to 65536 ids, uint32 above; default), u16 or u32\n"
    "  --format F           every input as text or jsonl; auto (default): jsonl by the name, else text\n"
    "  --json-key KEY       the member holding a JSON Lines line's document (default text)\n"
    "  --workers N          threads encoding JSON Lines documents, or a text file's 4 MiB parts cut\n"
    "                       where no token can span the cut (default 0: one a core; the same output)\n",
    cmd_data};
