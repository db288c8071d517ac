/* Reading one checkpoint: checked against its manifest and COMPLETE
 * marker, then its tensors as a source of full values (checkpoint.h). Its
 * writer is checkpoint_write.c; the names are checkpoint_name.c's. */
#include "checkpoint/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/log.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_shard.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/safetensors_json.h"
#include "checkpoint/string_pairs.h"
#include "model/tied.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

#define MAX_STATE_BYTES (16u << 20)

static const char *const file_names[2] = {PLAIT_CKPT_MODEL_FILE, PLAIT_CKPT_OPTIM_FILE};

const char *const plait_ckpt_model_keys[] = {"arch", "n_layer", "n_head", "n_embd", "block_size", "vocab_size", NULL};
const char *const plait_ckpt_moe_keys[] = {"moe_experts",    "moe_top_k",  "moe_shared_experts",
                                           "moe_ffn_hidden", "moe_every",  "moe_router",
                                           "moe_aux_loss",   "moe_z_loss", "moe_bias_rate",
                                           "moe_capacity",   NULL};
const char *const plait_ckpt_moe_shape_keys[] = {"moe_experts", "moe_shared_experts", "moe_ffn_hidden",
                                                 "moe_every",   "moe_router",         NULL};

/* ======================================================================== */
/* reader                                                                    */
/* ======================================================================== */

struct plait_ckpt {
    char dir[PATH_MAX];
    char what[PATH_MAX + 16]; /* "checkpoint <dir>", for messages */
    plait_ckpt_state state;
    plait_json_doc *doc;
    const plait_json *meta;
    plait_st_file *st[2];
    plait_ckpt_index *index; /* a sharded checkpoint's index.json, else NULL */
    plait_st_file **shards;  /* its files, as index->files */
};

void plait_ckpt_close(plait_ckpt *ck) {
    if (!ck) return;
    for (int f = 0; f < 2; f++) plait_st_close(ck->st[f]);
    for (int32_t f = 0; ck->index && ck->shards && f < ck->index->n_files; f++) plait_st_close(ck->shards[f]);
    free(ck->shards);
    plait_ckpt_index_free(ck->index);
    plait_json_free(ck->doc);
    free(ck);
}

/* Each tensor's own checksum (from the safetensors header), read with
 * pread in chunks rather than through the mapping: touching every page of
 * the mapping would add the whole file to every rank's resident memory,
 * where a ZeRO-3 or TP rank reads only its shard. With `finite`, also
 * refuse NaN and Inf, naming the tensor. */
static plait_status scan_tensors(const char *dir, const char *file, const plait_st_file *f, int finite) {
    int fd;
    uint64_t size;
    plait_status st = plait_open_regular(plait_st_path(f), "checkpoint file", PLAIT_ERR_PROTOCOL, &fd, &size);
    if (st != PLAIT_OK) return plait_ckpt_refuse(dir, file, "%s", plait_last_error());
    enum { CHUNK = 1 << 18 }; /* floats */
    float *buf = malloc(CHUNK * sizeof(float));
    if (!buf) {
        close(fd);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory checking %s/%s", dir, file);
    }
    for (size_t i = 0; st == PLAIT_OK && i < plait_st_count(f); i++) {
        const plait_st_tensor *t = plait_st_tensor_at(f, i);
        uint32_t crc = 0;
        for (size_t k = 0; st == PLAIT_OK && k < t->numel; k += CHUNK) {
            size_t n = t->numel - k < CHUNK ? t->numel - k : CHUNK;
            st = plait_fs_pread_all(fd, buf, n * sizeof(float), plait_st_data_start(f) + t->offset + 4 * k,
                                    plait_st_path(f));
            if (st != PLAIT_OK) break;
            crc = plait_crc32c(crc, buf, n * sizeof(float));
            for (size_t j = 0; finite && j < n; j++)
                if (!isfinite(buf[j]))
                    st = plait_ckpt_refuse(dir, file,
                                           "tensor %s holds a non-finite value (%s) at element %zu of %zu: the run "
                                           "that saved it had diverged; resume from an earlier checkpoint",
                                           t->name, isnan(buf[j]) ? "NaN" : "Inf", k + j, t->numel);
        }
        if (st == PLAIT_OK && t->has_crc && crc != t->crc)
            st = plait_ckpt_refuse(dir, file,
                                   "tensor %s: checksum mismatch (stored %08x, computed %08x): its data was altered "
                                   "(the file was re-signed after an edit?)",
                                   t->name, t->crc, crc);
    }
    free(buf);
    close(fd);
    return st;
}

