#include "checkpoint/weights_import.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/error.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/safetensors.h"
#include "model/tied.h"

#define NAME_CAP 512

struct plait_weights {
    char *path;
    plait_st_file *st;
    const plait_model_spec *spec;
    plait_gpt2_orientation orientation;
    const plait_st_tensor **tensor; /* [n_params] by global index; NULL for tied copies */
    char note[512];
    /* the last parameter converted to plait's orientation and shape (transposed, padded) */
    pthread_mutex_t lock;
    int32_t cached;
    float *cache;
};

static size_t spec_numel(const plait_param *p) {
    size_t n = 1;
    for (int32_t d = 0; d < p->ndim; d++) n *= (size_t)p->shape[d];
    return n;
}

static void shape_text(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static plait_status shape_error(const plait_weights *w, const plait_st_tensor *t, int32_t ndim,
                                const int64_t *want, const char *why) {
    char have[128], need[128];
    shape_text(have, sizeof have, t->ndim, t->shape);
    shape_text(need, sizeof need, ndim, want);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: tensor '%s' has shape %s, the config needs %s%s (%s)", w->path,
                           t->name, have, need, why, plait_gpt2_orientation_name(w->orientation));
}

/* The parameter's global index by canonical name, or -1. */
static int32_t param_of(const plait_model_spec *spec, const char *name) {
    for (int32_t i = 0; i < spec->n_params; i++)
        if (!plait_tied_is_copy(&spec->params[i]) && strcmp(spec->params[i].name, name) == 0) return i;
    return -1;
}

static int is_named(const plait_param *p, const char *name) { return strcmp(p->name, name) == 0; }

/* The file's orientation from the first block's mlp.c_fc.weight. */
static plait_status detect_orientation(plait_weights *w) {
    const plait_model_spec *s = w->spec;
    const int64_t C = s->n_embd;
    for (size_t i = 0; i < plait_st_count(w->st); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(w->st, i);
        char name[NAME_CAP];
        plait_gpt2_canonical(t->name, name, sizeof name);
        if (strcmp(name, "transformer.h.0.mlp.c_fc.weight") != 0) continue;
        if (t->ndim == 2 && t->shape[0] == C && t->shape[1] == 4 * C) {
            w->orientation = PLAIT_GPT2_CONV1D;
            return PLAIT_OK;
        }
        if (t->ndim == 2 && t->shape[0] == 4 * C && t->shape[1] == C) {
            w->orientation = PLAIT_GPT2_LINEAR;
            return PLAIT_OK;
        }
        char have[128];
        shape_text(have, sizeof have, t->ndim, t->shape);
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: tensor '%s' has shape %s, the config (n_embd = %lld) needs [%lld, %lld] "
                               "(Hugging Face Conv1D weights) or [%lld, %lld] (plait/nanoGPT Linear weights)",
                               w->path, t->name, have, (long long)C, (long long)C, (long long)(4 * C),
                               (long long)(4 * C), (long long)C);
    }
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: no tensor 'transformer.h.0.mlp.c_fc.weight' (or 'h.0.mlp.c_fc.weight'): not "
                           "a GPT-2 model file",
                           w->path);
}

/* Every tensor of the file is a parameter of this model (or a mask buffer,
 * or the tied head), each at most once. */
static plait_status map_tensors(plait_weights *w, const plait_st_tensor **head) {
    const plait_model_spec *s = w->spec;
    *head = NULL;
    for (size_t i = 0; i < plait_st_count(w->st); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(w->st, i);
        char name[NAME_CAP];
        plait_gpt2_kind kind = plait_gpt2_canonical(t->name, name, sizeof name);
        if (kind == PLAIT_GPT2_BUFFER) continue; /* whatever its dtype: never read */
        plait_status st = plait_st_require_float(w->st, t);
        if (st != PLAIT_OK) return st;
        int32_t gi = kind == PLAIT_GPT2_PARAM ? param_of(s, name) : -1;
        if (kind == PLAIT_GPT2_HEAD) {
            if (*head)
                return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: tensors '%s' and '%s' are both the head",
                                       w->path, (*head)->name, t->name);
            *head = t;
            continue;
        }
        if (gi < 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: tensor '%s' is not a parameter of this model ([model] arch = %s, "
                                   "n_layer = %d): a model of another shape?",
                                   w->path, t->name, s->arch, (int)s->n_layer);
        if (w->tensor[gi])
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "weights %s: tensors '%s' and '%s' are both '%s'",
                                   w->path, w->tensor[gi]->name, t->name, name);
        w->tensor[gi] = t;
    }
    return PLAIT_OK;
}

static void add_note(plait_weights *w, const char *fmt, long long a, long long b, long long c) {
    size_t n = strlen(w->note);
    if (n + 2 >= sizeof w->note) return;
    if (n) n += (size_t)snprintf(w->note + n, sizeof w->note - n, "; ");
    snprintf(w->note + n, sizeof w->note - n, fmt, a, b, c);
}

