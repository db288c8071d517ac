#include "train/data.h"

#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/hash.h"
#include "runtime/map_guard.h"
#include "checkpoint/safetensors_crc32c.h"
#include "train/batch_skip.h"
#include "train/epoch_order.h"
#include "tokenizer/tokenizer.h"
#include "train/token_file.h"
#include "train/val_sets.h"

/* The token stream is the training files, then the validation files, back
 * to back; `start[i]` is file i's first index in it. */
struct plait_data {
    char path[PATH_MAX];     /* the only file, or the first one and how many more */
    plait_data_format format;
    plait_token_file *files;
    int64_t *start;          /* n_files + 1 entries */
    int n_files;
    int64_t n_tokens;
    int64_t n_train, n_val;  /* train = [0, n_train), val = [n_train, n_tokens) */
    uint32_t train_crc;      /* CRC32C of the training split's tokens as stored */
    char tokenizer[PATH_MAX]; /* [data] tokenizer, absolute; "" when none */
    uint64_t tokenizer_fingerprint; /* plait_tokenizer_fingerprint of it */
    int32_t seq_len;
    uint64_t seed;
    /* a blend ([data] weights): dataset k's training tokens [set_lo[k],
     * set_hi[k]), drawn where a hash falls below set_cut[k] and not below
     * the previous cut; last_set is the last of weight > 0 */
    int n_sets, last_set;
    int64_t *set_lo, *set_hi;
    uint64_t *set_cut;
    double *set_share;
    /* [data] sampling = epochs: sequences a step, and the training split's
     * windows of seq_len + 1 tokens (0 under random sampling) */
    int64_t global_batch, windows;
    plait_batch_skip skip; /* [data] skip_batches: training batches never read */
    int32_t eod_mask;      /* [data] eod_mask_loss: the token whose next target counts not; -1 none */
};

/* The file holding token `index` (binary search over the starts). */
static int file_of(const plait_data *d, int64_t index) {
    int lo = 0, hi = d->n_files - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->start[mid] <= index) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int32_t plait_data_token(const plait_data *d, int64_t index) {
    int k = d->n_files == 1 ? 0 : file_of(d, index);
    return plait_token_file_at(&d->files[k], index - d->start[k]);
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static plait_data_format format_of_file(const plait_token_file *f) {
    return f->width == 1 ? PLAIT_DATA_FORMAT_TEXT : f->width == 2 ? PLAIT_DATA_FORMAT_U16 : PLAIT_DATA_FORMAT_U32;
}

/* Map every file (training ones first), check their tokens, number them. */
static plait_status open_files(plait_data *d, const plait_data_options *o, int n_train_files,
                               const char *const *names) {
    d->files = calloc((size_t)d->n_files, sizeof *d->files);
    d->start = calloc((size_t)d->n_files + 1, sizeof *d->start);
    if (!d->files || !d->start) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory opening %s", names[0]);
    for (int i = 0; i < d->n_files; i++) {
        int text = o->format == PLAIT_DATA_FORMAT_TEXT ||
                   (o->format == PLAIT_DATA_FORMAT_AUTO && !ends_with(names[i], ".bin"));
        plait_status st = plait_token_file_open(names[i], text, &d->files[i]);
        if (st == PLAIT_OK) st = plait_token_file_check(&d->files[i], o->vocab_size);
        if (st != PLAIT_OK) return st;
        /* one stream of one kind of token: a list mixing formats is refused,
         * whichever file is the odd one */
        const plait_token_file *a = &d->files[0], *b = &d->files[i];
        if (b->width != a->width || b->llmc_header != a->llmc_header)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "[data] files mix formats: %s is %s but %s is %s; give files of one format (one "
                                   "plait data prepare writes them all alike)",
                                   a->path, plait_token_file_kind(a), b->path, plait_token_file_kind(b));
        d->start[i + 1] = d->start[i] + d->files[i].n_tokens;
        if (i == n_train_files - 1) d->n_train = d->start[i + 1];
    }
    d->n_tokens = d->start[d->n_files];
    d->format = format_of_file(&d->files[0]);
    return PLAIT_OK;
}

/* A blend's datasets over the training split (plait_data_options): each a
 * run of consecutive files, cut at the split; one of weight > 0 must hold
 * a sequence and its last target. */