plait_status plait_ckpt_check_finite(const plait_ckpt *ck) {
    plait_status st = PLAIT_OK;
    for (int f = 0; f < 2 && st == PLAIT_OK; f++) st = scan_tensors(ck->dir, file_names[f], ck->st[f], 1);
    for (int32_t f = 0; ck->index && f < ck->index->n_files && st == PLAIT_OK; f++)
        st = scan_tensors(ck->dir, ck->index->files[f], ck->shards[f], 1);
    return st;
}

/* 1 if `dir` holds what a save leaves before its marker: a checkpoint
 * file or a writer's temporary file. */
static int holds_a_save(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        found = strcmp(e->d_name, PLAIT_CKPT_STATE_FILE) == 0 || strcmp(e->d_name, PLAIT_CKPT_OPTIM_FILE) == 0 ||
                strcmp(e->d_name, PLAIT_CKPT_INDEX_FILE) == 0 ||
                strncmp(e->d_name, PLAIT_CKPT_SHARD_PREFIX, strlen(PLAIT_CKPT_SHARD_PREFIX)) == 0 ||
                (n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0);
    }
    closedir(d);
    return found;
}

/* A sharded save that never got its marker: which world ranks' shard
 * files are in place (a rank missing from the list did not finish), as
 * "; shard files in place: world ranks 0, 2", or "" for none. */
static void shard_ranks(const char *dir, char *buf, size_t cap) {
    buf[0] = '\0';
    DIR *d = opendir(dir);
    if (!d) return;
    size_t used = 0, pre = strlen(PLAIT_CKPT_SHARD_PREFIX);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && used + 16 < cap;) {
        int rank, end = 0;
        if (strncmp(e->d_name, PLAIT_CKPT_SHARD_PREFIX, pre) != 0 ||
            sscanf(e->d_name + pre, "%d.safetensors%n", &rank, &end) != 1 || e->d_name[pre + (size_t)end] != '\0')
            continue;
        used += (size_t)snprintf(buf + used, cap - used, "%s%d", n++ ? ", " : "; shard files in place: world ranks ",
                                 rank);
    }
    closedir(d);
}

/* Why `dir` has no marker: it does not exist, is a file, is not a
 * checkpoint at all, or is one whose save was interrupted. */
static plait_status no_marker(const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return plait_set_error(errno == ENOENT ? PLAIT_ERR_INVALID_ARG : PLAIT_ERR_SYSTEM, "there is no checkpoint at %s: %s",
                               dir, strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "%s is %s, not a checkpoint: a checkpoint is a directory (runs/NAME/ckpt-<step>) "
                               "holding " PLAIT_CKPT_MARKER_FILE ", " PLAIT_CKPT_STATE_FILE ", " PLAIT_CKPT_MODEL_FILE
                               " and " PLAIT_CKPT_OPTIM_FILE "; give that directory, or the run directory",
                               dir, S_ISREG(sb.st_mode) ? "a file" : plait_file_kind(sb.st_mode));
    if (!holds_a_save(dir))
        return plait_set_error(PLAIT_ERR_PROTOCOL,
                               "%s is not a plait checkpoint: it has no " PLAIT_CKPT_MARKER_FILE ", "
                               PLAIT_CKPT_STATE_FILE " or " PLAIT_CKPT_OPTIM_FILE
                               " (a checkpoint is a directory runs/NAME/ckpt-<step>; a run directory holds them)",
                               dir);
    char ranks[160];
    shard_ranks(dir, ranks, sizeof ranks);
    return plait_set_error(PLAIT_ERR_PROTOCOL, "checkpoint %s is incomplete: no %s marker (its save was interrupted%s)",
                           dir, PLAIT_CKPT_MARKER_FILE, ranks);
}

