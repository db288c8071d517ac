/* plait tokenizer train CORPUS... --vocab N --out DIR
 * plait tokenizer encode TOKENIZER [FILE]     ids of FILE (or stdin), one line
 * plait tokenizer decode TOKENIZER [FILE]     bytes of the ids in FILE (or stdin) */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "runtime/file_signature.h"
#include "runtime/error.h"
#include "runtime/mapped_file.h"
#include "runtime/phase.h"
#include "runtime/regular_file.h"
#include "runtime/staged_dir.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_train.h"

static int bad(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int bad(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "plait tokenizer: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "; 'plait help tokenizer' lists the options\n");
    return 2;
}

static void train_progress(void *ctx, int32_t now, int32_t wanted) {
    plait_phase *p = ctx;
    plait_phase_report(p, "learning merges: vocabulary %d / %d (%.0f s)", now, wanted, plait_phase_elapsed(p));
}

static int cmd_train(int argc, char **argv) {
    const char *out = NULL;
    long vocab = 0;
    int n = 0;
    const char **paths = calloc((size_t)argc, sizeof *paths);
    if (!paths) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") || !strcmp(argv[i], "--out")) {
            if (i + 1 >= argc) {
                free(paths);
                return bad("%s needs a value", argv[i]);
            }
            if (!strcmp(argv[i], "--out")) {
                out = argv[++i];
            } else {
                char *end;
                vocab = strtol(argv[++i], &end, 10);
                if (!*argv[i] || *end || vocab < 257 || vocab > 10000000) {
                    free(paths);
                    return bad("--vocab %s: must be an integer 257..10000000", argv[i]);
                }
            }
        } else if (argv[i][0] == '-' && argv[i][1]) {
            free(paths);
            return bad("unknown option '%s'", argv[i]);
        } else {
            paths[n++] = argv[i];
        }
    }
    if (!n || !vocab || !out) {
        free(paths);
        return bad("train needs CORPUS..., --vocab N and --out DIR");
    }
    /* --out is refused before the merges are learned (which can take long), not after */
    if (plait_staged_dir_check(out, plait_tokenizer_file_name) != PLAIT_OK) {
        free(paths);
        plait_cli_print_error("tokenizer train");
        return 1;
    }
    plait_mapped_file *files = calloc((size_t)n, sizeof *files);
    const void **texts = calloc((size_t)n, sizeof *texts);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    plait_status st = files && texts && lens ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    size_t total = 0;
    for (int i = 0; st == PLAIT_OK && i < n; i++) {
        st = plait_mapped_file_open(paths[i], &files[i]);
        if (st == PLAIT_OK) st = plait_text_input_check(paths[i], files[i].data, files[i].len, "tokenizer train");
        texts[i] = files[i].data;
        lens[i] = files[i].len;
        total += files[i].len;
    }
    plait_phase phase;
    plait_phase_begin(&phase, stderr, -1);
    plait_tokenizer_train_options o = {.vocab_size = (int32_t)vocab, .progress = train_progress, .ctx = &phase};
    plait_tokenizer *tok = NULL;
    if (st == PLAIT_OK) st = plait_tokenizer_train(&o, texts, lens, (size_t)n, &tok);
    if (st == PLAIT_OK)
        plait_phase_end(&phase, "learning merges: vocabulary %d / %ld in %.1f s", plait_tokenizer_vocab_size(tok), vocab,
                        plait_phase_elapsed(&phase));
    if (st == PLAIT_OK) st = plait_tokenizer_save(tok, out);
    if (st == PLAIT_OK) {
        printf("wrote %s/vocab.json and %s/merges.txt: %d tokens (%d merges) learned from %zu bytes in %d file%s\n",
               out, out, plait_tokenizer_vocab_size(tok), plait_tokenizer_merges(tok), total, n, n == 1 ? "" : "s");
        if (plait_tokenizer_vocab_size(tok) < vocab)
            printf("note: the text has no more pairs that occur twice; the vocabulary is smaller than %ld\n", vocab);
    }
    for (int i = 0; files && i < n; i++) plait_mapped_file_close(&files[i]);
    free(files);
    free(texts);
    free(lens);
    free(paths);
    plait_tokenizer_free(tok);
    if (st != PLAIT_OK) {
        plait_cli_print_error("tokenizer train");
        return 1;
    }
    return 0;
}

/* The whole of FILE, or of stdin when path is NULL or "-". A FILE named
 * must be a regular file (a FIFO without a writer would block the open
 * forever); a stream comes through stdin. */