static plait_status make_sets(plait_data *d, const plait_data_options *o, int n_train_files) {
    const int n = o->n_sets;
    int files = 0;
    double sum = 0;
    for (int k = 0; k < n; k++) {
        files += o->set_files[k] >= 1 ? o->set_files[k] : n_train_files + 1;
        if (!(o->weights[k] >= 0 && o->weights[k] < 1e300)) files = -1;
        else sum += o->weights[k];
    }
    if (n > PLAIT_DATA_MAX_SETS || files != n_train_files || !(sum > 0))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data blend of %s: %d datasets over %d of %d training files, weights summing to %g",
                               d->path, n, files, n_train_files, sum);
    d->set_lo = calloc((size_t)n, sizeof *d->set_lo);
    d->set_hi = calloc((size_t)n, sizeof *d->set_hi);
    d->set_cut = calloc((size_t)n, sizeof *d->set_cut);
    d->set_share = calloc((size_t)n, sizeof *d->set_share);
    if (!d->set_lo || !d->set_hi || !d->set_cut || !d->set_share)
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the data blend of %s", d->path);
    d->n_sets = n;
    int64_t need = (int64_t)d->seq_len + 1;
    long double cum = 0;
    for (int k = 0, f = 0; k < n; f += o->set_files[k], k++) {
        int64_t lo = d->start[f], hi = d->start[f + o->set_files[k]];
        d->set_lo[k] = lo < d->n_train ? lo : d->n_train;
        d->set_hi[k] = hi < d->n_train ? hi : d->n_train;
        d->set_share[k] = o->weights[k] / sum;
        cum += (long double)o->weights[k];
        long double cut = cum / (long double)sum * 18446744073709551616.0L;
        d->set_cut[k] = cut >= 18446744073709551615.0L ? UINT64_MAX : (uint64_t)cut;
        if (o->weights[k] > 0) d->last_set = k;
        if (o->weights[k] > 0 && d->set_hi[k] - d->set_lo[k] < need)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "[data] weights: dataset %d (%s%s) has weight %g but %lld training tokens, fewer "
                                   "than [model] block_size + 1 = %lld%s",
                                   k + 1, d->files[f].path, o->set_files[k] > 1 ? " and the files after it" : "",
                                   o->weights[k], (long long)(d->set_hi[k] - d->set_lo[k]), (long long)need,
                                   hi > d->n_train ? "; the validation split took its tail (give [data] val_path, or "
                                                     "a smaller val_fraction)"
                                                   : "");
    }
    d->set_cut[d->last_set] = UINT64_MAX; /* its cut is the sum's, whatever rounding left */
    return PLAIT_OK;
}