static plait_status read_marker(const char *dir, int64_t *step, uint32_t *state_crc) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_MARKER_FILE, dir);
    if (access(path, F_OK) != 0) return no_marker(dir);
    char *text;
    size_t len;
    plait_status st = plait_fs_read_small_file(path, 256, &text, &len);
    if (st != PLAIT_OK) return plait_ckpt_refuse(dir, PLAIT_CKPT_MARKER_FILE, "%s", plait_last_error());
    long long s;
    char crc[9];
    int consumed = 0;
    int ok = sscanf(text, PLAIT_CKPT_FORMAT_NAME " step=%lld " PLAIT_CKPT_STATE_FILE " crc32c=%8[0-9a-f]\n%n", &s, crc,
                    &consumed) == 2 &&
             (size_t)consumed == len && text[len - 1] == '\n';
    uint64_t c = 0;
    if (ok) ok = plait_json_hex(crc, 8, &c) == 0 && s >= 0;
    free(text);
    if (!ok) return plait_ckpt_refuse(dir, PLAIT_CKPT_MARKER_FILE, "malformed marker");
    *step = s;
    *state_crc = (uint32_t)c;
    return PLAIT_OK;
}

/* One file of the manifest: `quick`, its size; else its size and CRC32C. */
static plait_status check_file(const char *dir, const char *name, const plait_ckpt_file_fact *fact, int quick) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (quick) {
        struct stat sb;
        if (lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != fact->bytes)
            return plait_ckpt_refuse(dir, name, "missing, not a plain file, or not the manifest's %llu bytes",
                                     (unsigned long long)fact->bytes);
        return PLAIT_OK;
    }
    uint64_t bytes;
    uint32_t crc;
    if (plait_fs_file_crc32c(path, &bytes, &crc) != PLAIT_OK)
        return plait_ckpt_refuse(dir, name, "%s", plait_last_error());
    if (bytes != fact->bytes)
        return plait_ckpt_refuse(dir, name, "%s: %llu bytes but the manifest says %llu",
                                 bytes < fact->bytes ? "truncated" : "wrong size", (unsigned long long)bytes,
                                 (unsigned long long)fact->bytes);
    if (crc != fact->crc)
        return plait_ckpt_refuse(dir, name, "checksum mismatch (manifest %08x, file %08x): the file is corrupted",
                                 fact->crc, crc);
    return PLAIT_OK;
}

/* A sharded checkpoint: its index (which the manifest vouched for), each
 * shard file it names (in the manifest too) mapped and its tensors'
 * checksums checked, and every slice found in its file. The shard files
 * are named shard-<world rank>, so a refusal names the rank that wrote it. */
