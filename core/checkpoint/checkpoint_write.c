/* Writing one checkpoint: the two safetensors files, state.json and the
 * COMPLETE marker, each atomically, read back before the marker is written;
 * then the old checkpoints beyond [run] keep_checkpoints pruned
 * (checkpoint.h). */
#include "checkpoint/checkpoint.h"

#include <errno.h>
#include <limits.h>
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
#include "checkpoint/checkpoint_name.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors_crc32c.h"
#include "checkpoint/string_pairs.h"
#include "runtime/out_file.h"

static const char *const file_names[2] = {PLAIT_CKPT_MODEL_FILE, PLAIT_CKPT_OPTIM_FILE};

struct plait_ckpt_writer {
    char out_dir[PATH_MAX];
    char dir[PATH_MAX];
    int64_t step;
    plait_st_writer *st[2];
    plait_string_pairs meta; /* state.json's "metadata" */
    plait_ckpt_crash crash;
    int64_t protect; /* never pruned (the checkpoint the run resumed from); -1 none */
    plait_string_pairs extra;         /* a sharded save's other files, named in the manifest */
    plait_ckpt_file_fact *extra_fact; /* their sizes and checksums */
};

static plait_status mkdir_p(const char *path) {
    char buf[PATH_MAX];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "path too long: %s", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        char saved = *p;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return plait_set_error(PLAIT_ERR_SYSTEM, "creating directory %s: %s", buf, strerror(errno));
        *p = saved;
        if (!saved) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return plait_set_error(PLAIT_ERR_SYSTEM, "%s is not a directory", path);
    return PLAIT_OK;
}

const char *plait_ckpt_writer_dir(const plait_ckpt_writer *w) { return w->dir; }
void plait_ckpt_writer_protect(plait_ckpt_writer *w, int64_t step) { w->protect = step; }
void plait_ckpt_writer_crash_at(plait_ckpt_writer *w, plait_ckpt_crash point) { w->crash = point; }

static void writer_free(plait_ckpt_writer *w) {
    plait_string_pairs_free(&w->meta);
    plait_string_pairs_free(&w->extra);
    free(w->extra_fact);
    free(w);
}

void plait_ckpt_writer_abort(plait_ckpt_writer *w) {
    if (!w) return;
    for (int f = 0; f < 2; f++) plait_st_writer_abort(w->st[f]);
    /* a directory this save left empty (a full disk at its first byte) is
     * no checkpoint: removed, so that it is not taken for an interrupted
     * one; one holding an earlier attempt's files stays */
    if (w->dir[0]) rmdir(w->dir);
    writer_free(w);
}

/* out_dir an existing directory: 0, or the error naming it */
static plait_status out_dir_exists(const char *out_dir) {
    struct stat sb;
    const char *why = stat(out_dir, &sb) != 0 ? (errno == ENOENT ? "removed" : strerror(errno))
                      : !S_ISDIR(sb.st_mode)  ? "not a directory now"
                                              : NULL;
    if (!why) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_SYSTEM, "the run directory %s is gone (%s): the checkpoint does not make it again",
                           out_dir, why);
}

static plait_status begin(const char *out_dir, int64_t step, int make_out_dir, plait_ckpt_writer **out) {
    *out = NULL;
    if (step < 0) return plait_set_error(PLAIT_ERR_INVALID_ARG, "checkpoint step %lld is negative", (long long)step);
    plait_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    snprintf(w->out_dir, sizeof w->out_dir, "%s", out_dir);
    plait_ckpt_dir_path(w->dir, sizeof w->dir, out_dir, step);
    w->step = step;
    w->protect = -1;
    plait_status st = make_out_dir ? mkdir_p(out_dir) : out_dir_exists(out_dir);
    /* Nothing is written through a link out of the run directory. */
    if (st == PLAIT_OK && plait_out_is_link(w->dir))
        st = plait_set_error(PLAIT_ERR_INVALID_ARG,
                             "cannot save the checkpoint of step %lld: %s is a symbolic link (plait does not write "
                             "through links out of the run directory); remove the link and resume",
                             (long long)step, w->dir);
    /* A previous attempt at this step: make it incomplete before touching it. */
    char marker[PATH_MAX];
    snprintf(marker, sizeof marker, "%s/" PLAIT_CKPT_MARKER_FILE, w->dir);
    if (st == PLAIT_OK && unlink(marker) == 0) st = plait_fs_fsync_dir(w->dir);
    if (st == PLAIT_OK && mkdir(w->dir, 0755) != 0 && errno != EEXIST)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "creating checkpoint directory %s: %s", w->dir, strerror(errno));
    /* what a killed earlier attempt at this step left half-written */
    if (st == PLAIT_OK) (void)plait_out_remove_stale_temps(w->dir);
    if (st == PLAIT_OK) st = plait_fs_fsync_dir(out_dir);
    for (int f = 0; f < 2 && st == PLAIT_OK; f++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", w->dir, file_names[f]);
        st = plait_st_writer_create(path, &w->st[f]);
    }
    if (st != PLAIT_OK) {
        plait_ckpt_writer_abort(w);
        return st;
    }
    *out = w;
    return PLAIT_OK;
}

