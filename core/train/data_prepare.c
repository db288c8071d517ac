#include "train/data_prepare.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/file_signature.h"
#include "runtime/error.h"
#include "runtime/mapped_file.h"
#include "runtime/staged_dir.h"
#include "train/jsonl.h"
#include "train/token_file.h"

/* One output split (train or val): its current shard and the counts. */
typedef struct shard_stream {
    const char *split;           /* "train" or "val" */
    plait_staged_dir *dir;
    plait_token_writer w;
    int open;
    int shards;
    int64_t tokens;
    int64_t shard_tokens;
    int width;
} shard_stream;

typedef struct prepare_run {
    const plait_prepare_options *o;
    int workers;                 /* threads encoding a JSON Lines batch or a text's parts */
    shard_stream *stream;        /* where ids go now */
    uint64_t bytes_before;       /* input bytes of earlier pieces */
    uint64_t bytes_total;
    int64_t tokens;
} prepare_run;

static int owned(const char *name) {
    size_t n = strlen(name);
    int bin = n > 4 && !strcmp(name + n - 4, ".bin");
    return (bin && (!strncmp(name, "train_", 6) || !strncmp(name, "val_", 4))) || plait_tokenizer_file_name(name);
}

static plait_status close_shard(shard_stream *s) {
    if (!s->open) return PLAIT_OK;
    s->open = 0;
    return plait_token_writer_close(&s->w);
}

static plait_status stream_write(shard_stream *s, const int32_t *ids, size_t n) {
    while (n > 0) {
        if (!s->open) {
            char name[64], path[PATH_MAX + 80];
            snprintf(name, sizeof name, "%s_%06d.bin", s->split, s->shards);
            plait_status st = plait_token_writer_open(&s->w, plait_staged_dir_path(s->dir, name, path, sizeof path),
                                                      s->width);
            if (st != PLAIT_OK) return st;
            s->open = 1;
            s->shards++;
        }
        int64_t room = s->shard_tokens - s->w.count;
        size_t k = (int64_t)n < room ? n : (size_t)room;
        plait_status st = plait_token_writer_append(&s->w, ids, k);
        if (st != PLAIT_OK) return st;
        s->tokens += (int64_t)k;
        ids += k;
        n -= k;
        if (s->w.count == s->shard_tokens && (st = close_shard(s)) != PLAIT_OK) return st;
    }
    return PLAIT_OK;
}

static plait_status sink(void *ctx, const int32_t *ids, size_t n, size_t done) {
    prepare_run *r = ctx;
    r->tokens += (int64_t)n;
    if (r->o->progress) r->o->progress(r->o->ctx, r->bytes_before + done, r->bytes_total, r->tokens);
    return stream_write(r->stream, ids, n);
}

/* The token the tokenizer's post-processor puts before every text (Llama
 * 3's <|begin_of_text|>), else the end-of-text token (GPT-2); -1 none. */
static int32_t doc_start_token(const plait_tokenizer *t) {
    return plait_tokenizer_bos(t) >= 0 ? plait_tokenizer_bos(t) : plait_tokenizer_eot(t);
}

/* A JSON Lines input's lines in batches: each batch's lines parsed and
 * encoded on the workers' threads (the tokenizer is read-only), then their
 * ids written in line order, so the shards hold the same bits whatever the
 * threads. */
#define BATCH_LINES 4096
#define BATCH_BYTES ((size_t)16 << 20)

typedef struct line_job {
    size_t start, end; /* the line's bytes, its newline excluded */
    size_t next;       /* the byte past its newline (the next line's start) */
    int64_t number;
    plait_token_buf ids;
    int has_doc;
    plait_status st;
    char err[1024];
} line_job;

typedef struct line_batch {
    const plait_tokenizer *tok;
    const unsigned char *data;
    const char *path, *key;
    line_job *lines;
    int n;
    atomic_int next;
} line_batch;

static void *encode_lines(void *arg) {
    line_batch *b = arg;
    for (int i; (i = atomic_fetch_add(&b->next, 1)) < b->n;) {
        line_job *l = &b->lines[i];
        plait_jsonl_doc doc;
        l->st = plait_jsonl_line(b->data + l->start, l->end - l->start, l->number, b->key, b->path, &doc);
        if (l->st == PLAIT_OK && doc.text) {
            l->has_doc = 1;
            l->st = plait_tokenizer_encode(b->tok, doc.text, doc.len, &l->ids);
        }
        if (l->st != PLAIT_OK) snprintf(l->err, sizeof l->err, "%s", plait_last_error());
        plait_jsonl_doc_free(&doc);
    }
    return NULL;
}