plait_status plait_data_open(const plait_data_options *opts, plait_data **out) {
    *out = NULL;
    const char *const *train = opts ? opts->paths : NULL;
    int n_train = opts ? opts->n_paths : 0;
    if (opts && !train && opts->path && *opts->path) {
        train = &opts->path;
        n_train = 1;
    }
    const int val_only = opts && opts->val_only;
    if (val_only) n_train = 0; /* every file a validation one */
    if (val_only && (opts->n_val_paths < 1 || !opts->val_paths[0]))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "data options: a validation set of no files");
    if (!opts || (!val_only && (n_train < 1 || !train[0] || !*train[0])))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] path is empty: name a token or text file");
    if (opts->seq_len < 1 || opts->vocab_size < 2 || !(opts->val_fraction >= 0 && opts->val_fraction < 1) ||
        opts->n_val_paths < 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data options out of range: seq_len %d, vocab_size %d, val_fraction %g",
                               opts->seq_len, opts->vocab_size, opts->val_fraction);
    plait_data *d = calloc(1, sizeof *d);
    const char **names = calloc((size_t)(n_train + opts->n_val_paths), sizeof *names);
    if (!d || !names) {
        free(d);
        free(names);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory opening %s", train[0]);
    }
    for (int i = 0; i < n_train; i++) names[i] = train[i];
    for (int i = 0; i < opts->n_val_paths; i++) names[n_train + i] = opts->val_paths[i];
    d->n_files = n_train + opts->n_val_paths;
    if (d->n_files == 1) snprintf(d->path, sizeof d->path, "%s", names[0]);
    else snprintf(d->path, sizeof d->path, "%s (+%d more)", names[0], d->n_files - 1);
    d->seq_len = opts->seq_len;
    d->seed = opts->seed;
    if (opts->skip) d->skip = *opts->skip;
    d->eod_mask = opts->mask_eod ? opts->eod_token : -1;
    if (opts->epochs && (opts->global_batch < 1 || opts->n_sets > 0)) {
        free(d);
        free(names);
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data options: epoch sampling needs a global batch (%lld) and "
                               "no blend (%d datasets)",
                               (long long)opts->global_batch, opts->n_sets);
    }

    plait_status st = open_files(d, opts, n_train, names);
    free(names);
    if (st != PLAIT_OK) {
        plait_data_close(d);
        return st;
    }
    /* without validation files, the tail of the training files */
    double val_fraction = opts->n_val_paths ? 0 : opts->val_fraction;
    if (!opts->n_val_paths) d->n_train = d->n_tokens - (int64_t)((double)d->n_tokens * val_fraction);
    d->n_val = d->n_tokens - d->n_train;
    int64_t need = (int64_t)opts->seq_len + 1;
    if (val_only && d->n_val < need) {
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "validation data %s is too short: %lld tokens, but a sequence needs [model] block_size + "
                             "1 = %lld",
                             d->path, (long long)d->n_val, (long long)need);
        plait_data_close(d);
        return st;
    }
    if (!val_only && (d->n_train < need || ((val_fraction > 0 || opts->n_val_paths) && d->n_val < need))) {
        if (opts->n_val_paths)
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "data %s is too short: %lld training tokens and %lld validation tokens ([data] "
                                 "val_path), but each needs at least [model] block_size + 1 = %lld tokens",
                                 d->path, (long long)d->n_train, (long long)d->n_val, (long long)need);
        else
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                 "data file %s is too short: %lld tokens give %lld for training and %lld "
                                 "for validation ([data] val_fraction = %g), but each split needs at least "
                                 "[model] block_size + 1 = %lld tokens; use a longer file, a smaller "
                                 "block_size, or a different val_fraction",
                                 d->path, (long long)d->n_tokens, (long long)d->n_train, (long long)d->n_val,
                                 opts->val_fraction, (long long)need);
        plait_data_close(d);
        return st;
    }
    if (opts->n_sets > 0 && (st = make_sets(d, opts, n_train)) != PLAIT_OK) {
        plait_data_close(d);
        return st;
    }
    if (opts->epochs) {
        d->global_batch = opts->global_batch;
        d->windows = (d->n_train - 1) / d->seq_len; /* >= 1: n_train >= seq_len + 1 */
    }
    /* the CRC covers the training tokens as stored, file by file, then a
     * blend's datasets and weights, or epoch sampling and the global batch
     * that numbers its samples: any changed, the stream differs */
    uint32_t crc = 0;
    for (int i = 0; i < d->n_files && d->start[i] < d->n_train; i++) {
        int64_t n = (d->start[i + 1] < d->n_train ? d->start[i + 1] : d->n_train) - d->start[i];
        crc = plait_crc32c(crc, d->files[i].tokens, (size_t)n * (size_t)d->files[i].width);
    }
    if (d->n_sets > 0) {
        crc = plait_crc32c(crc, opts->set_files, sizeof *opts->set_files * (size_t)d->n_sets);
        crc = plait_crc32c(crc, opts->weights, sizeof *opts->weights * (size_t)d->n_sets);
    }
    if (d->windows > 0) {
        crc = plait_crc32c(crc, "epochs", 6);
        crc = plait_crc32c(crc, &d->global_batch, sizeof d->global_batch);
    }
    d->train_crc = crc;
    *out = d;
    return PLAIT_OK;
}

void plait_data_close(plait_data *d) {
    if (!d) return;
    for (int i = 0; d->files && i < d->n_files; i++) plait_token_file_close(&d->files[i]);
    free(d->files);
    free(d->start);
    free(d->set_lo);
    free(d->set_hi);
    free(d->set_cut);
    free(d->set_share);
    free(d);
}

/* A list of paths and glob patterns, separated by commas or white space,
 * into file names: each pattern's matches sorted (glob's order), in the
 * order the patterns are written. A relative pattern is looked up in the
 * CWD, next to the config file, then in the source tree (the first place
 * where it matches anything). */
typedef struct name_list {
    char **names;
    int n, cap;
} name_list;

static void free_names(name_list *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    memset(l, 0, sizeof *l);
}