plait_status plait_ckpt_writer_begin(const char *out_dir, int64_t step, plait_ckpt_writer **out) {
    return begin(out_dir, step, 1, out);
}

plait_status plait_ckpt_writer_begin_in_run(const char *out_dir, int64_t step, plait_ckpt_writer **out) {
    return begin(out_dir, step, 0, out);
}

plait_status plait_ckpt_check_replaceable(const char *dir) {
    static const char *const names[] = {PLAIT_CKPT_MODEL_FILE, PLAIT_CKPT_OPTIM_FILE, PLAIT_CKPT_STATE_FILE,
                                        PLAIT_CKPT_MARKER_FILE, PLAIT_CKPT_INDEX_FILE};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        struct stat sb;
        if (lstat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "%s is a directory, where a save of this checkpoint puts its %s file; a save "
                                   "cannot replace it",
                                   path, names[i]);
    }
    return PLAIT_OK;
}

plait_status plait_ckpt_declare(plait_ckpt_writer *w, plait_ckpt_file file, const char *name, int32_t ndim,
                                const int64_t *shape) {
    if (file != PLAIT_CKPT_MODEL && file != PLAIT_CKPT_OPTIM)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "unknown checkpoint file %d", (int)file);
    int other = file == PLAIT_CKPT_MODEL ? PLAIT_CKPT_OPTIM : PLAIT_CKPT_MODEL;
    if (plait_st_writer_has(w->st[other], name))
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s already declared in %s", w->dir, name,
                               file_names[other]);
    return plait_st_writer_declare(w->st[file], name, ndim, shape);
}

plait_status plait_ckpt_declare_model(plait_ckpt_writer *w, const plait_model_spec *spec,
                                      const char *const *state_names) {
    for (int32_t i = 0; i < spec->n_params; i++) {
        if (!plait_ckpt_param_stored(spec, i)) continue;
        const plait_param *p = &spec->params[i];
        plait_status st = plait_ckpt_declare(w, PLAIT_CKPT_MODEL, p->name, p->ndim, p->shape);
        if (st != PLAIT_OK) return st;
    }
    for (size_t s = 0; state_names && state_names[s]; s++)
        for (int32_t i = 0; i < spec->n_params; i++) {
            if (!plait_ckpt_param_stored(spec, i)) continue;
            const plait_param *p = &spec->params[i];
            char name[1024];
            if ((size_t)plait_ckpt_optim_name(name, sizeof name, state_names[s], p->name) >= sizeof name)
                return plait_set_error(PLAIT_ERR_INVALID_ARG, "tensor name too long: optim.%s.%s", state_names[s],
                                       p->name);
            plait_status st = plait_ckpt_declare(w, PLAIT_CKPT_OPTIM, name, p->ndim, p->shape);
            if (st != PLAIT_OK) return st;
        }
    return PLAIT_OK;
}

plait_status plait_ckpt_file_metadata(plait_ckpt_writer *w, plait_ckpt_file file, const char *key, const char *value) {
    if (file != PLAIT_CKPT_MODEL && file != PLAIT_CKPT_OPTIM)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "unknown checkpoint file %d", (int)file);
    return plait_st_writer_metadata(w->st[file], key, value);
}

plait_status plait_ckpt_set_meta(plait_ckpt_writer *w, const char *key, const char *value) {
    ssize_t i = plait_string_pairs_find(&w->meta, key);
    return i >= 0 ? plait_string_pairs_set(&w->meta, (size_t)i, value)
                  : plait_string_pairs_append(&w->meta, key, value);
}

plait_status plait_ckpt_write(plait_ckpt_writer *w, const char *name, const float *data, size_t count) {
    for (int f = 0; f < 2; f++)
        if (plait_st_writer_has(w->st[f], name)) return plait_st_writer_write(w->st[f], name, data, count);
    return plait_set_error(PLAIT_ERR_INVALID_ARG, "%s: tensor %s was not declared", w->dir, name);
}

plait_status plait_ckpt_writer_add_file(plait_ckpt_writer *w, const char *name, uint64_t bytes, uint32_t crc) {
    plait_ckpt_file_fact *f = realloc(w->extra_fact, (w->extra.n + 1) * sizeof *f);
    if (!f) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    w->extra_fact = f;
    f[w->extra.n] = (plait_ckpt_file_fact){bytes, crc};
    return plait_string_pairs_append(&w->extra, name, "");
}