/* fn(arg) on `workers` threads for n jobs, this one among them (fewer
 * where a thread cannot start); each takes jobs until none is left. */
static void run_threads(void *(*fn)(void *), void *arg, int n, int workers) {
    pthread_t th[PLAIT_PREPARE_MAX_WORKERS];
    int started = 0;
    for (int w = 1; w < workers && w < n; w++)
        if (pthread_create(&th[started], NULL, fn, arg) == 0) started++;
    fn(arg);
    for (int w = 0; w < started; w++) pthread_join(th[w], NULL);
}

/* The batch on the workers' threads. */
static void run_batch(line_batch *b, int workers) {
    atomic_store(&b->next, 0);
    run_threads(encode_lines, b, b->n, workers);
}

/* The batch's documents into split s in line order, or its first error. */
static plait_status write_batch(prepare_run *r, shard_stream *s, line_batch *b, size_t *at) {
    const int32_t first = doc_start_token(r->o->tokenizer);
    plait_status st = PLAIT_OK;
    for (int i = 0; i < b->n && st == PLAIT_OK; i++) {
        line_job *l = &b->lines[i];
        if (l->st != PLAIT_OK) {
            st = plait_set_error(l->st, "%s", l->err);
            break;
        }
        if (l->has_doc && first >= 0) st = stream_write(s, &first, 1);
        if (st == PLAIT_OK && l->has_doc) st = stream_write(s, l->ids.ids, l->ids.len);
        r->tokens += l->has_doc ? (int64_t)l->ids.len + (first >= 0) : 0;
        r->bytes_before += l->next - *at; /* the line, its newline */
        *at = l->next;
        if (r->o->progress) r->o->progress(r->o->ctx, r->bytes_before, r->bytes_total, r->tokens);
    }
    return st;
}

static plait_status encode_jsonl(prepare_run *r, shard_stream *s, const plait_mapped_file *f, const char *path,
                                 size_t from, size_t to) {
    line_job *lines = calloc(BATCH_LINES, sizeof *lines);
    if (!lines) return plait_set_error(PLAIT_ERR_NO_MEMORY, "data prepare: out of memory for a batch of lines");
    line_batch b = {.tok = r->o->tokenizer,
                    .data = f->data,
                    .path = path,
                    .key = r->o->json_key ? r->o->json_key : "text",
                    .lines = lines};
    int64_t number = 1;
    for (size_t i = 0; i < from; i++) number += f->data[i] == '\n';
    size_t p = from, at = from;
    plait_status st = PLAIT_OK;
    while (st == PLAIT_OK && p < to) {
        size_t bytes = 0;
        for (b.n = 0; b.n < BATCH_LINES && p < to && bytes < BATCH_BYTES; b.n++, number++) {
            const size_t start = p;
            const unsigned char *nl = memchr(f->data + p, '\n', to - p);
            const size_t end = nl ? (size_t)(nl - f->data) : to;
            p = nl ? end + 1 : to;
            bytes += end - start;
            lines[b.n] = (line_job){.start = start, .end = end, .next = p, .number = number};
        }
        run_batch(&b, r->workers);
        st = write_batch(r, s, &b, &at);
        for (int i = 0; i < b.n; i++) plait_token_buf_free(&lines[i].ids);
    }
    free(lines);
    return st;
}

/* A text's parts, cut where no piece of the tokenizer's spans the cut
 * (plait_tokenizer_cut): each encoded on the workers' threads a batch at a
 * time, then their ids written in order, which are the whole text's. */
typedef struct text_job {
    size_t from, to;
    plait_token_buf ids;
    plait_status st;
    char err[1024];
} text_job;

typedef struct text_batch {
    const plait_tokenizer *tok;
    const unsigned char *text;
    text_job *jobs;
    int n;
    atomic_int next;
} text_batch;

static void *encode_parts(void *arg) {
    text_batch *b = arg;
    for (int i; (i = atomic_fetch_add(&b->next, 1)) < b->n;) {
        text_job *j = &b->jobs[i];
        j->ids.len = 0;
        j->st = plait_tokenizer_encode(b->tok, b->text + j->from, j->to - j->from, &j->ids);
        if (j->st != PLAIT_OK) snprintf(j->err, sizeof j->err, "%s", plait_last_error());
    }
    return NULL;
}