/* Each parameter present with the config's shape (in the file's orientation). */
static plait_status check_shapes(plait_weights *w) {
    const plait_model_spec *s = w->spec;
    for (int32_t gi = 0; gi < s->n_params; gi++) {
        const plait_param *p = &s->params[gi];
        if (plait_tied_is_copy(p)) continue;
        const plait_st_tensor *t = w->tensor[gi];
        if (!t)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: no tensor '%s' (the config has n_layer = %d, arch = %s): a model of "
                                   "another shape?",
                                   w->path, p->name, (int)s->n_layer, s->arch);
        int64_t want[2] = {p->shape[0], p->ndim > 1 ? p->shape[1] : 0};
        int transposed = w->orientation == PLAIT_GPT2_CONV1D && plait_gpt2_conv1d_weight(p->name);
        if (transposed) {
            want[0] = p->shape[1];
            want[1] = p->shape[0];
        }
        int rows_ok = t->ndim == p->ndim && t->shape[0] == want[0];
        const char *why = "";
        if (is_named(p, "transformer.wte.weight")) {
            rows_ok = t->ndim == 2 && t->shape[0] >= 1 && t->shape[0] <= want[0];
            why = " (or fewer rows: the vocabulary padded with zero rows)";
        } else if (is_named(p, "transformer.wpe.weight")) {
            rows_ok = t->ndim == 2 && t->shape[0] >= want[0];
            why = " (or more rows: positions cut to block_size)";
        }
        if (!rows_ok || (p->ndim > 1 && t->shape[1] != want[1])) return shape_error(w, t, p->ndim, want, why);
        if (is_named(p, "transformer.wte.weight") && t->shape[0] < want[0])
            add_note(w, "token table: %lld rows in the file, rows %lld..%lld are zero", (long long)t->shape[0],
                     (long long)t->shape[0], (long long)want[0] - 1);
        if (is_named(p, "transformer.wpe.weight") && t->shape[0] > want[0])
            add_note(w, "position table: %lld rows in the file, the first %lld used", (long long)t->shape[0],
                     (long long)want[0], 0);
    }
    return PLAIT_OK;
}

/* A stored head must be the token table itself: plait ties them. */
static plait_status check_head(plait_weights *w, const plait_st_tensor *head) {
    if (!head) return PLAIT_OK;
    const plait_st_tensor *wte = w->tensor[param_of(w->spec, "transformer.wte.weight")];
    if (head->ndim != wte->ndim || head->shape[0] != wte->shape[0] || head->shape[1] != wte->shape[1])
        return shape_error(w, head, wte->ndim, wte->shape, " (the token table's: the head is tied to it)");
    if (memcmp(head->data, wte->data, wte->bytes) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "weights %s: '%s' differs from '%s': plait ties the output head to the token table "
                               "and cannot load an untied head",
                               w->path, head->name, wte->name);
    return PLAIT_OK;
}

/* Weights that start a run are finite: a NaN or Inf is named with its
 * tensor and element, not left to surface as a diverged run. */
static plait_status check_finite(const plait_weights *w, const plait_st_tensor *head) {
    for (size_t i = 0; i < plait_st_count(w->st); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(w->st, i);
        int used = t == head;
        for (int32_t gi = 0; gi < w->spec->n_params && !used; gi++) used = w->tensor[gi] == t;
        if (!used) continue; /* buffers (attention masks) are never read */
        for (size_t k = 0; k < t->numel; k++) {
            if (isfinite(t->data[k])) continue;
            double stored = 0;
            if (!strcmp(t->dtype, "F64")) memcpy(&stored, t->raw + 8 * k, sizeof stored);
            if (isfinite(stored) && stored != 0)
                return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                       "weights %s: tensor '%s' holds %g at element %zu of %zu, past float32's "
                                       "range (+-3.4e38): plait trains in float32 and cannot start from it",
                                       w->path, t->name, stored, k, t->numel);
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                                   "weights %s: tensor '%s' holds a non-finite value (%s) at element %zu of %zu: "
                                   "the weights are damaged or were saved by a run that had diverged; they "
                                   "cannot start a run",
                                   w->path, t->name, isnan(t->data[k]) ? "NaN" : "Inf", k, t->numel);
        }
    }
    return PLAIT_OK;
}

/* Shapes cannot tell the head count: a plait checkpoint records it. */
static plait_status check_heads(const plait_weights *w) {
    const char *v = plait_st_metadata(w->st, "plait.model.n_head");
    if (!v || atoll(v) == (long long)w->spec->n_head) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "weights %s: the model was trained with n_head = %s, the config has n_head = %d (the "
                           "shapes agree, the attention would not)",
                           w->path, v, (int)w->spec->n_head);
}