static plait_status open_shards(plait_ckpt *ck) {
    char path[PATH_MAX], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_INDEX_FILE, ck->dir);
    plait_status st = plait_fs_read_small_file(path, 256u << 20, &text, &len);
    if (st == PLAIT_OK) st = plait_ckpt_index_parse(text, len, path, &ck->index);
    free(text);
    if (st != PLAIT_OK) return plait_ckpt_refuse(ck->dir, PLAIT_CKPT_INDEX_FILE, "%s", plait_last_error());
    if (ck->index->step != ck->state.step)
        return plait_ckpt_refuse(ck->dir, PLAIT_CKPT_INDEX_FILE, "step %lld differs from state.json's %lld",
                                 (long long)ck->index->step, (long long)ck->state.step);
    ck->shards = calloc((size_t)ck->index->n_files + 1, sizeof *ck->shards);
    if (!ck->shards) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    for (int32_t f = 0; f < ck->index->n_files && st == PLAIT_OK; f++) {
        const char *name = ck->index->files[f];
        const plait_json *files = plait_json_get(plait_json_root(ck->doc), "files");
        if (!plait_json_get(files, name))
            return plait_ckpt_refuse(ck->dir, PLAIT_CKPT_INDEX_FILE,
                                     "it names %s, which the manifest in state.json does not list", name);
        snprintf(path, sizeof path, "%s/%s", ck->dir, name);
        if ((st = plait_st_open(path, 0, &ck->shards[f])) != PLAIT_OK)
            return plait_wrap_error(st, "checkpoint %s refused", ck->dir);
        st = scan_tensors(ck->dir, name, ck->shards[f], 0);
    }
    for (int32_t i = 0; i < ck->index->n_tensors && st == PLAIT_OK; i++) {
        plait_ckpt_index_tensor *t = &ck->index->tensors[i];
        for (int32_t k = 0; k < t->n_slices; k++) {
            plait_ckpt_slice *s = &t->slices[k];
            const plait_st_tensor *e = plait_st_find(ck->shards[s->file], t->name);
            if (!e || e->ndim != 1 || e->numel != s->end - s->begin || !e->data)
                return plait_ckpt_refuse(ck->dir, ck->index->files[s->file],
                                         "the index says it holds %llu elements of tensor %s, but it %s (shards of "
                                         "another save or another model?)",
                                         (unsigned long long)(s->end - s->begin), t->name,
                                         e ? "holds another number" : "has no such tensor");
            s->data = e->data;
        }
    }
    return st;
}

/* Open `dir`; `quick`: check the marker, state.json and the files' sizes
 * against the manifest only (no file is read or mapped). */
static plait_status open_checked(const char *dir, int quick, plait_ckpt **out) {
    *out = NULL;
    plait_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    size_t dl = strlen(ck->dir);
    while (dl > 1 && ck->dir[dl - 1] == '/') ck->dir[--dl] = '\0';
    snprintf(ck->what, sizeof ck->what, "checkpoint %s", ck->dir);

    int64_t marker_step = 0;
    uint32_t state_crc = 0;
    plait_status st = read_marker(ck->dir, &marker_step, &state_crc);
    char *text = NULL;
    size_t len = 0;
    plait_ckpt_file_fact facts[2] = {{0, 0}, {0, 0}};
    if (st == PLAIT_OK) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/" PLAIT_CKPT_STATE_FILE, ck->dir);
        st = plait_fs_read_small_file(path, MAX_STATE_BYTES, &text, &len);
        if (st != PLAIT_OK) st = plait_ckpt_refuse(ck->dir, PLAIT_CKPT_STATE_FILE, "%s", plait_last_error());
    }
    if (st == PLAIT_OK && plait_crc32c(0, text, len) != state_crc)
        st = plait_ckpt_refuse(ck->dir, PLAIT_CKPT_STATE_FILE, "checksum mismatch with the %s marker (file altered)",
                    PLAIT_CKPT_MARKER_FILE);
    if (st == PLAIT_OK) st = plait_ckpt_state_parse(ck->dir, text, len, &ck->doc, &ck->state, &ck->meta, facts);
    if (st == PLAIT_OK && ck->state.step != marker_step)
        st = plait_ckpt_refuse(ck->dir, PLAIT_CKPT_STATE_FILE, "step %lld differs from the marker's %lld",
                    (long long)ck->state.step, (long long)marker_step);
    const char *base = strrchr(ck->dir, '/');
    int64_t dir_step;
    if (st == PLAIT_OK && plait_ckpt_parse_dir_name(base ? base + 1 : ck->dir, &dir_step) == 0 &&
        dir_step != ck->state.step)
        st = plait_ckpt_refuse(ck->dir, PLAIT_CKPT_STATE_FILE, "step %lld does not match the directory name",
                    (long long)ck->state.step);
    for (int f = 0; f < 2 && st == PLAIT_OK; f++) st = check_file(ck->dir, file_names[f], &facts[f], quick);
    for (int f = 0; f < 2 && st == PLAIT_OK && !quick; f++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", ck->dir, file_names[f]);
        if ((st = plait_st_open(path, 0, &ck->st[f])) != PLAIT_OK)
            st = plait_wrap_error(st, "checkpoint %s refused", ck->dir);
        /* The manifest vouches for the bytes; each tensor's own checksum in
         * the header is checked too, so a file re-signed after an edit of one
         * tensor is still caught, naming the tensor. */
        else
            st = scan_tensors(ck->dir, file_names[f], ck->st[f], 0);
    }
    const char *extra;
    plait_ckpt_file_fact fact;
    int sharded = 0;
    for (size_t i = 0; st == PLAIT_OK && ck->doc && plait_ckpt_state_extra_file(ck->doc, i, &extra, &fact); i++) {
        st = check_file(ck->dir, extra, &fact, quick);
        sharded |= strcmp(extra, PLAIT_CKPT_INDEX_FILE) == 0;
    }
    if (st == PLAIT_OK && !sharded && plait_ckpt_state_extra_file(ck->doc, 0, &extra, &fact))
        st = plait_ckpt_refuse(ck->dir, PLAIT_CKPT_STATE_FILE, "the manifest lists %s but no %s", extra,
                               PLAIT_CKPT_INDEX_FILE);
    if (st == PLAIT_OK && sharded && !quick) st = open_shards(ck);
    free(text);
    if (st != PLAIT_OK) {
        plait_ckpt_close(ck);
        return st;
    }
    *out = ck;
    return PLAIT_OK;
}