static plait_status encode_text_parts(prepare_run *r, shard_stream *s, const unsigned char *text, size_t from,
                                      size_t to, size_t part) {
    const int per_batch = r->workers;
    text_job *jobs = calloc((size_t)per_batch, sizeof *jobs);
    if (!jobs) return plait_set_error(PLAIT_ERR_NO_MEMORY, "data prepare: out of memory for a text's parts");
    text_batch b = {.tok = r->o->tokenizer, .text = text, .jobs = jobs};
    plait_status st = PLAIT_OK;
    for (size_t p = from; st == PLAIT_OK && p < to;) {
        for (b.n = 0; b.n < per_batch && p < to; b.n++) {
            const size_t end = to - p > part ? plait_tokenizer_cut(text, to, p + part) : to;
            jobs[b.n].from = p;
            jobs[b.n].to = end;
            p = end;
        }
        atomic_store(&b.next, 0);
        run_threads(encode_parts, &b, b.n, r->workers);
        for (int i = 0; i < b.n && st == PLAIT_OK; i++) {
            const text_job *j = &jobs[i];
            st = j->st != PLAIT_OK ? plait_set_error(j->st, "%s", j->err) : stream_write(s, j->ids.ids, j->ids.len);
            r->tokens += (int64_t)j->ids.len;
            r->bytes_before += j->to - j->from;
            if (r->o->progress) r->o->progress(r->o->ctx, r->bytes_before, r->bytes_total, r->tokens);
        }
    }
    for (int i = 0; i < per_batch; i++) plait_token_buf_free(&jobs[i].ids);
    free(jobs);
    return st;
}

/* Encode bytes [from, to) of a file into a split, a document start first
 * when `doc_start`: on one thread as a stream, or in parts on the workers'
 * threads where it is longer than two parts. */
static plait_status encode_part(prepare_run *r, shard_stream *s, const unsigned char *text, size_t from, size_t to,
                                int doc_start) {
    r->stream = s;
    int32_t first = doc_start_token(r->o->tokenizer);
    if (doc_start && first >= 0) {
        plait_status st = stream_write(s, &first, 1);
        if (st != PLAIT_OK) return st;
        r->tokens++;
    }
    /* parts of a worker's share, 4 to 16 MiB (unless the options set one):
     * each part's encoding learns its own pieces' ids again (the
     * tokenizer's cache is per call), which costs a fifth more CPU in 1 MiB
     * parts of a text of many words; and a batch's ids are held at once */
    const size_t min_part = (size_t)4 << 20, max_part = (size_t)16 << 20, share = (to - from) / (size_t)r->workers + 1;
    const size_t part = r->o->text_part_bytes ? r->o->text_part_bytes
                        : share < min_part    ? min_part
                        : share > max_part    ? max_part
                                              : share;
    if (r->workers > 1 && to - from > 2 * (r->o->text_part_bytes ? part : min_part))
        return encode_text_parts(r, s, text, from, to, part);
    plait_status st = to > from ? plait_tokenizer_encode_stream(r->o->tokenizer, text + from, to - from, sink, r)
                                : PLAIT_OK;
    r->bytes_before += to - from;
    return st;
}

/* Where the validation part starts in the concatenated input: the first
 * line start at or after the byte share (a file's start is one), or the
 * exact byte where no line starts later. Returns the global byte offset. */
static uint64_t val_start(const plait_mapped_file *files, int n, uint64_t total, double fraction) {
    if (fraction <= 0) return total;
    uint64_t cut = total - (uint64_t)((double)total * fraction), base = 0;
    for (int i = 0; i < n; i++) {
        if (cut < base + files[i].len) {
            for (uint64_t p = cut; p < base + files[i].len; p++)
                if (p == base || files[i].data[p - base - 1] == '\n') return p;
            /* the next file that holds text starts a line */
            for (int j = i + 1; j < n; j++)
                if (files[j].len > 0) return base + files[i].len;
            return cut;
        }
        base += files[i].len;
    }
    return total;
}