plait_status plait_weights_open(const char *path, const plait_model_spec *spec, plait_weights **out) {
    *out = NULL;
    if (strcmp(spec->arch, "gpt") != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "[run] init_from = %s: pretrained weights are GPT-2's; [model] arch = %s", path,
                               spec->arch);
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
    char newest[PATH_MAX];
    const char *role = is_dir ? plait_ckpt_dir_role(path) : NULL;
    if (role && strcmp(role, "run directory") == 0) {
        /* a run directory, as sample and export read one: its newest checkpoint that opens */
        plait_ckpt *ck = NULL;
        plait_status found = plait_ckpt_open_named(path, &ck);
        if (found != PLAIT_OK) return plait_wrap_error(found, "[run] init_from");
        snprintf(newest, sizeof newest, "%s", plait_ckpt_dir(ck));
        plait_ckpt_close(ck);
        path = newest;
    }
    plait_weights *w = calloc(1, sizeof *w);
    if (!w) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_init(&w->lock, NULL);
    w->spec = spec;
    w->cached = -1;
    size_t len = strlen(path) + sizeof "/model.safetensors";
    w->path = malloc(len);
    w->tensor = calloc((size_t)spec->n_params, sizeof *w->tensor);
    plait_status st = PLAIT_OK;
    if (!w->path || !w->tensor) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        goto fail;
    }
    snprintf(w->path, len, "%s%s", path, is_dir ? "/model.safetensors" : "");
    if (!is_dir && stat(path, &sb) != 0) {
        st = plait_set_error(PLAIT_ERR_SYSTEM, "[run] init_from = %s: %s", path, strerror(errno));
        goto fail;
    }
    st = plait_st_open(w->path, PLAIT_ST_VERIFY | PLAIT_ST_CONVERT, &w->st);
    if (st != PLAIT_OK) {
        st = plait_wrap_error(st, "[run] init_from");
        goto fail;
    }
    const plait_st_tensor *head = NULL;
    st = detect_orientation(w);
    if (st == PLAIT_OK) st = map_tensors(w, &head);
    if (st == PLAIT_OK) st = check_shapes(w);
    if (st == PLAIT_OK) st = check_head(w, head);
    if (st == PLAIT_OK) st = check_heads(w);
    if (st == PLAIT_OK) st = check_finite(w, head);
    if (st != PLAIT_OK) goto fail;
    *out = w;
    return PLAIT_OK;
fail:
    plait_weights_close(w);
    return st;
}

void plait_weights_close(plait_weights *w) {
    if (!w) return;
    if (w->st) plait_st_close(w->st);
    pthread_mutex_destroy(&w->lock);
    free(w->cache);
    free(w->tensor);
    free(w->path);
    free(w);
}

const char *plait_weights_path(const plait_weights *w) { return w->path; }
plait_gpt2_orientation plait_weights_orientation(const plait_weights *w) { return w->orientation; }
const char *plait_weights_note(const plait_weights *w) { return w->note; }

/* Parameter gi as a full tensor in plait's orientation: the mapped data itself
 * when the file already holds it so (a longer position table included: its
 * first rows are contiguous), else converted into the cache. Called with
 * the lock held. */
static plait_status full_tensor(plait_weights *w, int32_t gi, const float **out) {
    const plait_param *p = &w->spec->params[gi];
    const plait_st_tensor *t = w->tensor[gi];
    int transposed = w->orientation == PLAIT_GPT2_CONV1D && plait_gpt2_conv1d_weight(p->name);
    int padded = t->shape[0] < p->shape[0];
    if (!transposed && !padded) {
        *out = t->data;
        return PLAIT_OK;
    }
    if (w->cached != gi) {
        free(w->cache);
        w->cached = -1;
        size_t n = spec_numel(p);
        w->cache = calloc(n ? n : 1, sizeof(float));
        if (!w->cache) return plait_set_error(PLAIT_ERR_NO_MEMORY, "weights %s: out of memory for '%s'", w->path, p->name);
        if (transposed) {
            /* file [in, out] -> plait [out, in] */
            const int64_t rows = p->shape[0], cols = p->shape[1];
            for (int64_t i = 0; i < cols; i++)
                for (int64_t o = 0; o < rows; o++) w->cache[o * cols + i] = t->data[i * rows + o];
        } else {
            memcpy(w->cache, t->data, t->bytes); /* the rows the file has; the rest stays zero */
        }
        w->cached = gi;
    }
    *out = w->cache;
    return PLAIT_OK;
}

plait_status plait_weights_read(plait_weights *w, const plait_param *param, size_t offset, size_t count,
                                float *dst) {
    int32_t gi = param->index;
    if (gi < 0 || gi >= w->spec->n_params)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "weights: parameter index %d out of range", (int)gi);
    gi = plait_tied_source(w->spec, &w->spec->params[gi])->index;
    pthread_mutex_lock(&w->lock);
    const float *full = NULL;
    plait_status st = full_tensor(w, gi, &full);
    if (st == PLAIT_OK) st = plait_shard_extract(param->ndim, param->shape, &param->shard, full, offset, count, dst);
    pthread_mutex_unlock(&w->lock);
    return st == PLAIT_OK ? st : plait_wrap_error(st, "weights %s: '%s'", w->path, param->name);
}