static int add_matches(name_list *l, const char *pattern) {
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0) return 0;
    int added = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        if (l->n == l->cap) {
            int cap = l->cap ? 2 * l->cap : 16;
            char **p = realloc(l->names, sizeof *p * (size_t)cap);
            if (!p) break;
            l->names = p;
            l->cap = cap;
        }
        l->names[l->n] = strdup(g.gl_pathv[i]);
        if (!l->names[l->n]) break;
        l->n++;
        added++;
    }
    globfree(&g);
    return added;
}

/* `per_pattern` (NULL, or room for PLAIT_DATA_MAX_SETS) receives how many
 * files each pattern matched: a blend's datasets. */
static plait_status expand(const plait_config *cfg, const char *key, const char *value, name_list *out,
                           int *per_pattern) {
    char *copy = strdup(value);
    if (!copy) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_status st = PLAIT_OK;
    char *save = NULL;
    int k = 0;
    for (char *p = strtok_r(copy, ", \t\n", &save); st == PLAIT_OK && p; p = strtok_r(NULL, ", \t\n", &save), k++) {
        const int before = out->n;
        char buf[PATH_MAX], tried[3 * PATH_MAX + 8];
        snprintf(tried, sizeof tried, "%s", p);
        int found = add_matches(out, p);
        const char *cfg_path = plait_config_path(cfg);
        if (!found && p[0] != '/' && cfg_path && strchr(cfg_path, '/')) {
            snprintf(buf, sizeof buf, "%.*s/%s", (int)(strrchr(cfg_path, '/') - cfg_path), cfg_path, p);
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, ", %s", buf);
            found = add_matches(out, buf);
        }
#ifdef PLAIT_SOURCE_DIR
        if (!found && p[0] != '/') {
            snprintf(buf, sizeof buf, "%s/%s", PLAIT_SOURCE_DIR, p);
            size_t used = strlen(tried);
            snprintf(tried + used, sizeof tried - used, ", %s", buf);
            found = add_matches(out, buf);
        }
#endif
        const char *where = "config";
        if (!found) plait_config_origin(cfg, "data", key, &where);
        if (!found)
            st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "%s: [data] %s = %s: no such file (tried %s)", where, key, p,
                                 tried);
        if (per_pattern && k < PLAIT_DATA_MAX_SETS) per_pattern[k] = out->n - before;
    }
    free(copy);
    return st;
}

/* [data] tokenizer: found like the data, loaded once to check that its ids
 * fit the model's vocabulary; its absolute path goes into checkpoints. */
static plait_status check_tokenizer(const plait_config *cfg, int32_t vocab_size, char *resolved, size_t cap,
                                    uint64_t *fingerprint, int32_t *eot) {
    const char *value = plait_config_str(cfg, "data", "tokenizer");
    resolved[0] = '\0';
    *eot = -1;
    if (!value || !*value) return PLAIT_OK;
    name_list found = {0};
    plait_status st = expand(cfg, "tokenizer", value, &found, NULL);
    if (st == PLAIT_OK && found.n != 1)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] tokenizer = %s: names %d places; give one directory",
                             value, found.n);
    plait_tokenizer *t = NULL;
    if (st == PLAIT_OK) st = plait_tokenizer_load(found.names[0], &t);
    if (st == PLAIT_OK && plait_tokenizer_vocab_size(t) > vocab_size)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "[data] tokenizer = %s has %d ids but [model] vocab_size = %d; the model's vocabulary "
                             "must hold every id (pad it up, e.g. GPT-2's 50257 to 50304)",
                             value, plait_tokenizer_vocab_size(t), vocab_size);
    if (st == PLAIT_OK && !realpath(found.names[0], resolved))
        st = plait_set_error(PLAIT_ERR_SYSTEM, "[data] tokenizer = %s: %s", found.names[0], strerror(errno));
    if (st == PLAIT_OK && strlen(resolved) >= cap) resolved[0] = '\0';
    if (st == PLAIT_OK) *fingerprint = plait_tokenizer_fingerprint(t);
    if (st == PLAIT_OK) *eot = plait_tokenizer_eot(t);
    plait_tokenizer_free(t);
    free_names(&found);
    return st;
}

/* The patterns of a list as expand() splits it. */
static int count_patterns(const char *value) {
    int n = 0;
    for (const char *p = value; p && *p;) {
        p += strspn(p, ", \t\n");
        if (!*p) break;
        n++;
        p += strcspn(p, ", \t\n");
    }
    return n;
}