static plait_status read_input(const char *path, char **out, size_t *len) {
    FILE *f = stdin;
    if (path && strcmp(path, "-")) {
        plait_status st = plait_fopen_regular(path, "input file", PLAIT_ERR_INVALID_ARG, &f);
        if (st != PLAIT_OK) return st;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *grown = realloc(buf, cap *= 2);
        if (!grown) free(buf);
        buf = grown;
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (!buf) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory reading input");
    if (err) {
        free(buf);
        return plait_set_error(PLAIT_ERR_SYSTEM, "error reading %s", path ? path : "stdin");
    }
    *out = buf;
    *len = n;
    return PLAIT_OK;
}

static plait_status encode_to(const plait_tokenizer *tok, const char *text, size_t len, FILE *out) {
    plait_token_buf ids = {0};
    plait_status st = plait_tokenizer_encode(tok, text, len, &ids);
    for (size_t i = 0; st == PLAIT_OK && i < ids.len; i++) fprintf(out, i ? " %d" : "%d", ids.ids[i]);
    if (st == PLAIT_OK) fputc('\n', out);
    plait_token_buf_free(&ids);
    return st;
}

/* Ids separated by white space; anything else names its byte offset. */
static plait_status decode_to(const plait_tokenizer *tok, const char *text, size_t len, const char *what, FILE *out) {
    plait_token_buf ids = {0};
    plait_status st = PLAIT_OK;
    for (size_t i = 0; st == PLAIT_OK && i < len;) {
        if (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r') {
            i++;
            continue;
        }
        long v = 0;
        size_t start = i;
        while (i < len && text[i] >= '0' && text[i] <= '9' && v < 1L << 31) v = v * 10 + (text[i++] - '0');
        if (i == start || (i < len && text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r') ||
            v >= plait_tokenizer_vocab_size(tok))
            st = plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: byte %zu: expected a token id 0..%d", what, start,
                                 plait_tokenizer_vocab_size(tok) - 1);
        else
            st = plait_token_buf_push(&ids, (int32_t)v);
    }
    char *bytes = NULL;
    size_t n = 0;
    if (st == PLAIT_OK) st = plait_tokenizer_decode(tok, ids.ids, ids.len, &bytes, &n);
    if (st == PLAIT_OK) plait_cli_put_bytes(bytes, n, out, isatty(fileno(out)));
    free(bytes);
    plait_token_buf_free(&ids);
    return st;
}

static int cmd_code(int argc, char **argv, int encode) {
    if (argc < 2 || argc > 3) return bad("%s needs TOKENIZER and at most one FILE", argv[0]);
    plait_tokenizer *tok = NULL;
    char *text = NULL;
    size_t len = 0;
    plait_status st = plait_tokenizer_load(argv[1], &tok);
    if (st == PLAIT_OK) st = read_input(argc == 3 ? argv[2] : NULL, &text, &len);
    if (st == PLAIT_OK)
        st = encode ? encode_to(tok, text, len, stdout) : decode_to(tok, text, len, argc == 3 ? argv[2] : "stdin", stdout);
    free(text);
    plait_tokenizer_free(tok);
    if (st != PLAIT_OK) {
        plait_cli_print_error(encode ? "tokenizer encode" : "tokenizer decode");
        return 1;
    }
    return 0;
}

static int cmd_tokenizer(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc < 2) return bad("give a subcommand: train, encode or decode");
    if (!strcmp(argv[1], "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "encode")) return cmd_code(argc - 1, argv + 1, 1);
    if (!strcmp(argv[1], "decode")) return cmd_code(argc - 1, argv + 1, 0);
    return bad("no subcommand '%s'", argv[1]);
}

const plait_command plait_cmd_tokenizer = {
    "tokenizer", "train a byte-level BPE tokenizer; encode and decode with one",
    "usage: plait tokenizer train CORPUS... --vocab N --out DIR\n"
    "       plait tokenizer encode TOKENIZER [FILE]\n"
    "       plait tokenizer decode TOKENIZER [FILE]\n\n"
    "train   learns a byte-level BPE (GPT-2's pre-tokenisation and byte alphabet) from the CORPUS\n"
    "        files and writes DIR/vocab.json and DIR/merges.txt in GPT-2's format: the 256 bytes,\n"
    "        the learned tokens, then <|endoftext|>, N ids in all (fewer when no pair repeats).\n"
    "        DIR is replaced whole, and only when it holds nothing but tokenizer files.\n"
    "encode  prints the ids of FILE's bytes (stdin without FILE) on one line.\n"
    "decode  writes the bytes of the ids (separated by white space) in FILE or stdin (on a terminal,\n"
    "        control characters are shown as \\xNN).\n"
    "TOKENIZER is a directory with vocab.json and merges.txt (GPT-2's files, or one written by\n"
    "train) or tokenizer.json (Hugging Face, model type BPE: GPT-2's ByteLevel pre-tokenizer or Llama 3's\n"
    "Split + ByteLevel), or a tokenizer.json file. encode prints the text's ids alone (no special token\n"
    "is added, and special tokens' text in FILE is ordinary text); decode shows special tokens as text.\n",
    cmd_tokenizer};