plait_status plait_ckpt_write_index(plait_ckpt_writer *w, const plait_ckpt_index *ix) {
    plait_jbuf b = {0};
    plait_ckpt_index_render(&b, ix);
    if (b.failed) {
        plait_jbuf_free(&b);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory writing %s", PLAIT_CKPT_INDEX_FILE);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_INDEX_FILE, w->dir);
    /* what a reader will check (the slices fit and cover every tensor),
     * checked before anything is written */
    plait_ckpt_index *check = NULL;
    plait_status st = plait_ckpt_index_parse(b.data, b.len, path, &check);
    plait_ckpt_index_free(check);
    if (st != PLAIT_OK) st = plait_wrap_error(st, "the ranks' slices make no valid index");
    if (st == PLAIT_OK) st = plait_fs_write_file_atomic(path, b.data, b.len);
    if (st == PLAIT_OK)
        st = plait_ckpt_writer_add_file(w, PLAIT_CKPT_INDEX_FILE, b.len, plait_crc32c(0, b.data, b.len));
    plait_jbuf_free(&b);
    return st;
}

static plait_status write_state(const plait_ckpt_writer *w, const plait_ckpt_state *s,
                                const plait_ckpt_file_fact *facts, uint32_t *crc_out) {
    plait_jbuf b = {0};
    plait_ckpt_extra_files extra = {w->extra.n, w->extra.key, w->extra_fact};
    plait_ckpt_state_render(&b, s, facts, &extra, w->meta.key, w->meta.val, w->meta.n);
    if (b.failed) {
        plait_jbuf_free(&b);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory writing %s", PLAIT_CKPT_STATE_FILE);
    }
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/" PLAIT_CKPT_STATE_FILE, w->dir);
    *crc_out = plait_crc32c(0, b.data, b.len);
    plait_status st = plait_fs_write_file_atomic(path, b.data, b.len);
    plait_jbuf_free(&b);
    return st;
}

static plait_status simulated_crash(plait_ckpt_writer *w) {
    for (int f = 0; f < 2; f++) plait_st_writer_abandon(w->st[f]);
    plait_status st = plait_set_error(PLAIT_ERR_INTERNAL, "simulated crash while saving %s", w->dir);
    writer_free(w);
    return st;
}

plait_status plait_ckpt_commit(plait_ckpt_writer *w, const plait_ckpt_state *state, int keep, int64_t keep_every) {
    if (state->step != w->step) {
        plait_status st = plait_set_error(PLAIT_ERR_INVALID_ARG, "checkpoint %s: state says step %lld", w->dir,
                                          (long long)state->step);
        plait_ckpt_writer_abort(w);
        return st;
    }
    plait_ckpt_file_fact facts[2] = {{0, 0}, {0, 0}};
    plait_status st = PLAIT_OK;
    for (int f = 0; f < 2 && st == PLAIT_OK; f++) {
        st = plait_st_writer_finish(w->st[f], NULL);
        if (st == PLAIT_OK && w->crash == PLAIT_CKPT_CRASH_BEFORE_RENAME) return simulated_crash(w);
        if (st == PLAIT_OK) {
            st = plait_st_writer_commit(w->st[f]);
            if (st == PLAIT_OK) w->st[f] = NULL;
        }
    }
    /* Read back what landed: the manifest checksums the bytes on disk. */
    for (int f = 0; f < 2 && st == PLAIT_OK; f++) {
        char path[PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", w->dir, file_names[f]);
        st = plait_fs_file_crc32c(path, &facts[f].bytes, &facts[f].crc);
    }
    uint32_t state_crc = 0;
    if (st == PLAIT_OK) st = write_state(w, state, facts, &state_crc);
    if (st == PLAIT_OK && w->crash == PLAIT_CKPT_CRASH_BEFORE_MARKER) return simulated_crash(w);
    if (st == PLAIT_OK) {
        char marker[128], path[PATH_MAX];
        int n = snprintf(marker, sizeof marker,
                         PLAIT_CKPT_FORMAT_NAME " step=%lld " PLAIT_CKPT_STATE_FILE " crc32c=%08x\n",
                         (long long)w->step, state_crc);
        snprintf(path, sizeof path, "%s/" PLAIT_CKPT_MARKER_FILE, w->dir);
        st = plait_fs_write_file_atomic(path, marker, (size_t)n);
    }
    if (st != PLAIT_OK) {
        plait_status err = plait_wrap_error(st, "saving checkpoint %s", w->dir);
        plait_ckpt_writer_abort(w);
        return err;
    }
    uint64_t total = facts[0].bytes + facts[1].bytes;
    for (size_t i = 0; i < w->extra.n; i++) total += w->extra_fact[i].bytes;
    plait_log(PLAIT_LOG_INFO, "checkpoint", "saved step %lld to %s (%.1f MB%s)", (long long)w->step, w->dir,
              (double)total / 1e6, w->extra.n ? ", sharded" : "");
    char out_dir[PATH_MAX];
    snprintf(out_dir, sizeof out_dir, "%s", w->out_dir);
    int64_t saved = w->step, protect = w->protect;
    writer_free(w);
    if (keep > 0 && plait_ckpt_prune(out_dir, keep, keep_every, saved, protect) != PLAIT_OK)
        plait_log(PLAIT_LOG_WARN, "checkpoint", "the checkpoint was saved but pruning old ones failed: %s",
                  plait_last_error());
    return PLAIT_OK;
}