plait_status plait_data_prepare(const plait_prepare_options *o, plait_prepare_result *result) {
    memset(result, 0, sizeof *result);
    int32_t vocab = plait_tokenizer_vocab_size(o->tokenizer);
    int width = o->dtype_bytes ? o->dtype_bytes : vocab <= 65536 ? 2 : 4;
    if (width == 2 && vocab > 65536)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "tokenizer %s: a vocabulary of %d ids does not fit uint16 tokens (at most 65536); "
                               "use uint32 (--dtype u32, or auto); nothing was written",
                               plait_tokenizer_source(o->tokenizer), vocab);
    if (o->n_inputs < 1 || o->shard_tokens < 1 || o->shard_tokens > INT32_MAX || !(o->val_fraction >= 0 && o->val_fraction < 1))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "data prepare: needs inputs, 1 <= shard tokens <= %d and "
                                                      "0 <= val fraction < 1",
                               INT32_MAX);
    plait_mapped_file *files = calloc((size_t)o->n_inputs, sizeof *files);
    if (!files) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = PLAIT_OK;
    uint64_t total = 0;
    for (int i = 0; st == PLAIT_OK && i < o->n_inputs; i++) {
        st = plait_mapped_file_open(o->inputs[i], &files[i]);
        if (st == PLAIT_OK) st = plait_text_input_check(o->inputs[i], files[i].data, files[i].len, "data prepare");
        total += files[i].len;
    }
    plait_staged_dir dir;
    int staged = 0;
    if (st == PLAIT_OK) st = plait_staged_dir_begin(&dir, o->out_dir, owned);
    staged = st == PLAIT_OK;
    shard_stream train = {.split = "train", .dir = &dir, .shard_tokens = o->shard_tokens, .width = width};
    shard_stream val = {.split = "val", .dir = &dir, .shard_tokens = o->shard_tokens, .width = width};
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = o->workers > 0 ? o->workers : cores > 0 ? (int)cores : 1;
    prepare_run r = {.o = o,
                     .bytes_total = total,
                     .workers = workers < PLAIT_PREPARE_MAX_WORKERS ? workers : PLAIT_PREPARE_MAX_WORKERS};
    uint64_t vstart = val_start(files, o->n_inputs, total, o->val_fraction), base = 0;
    for (int i = 0; st == PLAIT_OK && i < o->n_inputs; i++) {
        uint64_t len = files[i].len, cut = vstart < base ? 0 : vstart - base < len ? vstart - base : len;
        const int jsonl = o->format ? o->format == PLAIT_PREPARE_JSONL : plait_jsonl_path(o->inputs[i]);
        if (jsonl) { /* a document a line: the cut falls between lines */
            while (cut > 0 && cut < len && files[i].data[cut - 1] != '\n') cut++;
            if (cut > 0) st = encode_jsonl(&r, &train, &files[i], o->inputs[i], 0, cut);
            if (st == PLAIT_OK && cut < len) st = encode_jsonl(&r, &val, &files[i], o->inputs[i], cut, len);
            base += len;
            continue;
        }
        if (cut > 0 || vstart > base) st = encode_part(&r, &train, files[i].data, 0, cut, 1);
        if (st == PLAIT_OK && cut < len) st = encode_part(&r, &val, files[i].data, cut, len, cut == 0);
        base += len;
    }
    if (st == PLAIT_OK && o->val_fraction > 0 && val.tokens == 0)
        st = plait_set_error(PLAIT_ERR_INVALID_ARG, "data prepare: --val-fraction %g of %llu bytes leaves no "
                                                    "validation text",
                             o->val_fraction, (unsigned long long)total);
    if (st == PLAIT_OK) st = close_shard(&train);
    if (st == PLAIT_OK) st = close_shard(&val);
    if (st == PLAIT_OK) st = plait_tokenizer_write_staged(o->tokenizer, &dir);
    if (st == PLAIT_OK) st = plait_staged_dir_commit(&dir);
    if (st != PLAIT_OK) {
        if (train.open) plait_token_writer_abort(&train.w);
        if (val.open) plait_token_writer_abort(&val.w);
        if (staged) plait_staged_dir_abort(&dir);
    }
    for (int i = 0; i < o->n_inputs; i++) plait_mapped_file_close(&files[i]);
    free(files);
    if (st == PLAIT_OK)
        *result = (plait_prepare_result){.bytes = total, .train_tokens = train.tokens, .val_tokens = val.tokens,
                                         .train_shards = train.shards, .val_shards = val.shards, .dtype_bytes = width};
    return st;
}