plait_status plait_ckpt_open(const char *dir, plait_ckpt **out) { return open_checked(dir, 0, out); }

plait_status plait_ckpt_check_quick(const char *dir) {
    plait_ckpt *ck = NULL;
    plait_status st = open_checked(dir, 1, &ck);
    plait_ckpt_close(ck);
    return st;
}

const char *plait_ckpt_dir(const plait_ckpt *ck) { return ck->dir; }
const plait_ckpt_state *plait_ckpt_state_of(const plait_ckpt *ck) { return &ck->state; }

const char *plait_ckpt_meta(const plait_ckpt *ck, const char *key) {
    const plait_json *v = plait_json_get(ck->meta, key);
    return v ? v->str : NULL;
}

const char *plait_ckpt_file_meta(const plait_ckpt *ck, plait_ckpt_file file, const char *key) {
    if (file != PLAIT_CKPT_MODEL && file != PLAIT_CKPT_OPTIM) return NULL;
    return plait_st_metadata(ck->st[file], key);
}

const plait_st_file *plait_ckpt_st(const plait_ckpt *ck, plait_ckpt_file file) {
    return file == PLAIT_CKPT_MODEL || file == PLAIT_CKPT_OPTIM ? ck->st[file] : NULL;
}

void plait_ckpt_release_tensor(const plait_ckpt *ck, const char *name) {
    const plait_ckpt_index_tensor *t = ck->index ? plait_ckpt_index_find(ck->index, name) : NULL;
    for (int32_t k = 0; t && ck->shards && k < t->n_slices; k++)
        plait_st_release(ck->shards[t->slices[k].file], t->slices[k].data,
                         4 * (size_t)(t->slices[k].end - t->slices[k].begin));
    for (int f = PLAIT_CKPT_MODEL; !t && f <= PLAIT_CKPT_OPTIM; f++) {
        if (!ck->st[f]) continue;
        const plait_st_tensor *e = plait_st_find(ck->st[f], name);
        if (e) plait_st_release(ck->st[f], e->data, e->bytes);
    }
}

const plait_st_tensor *plait_ckpt_tensor(const plait_ckpt *ck, const char *name) {
    const plait_st_tensor *t = plait_st_find(ck->st[PLAIT_CKPT_MODEL], name);
    return t ? t : plait_st_find(ck->st[PLAIT_CKPT_OPTIM], name);
}