plait_status plait_data_check_weights(const plait_config *cfg, double *weights, int cap, int *n) {
    *n = 0;
    const char *value = plait_config_str(cfg, "data", "weights");
    if (!value || !*value) return PLAIT_OK;
    const char *where = "config";
    plait_config_origin(cfg, "data", "weights", &where);
    const char *path = plait_config_str(cfg, "data", "path");
    const int patterns = count_patterns(path);
    int count = 0;
    double sum = 0;
    for (const char *p = value; *p;) {
        p += strspn(p, ", \t\n");
        if (!*p) break;
        size_t len = strcspn(p, ", \t\n");
        char word[64], *end = NULL;
        snprintf(word, sizeof word, "%.*s", (int)(len < sizeof word - 1 ? len : sizeof word - 1), p);
        double w = strtod(word, &end);
        if (len >= sizeof word || end == word || *end || !(w >= 0 && w < 1e300))
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "%s: [data] weights = %s: '%.*s' is not a number >= 0 (give one weight per "
                                   "pattern of [data] path, as 0.7, 0.3)",
                                   where, value, (int)len, p);
        if (count < PLAIT_DATA_MAX_SETS && weights && count < cap) weights[count] = w;
        count++;
        sum += w;
        p += len;
    }
    if (count != patterns || count > PLAIT_DATA_MAX_SETS)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [data] weights = %s gives %d weight%s for %d pattern%s of [data] path = %s; give "
                               "one weight per pattern (each pattern's files are one dataset%s)",
                               where, value, count, count == 1 ? "" : "s", patterns, patterns == 1 ? "" : "s", path,
                               count > PLAIT_DATA_MAX_SETS ? ", at most 256 of them" : "");
    if (!(sum > 0))
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: [data] weights = %s: every weight is 0, so no dataset would be read; give one "
                               "above 0",
                               where, value);
    if (strcmp(plait_config_str(cfg, "data", "sampling"), "epochs") == 0) {
        const char *swhere = "config";
        plait_config_origin(cfg, "data", "sampling", &swhere);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[data] sampling = epochs (%s) beside a blend ([data] weights = %s, %s): epochs read "
                               "one dataset's windows once each; a blend draws its datasets at random: set sampling "
                               "= random, or train on one dataset (no weights)",
                               swhere, value, where);
    }
    *n = count;
    return PLAIT_OK;
}

/* The options every split shares ([data] format, val_fraction,
 * eod_mask_loss and eod_token, [model] vocab_size and block_size, [run]
 * seed), the tokenizer checked against the vocabulary: its absolute path
 * into `tokenizer` and its fingerprint. */
static plait_status common_options(const plait_config *cfg, plait_data_options *o, char *tokenizer, size_t cap,
                                   uint64_t *fingerprint) {
    const char *format = plait_config_str(cfg, "data", "format");
    *o = (plait_data_options){
        .format = strcmp(format, "text") == 0                                ? PLAIT_DATA_FORMAT_TEXT
                  : strcmp(format, "u16") == 0 || strcmp(format, "bin") == 0 ? PLAIT_DATA_FORMAT_U16
                                                                             : PLAIT_DATA_FORMAT_AUTO,
        .val_fraction = plait_config_float(cfg, "data", "val_fraction"),
        .vocab_size = (int32_t)plait_config_int(cfg, "model", "vocab_size"),
        .seq_len = (int32_t)plait_config_int(cfg, "model", "block_size"),
        .seed = (uint64_t)plait_config_int(cfg, "run", "seed"),
        .mask_eod = plait_config_bool(cfg, "data", "eod_mask_loss"),
        .eod_token = (int32_t)plait_config_int(cfg, "data", "eod_token"),
    };
    int32_t eot = -1;
    plait_status st = check_tokenizer(cfg, o->vocab_size, tokenizer, cap, fingerprint, &eot);
    /* eod_mask_loss without eod_token: the tokenizer's end of text */
    if (st == PLAIT_OK && o->mask_eod && o->eod_token < 0) o->eod_token = eot;
    if (st == PLAIT_OK && o->mask_eod && o->eod_token < 0)
        st = plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                             "[data] eod_mask_loss = true without [data] eod_token, and [data] tokenizer = %s has no "
                             "<|endoftext|>: give the id the documents end with in eod_token",
                             plait_config_str(cfg, "data", "tokenizer"));
    return st;
}