plait_status plait_ckpt_read(const plait_ckpt *ck, const char *name, size_t offset, size_t count, float *dst) {
    const plait_st_tensor *t = plait_ckpt_tensor(ck, name);
    if (!t) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "checkpoint %s has no tensor %s", ck->dir, name);
    if (offset > t->numel || count > t->numel - offset)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "checkpoint %s: elements [%zu, %zu) of %s exceed its %zu",
                               ck->dir, offset, offset + count, name, t->numel);
    memcpy(dst, t->data + offset, count * sizeof *dst);
    return PLAIT_OK;
}

static void shape_text(char *buf, size_t cap, int32_t ndim, const int64_t *shape) {
    size_t n = (size_t)snprintf(buf, cap, "[");
    for (int32_t d = 0; d < ndim && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

/* Refuse tensor `name` of `what` of shape (ndim, shape) for `param` unless
 * the shapes are equal. */
static plait_status same_shape(const char *what, const char *name, int32_t ndim, const int64_t *shape,
                               const plait_param *param) {
    int same = ndim == param->ndim;
    for (int32_t d = 0; same && d < ndim; d++) same = shape[d] == param->shape[d];
    if (same) return PLAIT_OK;
    char a[128], b[128];
    shape_text(a, sizeof a, ndim, shape);
    shape_text(b, sizeof b, param->ndim, param->shape);
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "%s: tensor %s has shape %s but the model's %s is %s; the "
                           "checkpoint was saved from a different [model] configuration",
                           what, name, a, param->name, b);
}

/* Local elements [offset, offset+count) of `param`'s slice from full
 * tensor `t` (`name` of `what`), or else from the slices of a sharded
 * checkpoint's tensor `it` that hold them; the shape must be the
 * parameter's, but for the learned positions of a longer sequence, of
 * which a run at a shorter block_size reads the first rows
 * (train/run_source.c allows it). */
static plait_status read_slice(const plait_st_tensor *t, const plait_ckpt_index_tensor *it, const char *what,
                               const char *name, const plait_param *param, size_t offset, size_t count, float *dst) {
    if (!t && !it) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "%s has no tensor %s", what, name);
    const int32_t ndim = t ? t->ndim : it->ndim;
    const int64_t *shape = t ? t->shape : it->shape;
    int same = ndim == param->ndim;
    for (int32_t d = 0; same && d < ndim; d++) same = shape[d] == param->shape[d];
    const int prefix = !same && strcmp(param->name, "transformer.wpe.weight") == 0 && ndim == 2 && param->ndim == 2 &&
                       shape[1] == param->shape[1] && shape[0] > param->shape[0] && param->shard.parts <= 1;
    plait_status st;
    if (prefix) { /* the first rows are the first elements, row-major */
        if (offset > (size_t)param->numel || count > (size_t)param->numel - offset)
            return plait_set_error(PLAIT_ERR_INVALID_ARG, "reading %s from %s: elements [%zu, %zu) of %lld", name, what,
                                   offset, offset + count, (long long)param->numel);
        if (t) {
            memcpy(dst, t->data + offset, count * sizeof *dst);
            return PLAIT_OK;
        }
        st = plait_ckpt_index_read(it, &param->shard, offset, count, dst, what);
    } else {
        st = same_shape(what, name, ndim, shape, param);
        if (st != PLAIT_OK) return st;
        st = t ? plait_shard_extract(t->ndim, t->shape, &param->shard, t->data, offset, count, dst)
               : plait_ckpt_index_read(it, &param->shard, offset, count, dst, what);
    }
    if (st != PLAIT_OK) return plait_wrap_error(st, "reading %s from %s", name, what);
    return PLAIT_OK;
}

const plait_ckpt_index *plait_ckpt_index_of(const plait_ckpt *ck) { return ck->index; }

plait_status plait_ckpt_read_slice(const plait_ckpt *ck, const char *name, const plait_param *param,
                                   size_t offset, size_t count, float *dst) {
    const plait_st_tensor *t = plait_ckpt_tensor(ck, name);
    return read_slice(t, t ? NULL : plait_ckpt_index_find(ck->index, name), ck->what, name, param, offset, count, dst);
}