/* plait_data_open, the data then naming the tokenizer common_options found. */
static plait_status open_tokenized(const plait_data_options *o, const char *tokenizer, uint64_t fingerprint,
                                   plait_data **out) {
    plait_status st = plait_data_open(o, out);
    if (st == PLAIT_OK) {
        snprintf((*out)->tokenizer, sizeof(*out)->tokenizer, "%s", tokenizer);
        (*out)->tokenizer_fingerprint = fingerprint;
    }
    return st;
}

plait_status plait_data_open_config(const plait_config *cfg, int64_t global_batch, plait_data **out) {
    *out = NULL;
    const char *path = plait_config_str(cfg, "data", "path");
    const char *val_path = plait_config_str(cfg, "data", "val_path");
    if (!path || !*path)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] path is empty: name a token or text file");
    plait_data_options o;
    name_list train = {0}, val = {0};
    char tokenizer[PATH_MAX];
    uint64_t fingerprint = 0;
    double weights[PLAIT_DATA_MAX_SETS];
    int set_files[PLAIT_DATA_MAX_SETS];
    plait_batch_skip skip;
    plait_status st = common_options(cfg, &o, tokenizer, sizeof tokenizer, &fingerprint);
    o.epochs = strcmp(plait_config_str(cfg, "data", "sampling"), "epochs") == 0;
    o.global_batch = global_batch;
    if (st == PLAIT_OK) st = plait_batch_skip_parse(cfg, &skip);
    o.skip = &skip;
    if (st == PLAIT_OK) st = plait_data_check_weights(cfg, weights, PLAIT_DATA_MAX_SETS, &o.n_sets);
    /* a blend: each pattern's files are a dataset */
    if (st == PLAIT_OK) st = expand(cfg, "path", path, &train, o.n_sets > 0 ? set_files : NULL);
    if (o.n_sets > 0) {
        o.set_files = set_files;
        o.weights = weights;
    }
    if (st == PLAIT_OK && val_path && *val_path) st = expand(cfg, "val_path", val_path, &val, NULL);
    if (st == PLAIT_OK) {
        o.paths = (const char *const *)train.names;
        o.n_paths = train.n;
        o.val_paths = (const char *const *)val.names;
        o.n_val_paths = val.n;
        st = open_tokenized(&o, tokenizer, fingerprint, out);
    }
    free_names(&train);
    free_names(&val);
    return st;
}

plait_status plait_data_open_val_set(const plait_config *cfg, const char *name, const char *pattern, plait_data **out) {
    *out = NULL;
    plait_data_options o;
    name_list files = {0};
    char tokenizer[PATH_MAX];
    uint64_t fingerprint = 0;
    plait_status st = common_options(cfg, &o, tokenizer, sizeof tokenizer, &fingerprint);
    if (st == PLAIT_OK) st = expand(cfg, "val_sets", pattern, &files, NULL);
    if (st == PLAIT_OK) {
        o.val_only = 1;
        o.val_paths = (const char *const *)files.names;
        o.n_val_paths = files.n;
        st = open_tokenized(&o, tokenizer, fingerprint, out);
    }
    free_names(&files);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "[data] val_sets: the set '%s'", name);
}

plait_status plait_data_check_files(const plait_config *cfg) {
    static const char *const keys[] = {"tokenizer", "path", "val_path"};
    const char *path = plait_config_str(cfg, "data", "path");
    if (!path || !*path)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[data] path is empty: name a token or text file");
    plait_status st = PLAIT_OK;
    for (size_t k = 0; st == PLAIT_OK && k < sizeof keys / sizeof keys[0]; k++) {
        const char *value = plait_config_str(cfg, "data", keys[k]);
        name_list found = {0};
        if (value && *value) st = expand(cfg, keys[k], value, &found, NULL);
        free_names(&found);
    }
    plait_val_sets sets;
    if (st == PLAIT_OK) st = plait_val_sets_parse(cfg, &sets);
    for (int k = 0; st == PLAIT_OK && k < sets.n; k++) {
        name_list found = {0};
        st = expand(cfg, "val_sets", sets.pattern[k], &found, NULL);
        free_names(&found);
    }
    return st;
}