/* Tensor `name` of the source: a full tensor its `find` finds, else a
 * sharded checkpoint's slices. */
static plait_status read_named(const plait_ckpt_source *s, const char *name, const plait_param *local, size_t offset,
                               size_t count, float *dst) {
    const plait_st_tensor *t = s->find(s->find_ctx, name);
    const plait_ckpt_index_tensor *it = t || !s->sharded ? NULL : plait_ckpt_index_find(s->sharded->index, name);
    return read_slice(t, it, s->what, name, local, offset, count, dst);
}

/* A slice cut twice (an expert tensor at tp × ep): the block of whole
 * experts its first split holds, read as at tp 1, then cut again
 * (plait_shard_read_twice). */
typedef struct twice_ctx {
    const plait_ckpt_source *s;
    const char *name;
} twice_ctx;

static plait_status read_block(void *ctx, const plait_param *block, float *all) {
    const twice_ctx *c = ctx;
    return read_named(c->s, c->name, block, 0, block->numel, all);
}

static plait_status read_cut_twice(const plait_ckpt_source *s, const char *name, const plait_param *local,
                                   const plait_shard *second, size_t offset, size_t count, float *dst) {
    twice_ctx c = {.s = s, .name = name};
    return plait_shard_read_twice(local, second, read_block, &c, offset, count, dst);
}

static plait_status source_read(void *ctx, int32_t param_index, const char *which, size_t offset, size_t count,
                                float *dst) {
    const plait_ckpt_source *s = ctx;
    if (param_index < 0 || param_index >= s->spec->n_params)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "checkpoint source: no parameter %d", param_index);
    const plait_param *local = NULL;
    for (int32_t i = 0; i < s->local->n_params && !local; i++)
        if (s->local->params[i].index == param_index) local = &s->local->params[i];
    /* a model buffer is in no parameter set: read whole (its unsplit shard) */
    if (!local && (s->spec->params[param_index].flags & PLAIT_PARAM_BUFFER)) local = &s->spec->params[param_index];
    if (!local)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "checkpoint source: parameter %s is not held by this rank",
                               s->spec->params[param_index].name);
    const char *base = plait_ckpt_param_name(s->spec, param_index);
    const plait_shard *second = s->second && s->second[param_index].dim > 0 && s->second[param_index].parts > 1
                                    ? &s->second[param_index]
                                    : NULL;
    if (strcmp(which, "param") == 0) {
        plait_status st = second ? read_cut_twice(s, base, local, second, offset, count, dst)
                                 : read_named(s, base, local, offset, count, dst);
        if (st == PLAIT_ERR_UNSUPPORTED)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "%s has no tensor %s: it was saved from a different model",
                                   s->what, base);
        return st;
    }
    char name[1024];
    if ((size_t)plait_ckpt_optim_name(name, sizeof name, which, base) >= sizeof name)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "tensor name too long: optim.%s.%s", which, base);
    return second ? read_cut_twice(s, name, local, second, offset, count, dst)
                  : read_named(s, name, local, offset, count, dst);
}

static const plait_st_tensor *find_in_ckpt(const void *ctx, const char *name) { return plait_ckpt_tensor(ctx, name); }

void plait_ckpt_source_init_find(plait_ckpt_source *s, plait_ckpt_find_fn find, const void *ctx, const char *what,
                                 const plait_model_spec *spec, const plait_param_set *local) {
    memset(s, 0, sizeof *s);
    s->src.struct_size = sizeof s->src;
    s->src.ctx = s;
    s->src.read = source_read;
    s->find = find;
    s->find_ctx = ctx;
    s->what = what;
    s->spec = spec;
    s->local = local;
}

void plait_ckpt_source_init(plait_ckpt_source *s, const plait_ckpt *ck, const plait_model_spec *spec,
                            const plait_param_set *local) {
    plait_ckpt_source_init_find(s, find_in_ckpt, ck, ck->what, spec, local);
    s->sharded = ck->index ? ck : NULL;
}