const char *plait_data_path(const plait_data *d) { return d->path; }
const char *plait_data_tokenizer(const plait_data *d) { return d->tokenizer; }
uint64_t plait_data_tokenizer_fingerprint(const plait_data *d) { return d->tokenizer_fingerprint; }
plait_data_format plait_data_format_of(const plait_data *d) { return d->format; }
int plait_data_has_llmc_header(const plait_data *d) { return d->files[0].llmc_header; }
int64_t plait_data_tokens(const plait_data *d) { return d->n_tokens; }
uint32_t plait_data_train_crc32c(const plait_data *d) { return d->train_crc; }

int64_t plait_data_split_tokens(const plait_data *d, plait_data_split split) {
    return split == PLAIT_DATA_VAL ? d->n_val : d->n_train;
}

/* Counter-based: one hash per (seed, split, step, sequence), nothing carried
 * from call to call. Each field goes through its own round so that nearby
 * counters (step 3 sequence 4 vs step 4 sequence 3) do not collide. */
static uint64_t sequence_hash(uint64_t seed, plait_data_split split, int64_t step, int64_t seq) {
    uint64_t h = plait_mix64(seed + 0x9e3779b97f4a7c15ull);
    h = plait_mix64(h ^ (0x243f6a8885a308d3ull * ((uint64_t)split + 1)));
    h = plait_mix64(h + (uint64_t)step * 0x9e3779b97f4a7c15ull);
    h = plait_mix64(h ^ ((uint64_t)seq * 0xd1b54a32d192ed03ull));
    return h;
}

int64_t plait_data_sequence_start(const plait_data *d, plait_data_split split, int64_t step,
                                  int64_t sequence) {
    int64_t T = d->seq_len;
    if (split == PLAIT_DATA_VAL) {
        int64_t windows = (d->n_val - 1) / T; /* >= 1: n_val >= T + 1 */
        return d->n_train + (sequence % windows) * T;
    }
    step = plait_batch_skip_map(&d->skip, step); /* the batch this step reads */
    if (d->windows > 0) /* epochs: sample g of the run, its epoch's window */
        return plait_epoch_window(d->seed, step * d->global_batch + sequence, d->windows) * T;
    uint64_t range = (uint64_t)(d->n_train - T); /* starts 0 .. n_train-T-1 */
    uint64_t h = sequence_hash(d->seed, split, step, sequence);
    if (d->n_sets == 0) return (int64_t)(((unsigned __int128)h * range) >> 64);
    /* a blend: the dataset by an independent hash of the same counter,
     * then a start inside its tokens (starts lo .. hi-T-1) */
    uint64_t u = plait_mix64(h ^ 0x5851f42d4c957f2dull);
    int k = d->last_set;
    for (int i = 0; i < d->n_sets; i++)
        if (u < d->set_cut[i]) {
            k = i;
            break;
        }
    range = (uint64_t)(d->set_hi[k] - d->set_lo[k] - T);
    return d->set_lo[k] + (int64_t)(((unsigned __int128)h * range) >> 64);
}

int plait_data_sets(const plait_data *d) { return d->n_sets; }
double plait_data_set_share(const plait_data *d, int k) { return k >= 0 && k < d->n_sets ? d->set_share[k] : 0; }
int64_t plait_data_set_tokens(const plait_data *d, int k) {
    return k >= 0 && k < d->n_sets ? d->set_hi[k] - d->set_lo[k] : 0;
}

/* For the SIGBUS guard: is `addr` in one of the mapped files? */
static int maps_cover(const void *ctx, const void *addr) {
    const plait_data *d = ctx;
    const uint8_t *a = addr;
    for (int i = 0; i < d->n_files; i++)
        if (a >= d->files[i].map && a < d->files[i].map + d->files[i].map_bytes) return 1;
    return 0;
}

/* The error when a mapped file could no longer be read: which, and what it is now. */
static plait_status file_changed(const plait_data *d) {
    for (int i = 0; i < d->n_files; i++) {
        const plait_token_file *f = &d->files[i];
        struct stat sb;
        if (stat(f->path, &sb) == 0 && (uint64_t)sb.st_size == f->map_bytes) continue;
        char now[128];
        if (stat(f->path, &sb) != 0) snprintf(now, sizeof now, "it is gone (%s)", strerror(errno));
        else snprintf(now, sizeof now, "it now has %lld bytes", (long long)sb.st_size);
        return plait_set_error(PLAIT_ERR_SYSTEM,
                               "data file %s changed while the run was reading it: it had %zu bytes when opened and "
                               "%s (truncated or replaced by another process?); a run needs its data files "
                               "unchanged: restore it, then continue with --resume",
                               f->path, f->map_bytes, now);
    }
    return plait_set_error(PLAIT_ERR_SYSTEM,
                           "a data file of %s could not be read (SIGBUS: changed by another process, or an I/O "
                           "error); restore the data, then continue with --resume",
                           d->path);
}

plait_status plait_data_batch(const plait_data *d, plait_data_split split, int64_t step,
                              int64_t micro_batch, int32_t B, int32_t T, int32_t *tokens,
                              int32_t *targets) {
    if (B < 1 || T < 1 || T > d->seq_len || step < 0 || micro_batch < 0 || !tokens)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "data batch from %s: bad arguments (B %d, T %d (max %d), step %lld, "
                               "micro-batch %lld)",
                               d->path, B, T, d->seq_len, (long long)step, (long long)micro_batch);
    if (split == PLAIT_DATA_VAL && d->n_val == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "validation batch requested from %s but [data] val_fraction = 0 "
                               "leaves no validation split",
                               d->path);
    if (split == PLAIT_DATA_TRAIN && d->n_train == 0)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "training batch requested from validation data alone (%s)",
                               d->path);
    /* Another process may truncate a mapped file under the run: its pages
     * then raise SIGBUS, which the guard turns into this error. */
    plait_map_guard guard;
    plait_map_guard_enter(&guard, maps_cover, d);
    if (sigsetjmp(guard.jump, 1) != 0) {
        plait_map_guard_leave(&guard);
        return file_changed(d);
    }
    for (int32_t r = 0; r < B; r++) {
        int64_t start = plait_data_sequence_start(d, split, step, micro_batch * B + r);
        int32_t *tok = tokens + (size_t)r * (size_t)T;
        int32_t *tgt = targets ? targets + (size_t)r * (size_t)T : NULL;
        int k = d->n_files == 1 ? 0 : file_of(d, start);
        const plait_token_file *f = &d->files[k];
        if (start + T + 1 <= d->start[k + 1] && f->width == 1) { /* one text file: bytes */
            const uint8_t *p = f->tokens + (start - d->start[k]);
            for (int32_t t = 0; t < T; t++) tok[t] = p[t];
            if (tgt)
                for (int32_t t = 0; t < T; t++) tgt[t] = p[t + 1];
        } else if (start + T + 1 <= d->start[k + 1]) { /* inside one file */
            int64_t base = start - d->start[k];
            for (int32_t t = 0; t < T; t++) tok[t] = plait_token_file_at(f, base + t);
            if (tgt)
                for (int32_t t = 0; t < T; t++) tgt[t] = plait_token_file_at(f, base + t + 1);
        } else { /* across a file boundary */
            for (int32_t t = 0; t < T; t++) tok[t] = plait_data_token(d, start + t);
            if (tgt)
                for (int32_t t = 0; t < T; t++) tgt[t] = plait_data_token(d, start + t + 1);
        }
        if (tgt && d->eod_mask >= 0)
            for (int32_t t = 0; t < T; t++)
                if (tok[t] == d->eod_mask) tgt[t] = -1;
    }
    plait_map_guard_leave(&guard);
    return PLAIT_OK;
}

int64_t plait_data_epoch_windows(const plait_data *d) { return d->windows; }

plait_status plait_data_step_targets(const plait_data *d, plait_data_split split, int64_t step, int64_t n, int32_t T,
                                     int64_t *count) {
    *count = n * T;
    if (d->eod_mask < 0) return PLAIT_OK;
    plait_map_guard guard; /* as plait_data_batch: a file truncated under the run */
    plait_map_guard_enter(&guard, maps_cover, d);
    if (sigsetjmp(guard.jump, 1) != 0) {
        plait_map_guard_leave(&guard);
        return file_changed(d);
    }
    for (int64_t g = 0; g < n; g++) {
        const int64_t start = plait_data_sequence_start(d, split, step, g);
        for (int32_t t = 0; t < T; t++) *count -= plait_data_token(d, start + t) == d->eod_mask;
    }
    plait_map_guard_leave(&guard);
    return PLAIT_OK;
}
