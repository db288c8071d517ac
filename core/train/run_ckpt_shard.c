/*
 * A sharded save ([run] ckpt_format = sharded): every rank writes the
 * slices it holds to its own shard file at once, and world rank 0, told
 * each rank's slices and file, writes index.json and then the manifest and
 * marker (run_ckpt.c).
 *
 * Who writes what: a rank writes the tensors of its pipeline stage; of a
 * tensor TP holds whole, TP rank 0 alone; within the DP group, the part the
 * optimizer reports as this rank's (export_shard: a ZeRO rank's own range;
 * a tensor the group holds replicated, DP rank 0). An optimizer without
 * export_shard has each slice gathered onto DP rank 0 by export_tensor,
 * which writes it. An expert tensor split over ep is held by the ranks of
 * its edp group: the optimizer's part there (a ZeRO rank's range over that
 * group), or whole by the first ep ranks of the DP group; at tp × ep each
 * tp rank's own slice of their width, a slice cut twice (index.json's
 * version 2). A rank holds one tensor's part at a time beside its own
 * state (a buffer of the largest part it writes: under ZeRO-3 its range
 * of a slice, not the slice). Tied copies and the rank's
 * kept buffers are not in the shard files: the first are their original,
 * the second go to rank 0's optim.safetensors as in a gathered save. A
 * model buffer (the routers' selection bias), whole on every rank of its
 * stage, is written by the stage's first rank (dp x cp and tp rank 0),
 * zeros for the optimizer states its layout has.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_fs.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_name.h"
#include "comm/comm.h"
#include "device/device.h"
#include "device/event_pool.h"
#include "launch/restart.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "train/run_ckpt.h"
#include "train/run_internal.h"

/* Per tensor, what a rank tells rank 0: present, begin, end, then the TP
 * slice (dim, parts, index, groups, padded_len), then a slice cut twice's
 * second split (dim, parts, index; dim -1: none). */
#define REC 11
/* After the tensors: the rank's outcome (1 ok), its file's bytes and CRC32C,
 * whether it wrote one. */
#define TAIL 4

/* One tensor of the save: parameter g's tensor `which` (k < 0: the
 * parameter, else optimizer state k). */
typedef struct part {
    int32_t g;
    int k;
    size_t begin, count; /* of the local slice; count 0: this rank writes none of it */
    const plait_param *lp;
    int buffer; /* a model buffer (PLAIT_PARAM_BUFFER): lp its description's entry, whole */
} part;

static const char *which_of(const plait_run *run, int k) { return k < 0 ? "param" : run->optim.ops->state_names[k]; }

static void tensor_name(const plait_run *run, const part *p, char *buf, size_t cap) {
    const char *pname = plait_ckpt_param_name(run->model.spec, p->g);
    if (p->k < 0) snprintf(buf, cap, "%s", pname);
    else plait_ckpt_optim_name(buf, cap, which_of(run, p->k), pname);
}

/* Whether the tp group holds local slice lp whole (its tp rank 0 writes
 * it): a tensor tp does not split, and an expert tensor split over ep
 * alone (at tp × ep one split twice differs between the tp ranks). */
static int tp_whole(const plait_param *lp) {
    if ((lp->flags & PLAIT_PARAM_EXPERT) && lp->shard.dim == 0 && lp->shard.parts > 1)
        return !plait_param_split_twice(lp);
    return lp->shard.parts <= 1;
}

/* Whether this rank is the first of the ranks holding local slice lp the
 * same (an optimizer without export_shard writes it whole there): DP rank
 * 0, or for an expert tensor split over ep each of the first ep ranks of
 * the dp x cp group, which hold every expert once. */
static int held_first(const plait_run *run, const plait_param *lp) {
    const plait_mesh *m = &run->world.mesh;
    if ((lp->flags & PLAIT_PARAM_EXPERT) && lp->shard.dim == 0 && lp->shard.parts > 1) return m->dpcp_rank < m->ep;
    return m->dp_rank == 0;
}

/* The rank's part of every stored tensor, in global order (parameters, each
 * with its states after it); *most: the largest part's elements, what the
 * export buffer holds (a part of count 0 is never exported into it). */
static plait_status plan_parts(plait_run *run, part *parts, int n_states, size_t *most) {
    const plait_model_spec *spec = run->model.spec;
    int shard_api = PLAIT_OPTIM_HAS(run->optim.ops, export_shard);
    size_t n = 0;
    *most = 0;
    for (int32_t g = 0; g < spec->n_params; g++) {
        if (!plait_ckpt_param_stored(spec, g)) continue;
        int32_t stage = run->work.plan.layer_stage[spec->params[g].layer];
        int32_t l = run->work.stage == stage ? run->params.local_of_global[g] : -1;
        const int buffer = run->work.stage == stage && (spec->params[g].flags & PLAIT_PARAM_BUFFER);
        for (int k = -1; k < n_states; k++, n++) {
            part *p = &parts[n];
            *p = (part){.g = g, .k = k, .lp = l >= 0 ? &run->params.set.params[l] : NULL};
            if (buffer) { /* the model's, whole on the stage's ranks: the first writes it (states: zeros) */
                *p = (part){.g = g, .k = k, .lp = &spec->params[g], .buffer = 1};
                if (run->world.mesh.dpcp_rank == 0 && run->world.mesh.tp_rank == 0) p->count = p->lp->numel;
                if (p->count > *most) *most = p->count;
                continue;
            }
            if (!p->lp) continue;
            /* a slice TP holds whole: TP rank 0 writes it */
            if (tp_whole(p->lp) && run->world.mesh.tp_rank != 0) continue;
            if (shard_api) {
                plait_status st = run->optim.ops->export_shard(run->optim.state, g, which_of(run, k), &p->begin,
                                                               &p->count, NULL);
                if (st != PLAIT_OK) return st;
                if (p->begin + p->count > p->lp->numel)
                    return plait_set_error(PLAIT_ERR_INTERNAL,
                                           "[optim] plugin %s reported elements [%zu, %zu) of %s's slice of %zu",
                                           plait_config_str(run->cfg, "optim", "plugin"), p->begin, p->begin + p->count,
                                           p->lp->name, p->lp->numel);
            } else if (held_first(run, p->lp)) {
                p->count = p->lp->numel;
            }
            if (p->count > *most) *most = p->count;
        }
    }
    return PLAIT_OK;
}

static plait_status check_finite(const char *name, const float *v, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (v[i] != v[i] || v[i] - v[i] != 0.0f)
            return plait_set_error(PLAIT_ERR_INVALID_ARG,
                                   "parameter %s holds %s at element %zu of this rank's slice: not saved (no run "
                                   "could start from it); the training diverged",
                                   name, v[i] != v[i] ? "NaN" : "Inf", i);
    return PLAIT_OK;
}

/* The part of parts[i] into buf: exported now (collective over the DP
 * group for export_tensor: every DP rank calls it, count 0 or not). */
static plait_status export_part(plait_run *run, const part *p, float *buf) {
    size_t begin = p->begin, count = p->count;
    if (p->buffer && p->k < 0) return plait_model_buffer_read(run->model.instance, p->g, buf);
    if (p->buffer) { /* a buffer has no optimizer state */
        memset(buf, 0, count * sizeof *buf);
        return PLAIT_OK;
    }
    if (PLAIT_OPTIM_HAS(run->optim.ops, export_shard))
        return count ? run->optim.ops->export_shard(run->optim.state, p->g, which_of(run, p->k), &begin, &count, buf)
                     : PLAIT_OK;
    return run->optim.ops->export_tensor(run->optim.state, p->g, which_of(run, p->k), count ? buf : NULL);
}

/* Whether this rank takes part in parts[i]'s export at all (its stage
 * holds it; TP rank 0 alone for a tensor TP holds whole). */
static int exports(const plait_run *run, const part *p) {
    if (p->buffer) return p->count > 0; /* no collective: its writer alone */
    return p->lp && !(tp_whole(p->lp) && run->world.mesh.tp_rank != 0);
}

/* Write this rank's shard file: declare, then each part, from `snap` (the
 * parts one after another, copied at the save's step) or, without it,
 * exported one at a time through `buf`. Exporting, every rank takes part
 * in each export_tensor (collective over its DP group) even after its own
 * writing failed, so that no peer waits. *wrote: the file is in place. */
static plait_status write_file(plait_run *run, const char *path, part *parts, size_t n, const float *snap, float *buf,
                               plait_status *wst, int *wrote) {
    int any = 0;
    plait_st_writer *w = NULL;
    for (size_t i = 0; i < n; i++) any |= parts[i].count > 0;
    if (any) *wst = plait_st_writer_create(path, &w);
    char name[1024];
    for (size_t i = 0; i < n && *wst == PLAIT_OK; i++) {
        if (!parts[i].count) continue;
        tensor_name(run, &parts[i], name, sizeof name);
        int64_t shape[1] = {(int64_t)parts[i].count};
        *wst = plait_st_writer_declare(w, name, 1, shape);
    }
    plait_status st = PLAIT_OK;
    for (size_t i = 0; i < n && st == PLAIT_OK; i++) {
        part *p = &parts[i];
        if (!exports(run, p)) continue;
        const float *data = snap;
        if (snap) snap += p->count;
        else if (*wst == PLAIT_OK || !PLAIT_OPTIM_HAS(run->optim.ops, export_shard))
            st = export_part(run, p, buf), data = buf;
        if (st != PLAIT_OK || !p->count || *wst != PLAIT_OK) continue;
        tensor_name(run, p, name, sizeof name);
        if (p->k < 0) *wst = check_finite(name, data, p->count);
        if (*wst == PLAIT_OK) *wst = plait_st_writer_write(w, name, data, p->count);
    }
    if (any && *wst == PLAIT_OK && st == PLAIT_OK) *wst = plait_st_writer_finish(w, NULL);
    if (any && *wst == PLAIT_OK && st == PLAIT_OK) {
        *wst = plait_st_writer_commit(w); /* renamed into place, the directory fsync'd; frees w */
        w = NULL;
        *wrote = *wst == PLAIT_OK;
    }
    plait_st_writer_abort(w);
    return st;
}

/* Rank 0 sees world rank r's shard file, fsync'd and closed before the
 * gather, at its full size: else the ranks do not share the checkpoint
 * directory, and a marker now would name files a resume cannot find. On
 * NFS the stat is a lookup at the server (rank 0 never looked the name up
 * before) and the writer's close flushed the file (close-to-open). */
static plait_status visible(plait_ckpt_writer *w, const char *name, int r, uint64_t bytes) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", plait_ckpt_writer_dir(w), name);
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISREG(sb.st_mode) && (uint64_t)sb.st_size == bytes) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                           "world rank %d wrote its shard %s (%llu bytes), but world rank 0 %s it there: [run] "
                           "ckpt_format = sharded needs the checkpoint directory on a file system every rank shares "
                           "(NFS, Lustre, GPFS...); give [run] out_dir on one, or use ckpt_format = gathered (rank 0 "
                           "writes everything)",
                           r, path, (unsigned long long)bytes,
                           stat(path, &sb) == 0 ? "sees another size of" : "does not see");
}

/* Rank 0: index.json from every rank's records, each shard file in the
 * manifest. */
static plait_status write_index(plait_run *run, plait_ckpt_writer *w, const int64_t *all, const part *parts, size_t n,
                                int64_t step) {
    int world = run->world.mesh.world_size;
    size_t per = n * REC + TAIL;
    plait_ckpt_index ix = {.step = step};
    char(*names)[32] = calloc((size_t)world, sizeof *names);
    const char **files = calloc((size_t)world, sizeof *files);
    int32_t *file_of = calloc((size_t)world, sizeof *file_of);
    plait_ckpt_index_tensor *tensors = calloc(n, sizeof *tensors);
    plait_ckpt_slice *slices = calloc(n * (size_t)world, sizeof *slices);
    char(*tnames)[1024] = calloc(n, sizeof *tnames);
    plait_status st = names && files && file_of && tensors && slices && tnames
                          ? PLAIT_OK
                          : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory writing the checkpoint index");
    for (int r = 0; r < world && st == PLAIT_OK; r++) {
        const int64_t *tail = all + (size_t)r * per + n * REC;
        file_of[r] = -1;
        if (!tail[3]) continue;
        plait_ckpt_shard_file_name(names[r], sizeof names[r], r);
        st = visible(w, names[r], r, (uint64_t)tail[1]);
        file_of[r] = ix.n_files;
        files[ix.n_files++] = names[r];
        if (st == PLAIT_OK) st = plait_ckpt_writer_add_file(w, names[r], (uint64_t)tail[1], (uint32_t)tail[2]);
    }
    const plait_model_spec *spec = run->model.spec;
    for (size_t i = 0; i < n && st == PLAIT_OK; i++) {
        const plait_param *gp = &spec->params[parts[i].g];
        plait_ckpt_index_tensor *t = &tensors[i];
        tensor_name(run, &parts[i], tnames[i], sizeof tnames[i]);
        *t = (plait_ckpt_index_tensor){.name = tnames[i], .ndim = gp->ndim, .slices = slices + i * (size_t)world};
        memcpy(t->shape, gp->shape, (size_t)gp->ndim * sizeof *t->shape);
        for (int r = 0; r < world; r++) {
            const int64_t *rec = all + (size_t)r * per + i * REC;
            if (!rec[0] || file_of[r] < 0) continue;
            t->slices[t->n_slices++] = (plait_ckpt_slice){.file = file_of[r],
                                                          .shard = {(int32_t)rec[3], (int32_t)rec[4], (int32_t)rec[5],
                                                                    (int32_t)rec[6], rec[7]},
                                                          .second = {(int32_t)rec[8], (int32_t)rec[9], (int32_t)rec[10],
                                                                     1, 0},
                                                          .begin = (uint64_t)rec[1],
                                                          .end = (uint64_t)rec[2]};
        }
    }
    ix.files = files;
    ix.tensors = tensors;
    ix.n_tensors = (int32_t)n;
    if (st == PLAIT_OK) st = plait_ckpt_write_index(w, &ix);
    free(names);
    free(files);
    free(file_of);
    free(tensors);
    free(slices);
    free(tnames);
    return st;
}

/* One rank's part of a sharded save, from its plan to its file in place. */
struct plait_shard_job {
    plait_run *run;
    int64_t step;
    char path[4200];
    part *parts;
    size_t n, share; /* parts; the elements this rank writes */
    float *snap;     /* ckpt_async: the share, copied to host memory at the save's step */
    plait_device_event *copied; /* the snapshot's copies on the communication stream end here, or NULL */
    pthread_t thread;
    int has_thread;
    atomic_int written;   /* the writer thread is done (ckpt_async) */
    atomic_int released;  /* [run] debug_ckpt_copy_late: the writer may wait for the copies */
    int late;
    plait_status st, wst; /* the exports' status; the file's */
    int wrote;
    uint64_t bytes;
    uint32_t crc;
    char why[1024]; /* the file's failure, as its writer said it */
};

static void finish_file(plait_shard_job *j) {
    if (j->st == PLAIT_OK && j->wst == PLAIT_OK && j->wrote) j->wst = plait_fs_file_crc32c(j->path, &j->bytes, &j->crc);
    if (j->wst != PLAIT_OK) snprintf(j->why, sizeof j->why, "%s", plait_last_error());
}

static void *writer_main(void *arg) {
    plait_shard_job *j = arg;
    while (j->late && !atomic_load(&j->released)) nanosleep(&(struct timespec){0, 1000000}, NULL);
    if (j->copied) j->wst = plait_device_events_open()->event_synchronize(j->copied);
    if (j->wst != PLAIT_OK) {
        finish_file(j);
        atomic_store(&j->written, 1);
        return NULL;
    }
    j->st = write_file(j->run, j->path, j->parts, j->n, j->snap, NULL, &j->wst, &j->wrote);
    finish_file(j);
    atomic_store(&j->written, 1);
    return NULL;
}

static void job_free(plait_shard_job *j) {
    if (!j) return;
    if (j->copied) {
        if (j->run->snapshot_fence == j->copied) j->run->snapshot_fence = NULL; /* no step came to wait */
        plait_device_events_open()->event_destroy(j->copied);
    }
    plait_device_free(j->snap);
    free(j->parts);
    free(j);
}

/* On a device with streams, the snapshot's copies go on the communication
 * stream after the point the compute stream has reached (the step that
 * saves, its optimizer's writes included), so that the next step's forward
 * and backward compute while they run; the optimizer's next step waits for
 * them (run->snapshot_fence), and the writer thread before it reads the
 * snapshot (j->copied). */
static plait_status begin_copies(plait_shard_job *j, const plait_device_ops *ev) {
    j->copied = ev->event_create();
    plait_device_event *now = plait_event_pool_get(ev);
    if (!j->copied || !now) {
        plait_event_pool_put(ev, now);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "cannot create the checkpoint snapshot's device events");
    }
    plait_status st = ev->event_record(now, PLAIT_STREAM_COMPUTE);
    if (st == PLAIT_OK) st = ev->event_wait(now, PLAIT_STREAM_COMM);
    plait_event_pool_put(ev, now);
    return st;
}

/* ckpt_async: this rank's share copied to host memory, every export at
 * this step (the collective ones in step with the DP group). The memory is
 * the device's page-locked host memory where it has some (cudaHostAlloc on
 * cuda), so the exports' device-to-host copies run at the bus's speed
 * rather than through the driver's bounce buffer; plain host memory
 * elsewhere. */
static plait_status snapshot(plait_shard_job *j) {
    plait_run *run = j->run;
    const size_t bytes = (j->share ? j->share : 1) * sizeof(float);
    j->snap = plait_device_alloc_pinned(bytes, 64, "checkpoint snapshot");
    if (!j->snap) return PLAIT_ERR_NO_MEMORY;
    plait_log(PLAIT_LOG_DEBUG, "checkpoint", "step %lld: the snapshot of this rank's %zu bytes is in %s",
              (long long)j->step, bytes,
              plait_device_is_pinned(j->snap) ? "page-locked host memory"
                                              : "plain host memory (the device has no "
                                                "page-locked memory)");
    const plait_device_ops *ev = plait_device_events_open();
    int overlap = ev && PLAIT_OPTIM_HAS(run->optim.ops, shard_source);
    plait_status st = overlap ? begin_copies(j, ev) : PLAIT_OK;
    float *at = j->snap;
    for (size_t i = 0; i < j->n && st == PLAIT_OK; i++) {
        part *p = &j->parts[i];
        if (!exports(run, p)) continue;
        const float *src = NULL;
        size_t begin, count;
        if (overlap && p->count && !p->buffer)
            st = run->optim.ops->shard_source(run->optim.state, p->g, which_of(run, p->k), &begin, &count, &src);
        if (st == PLAIT_OK && src && count == p->count)
            st = ev->copy_on(PLAIT_STREAM_COMM, at, src, count * sizeof(float), PLAIT_COPY_TO_HOST);
        else if (st == PLAIT_OK) st = export_part(run, p, at);
        at += p->count;
    }
    if (overlap && st == PLAIT_OK) st = ev->event_record(j->copied, PLAIT_STREAM_COMM);
    if (overlap && st == PLAIT_OK) run->snapshot_fence = j->copied;
    if (overlap && st == PLAIT_OK)
        plait_log(PLAIT_LOG_DEBUG, "checkpoint",
                  "step %lld: the snapshot's copies run on the device's communication stream, the next step's "
                  "optimizer after them",
                  (long long)j->step);
    return st;
}

plait_status plait_run_shards_begin(plait_run *run, const char *out_dir, int async, plait_shard_job **out) {
    int n_states = 0;
    for (const char *const *s = run->optim.ops->state_names; s && *s; s++) n_states++;
    plait_shard_job *j = calloc(1, sizeof *j);
    *out = j;
    if (!j) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory planning the sharded checkpoint");
    j->run = run;
    j->step = run->step;
    for (int32_t g = 0; g < run->model.spec->n_params; g++) j->n += plait_ckpt_param_stored(run->model.spec, g);
    j->n *= (size_t)(1 + n_states);
    j->parts = calloc(j->n + 1, sizeof *j->parts);
    if (!j->parts) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory planning the sharded checkpoint");
    char dir[4096], name[64];
    plait_ckpt_dir_path(dir, sizeof dir, out_dir, run->step);
    plait_ckpt_shard_file_name(name, sizeof name, run->world.mesh.world_rank);
    snprintf(j->path, sizeof j->path, "%s/%s", dir, name);
    size_t most = 0;
    j->st = plan_parts(run, j->parts, n_states, &most);
    for (size_t i = 0; i < j->n; i++) j->share += j->parts[i].count;
    if (j->st == PLAIT_OK && async) {
        j->late = plait_config_bool(run->cfg, "run", "debug_ckpt_copy_late");
        j->st = snapshot(j);
        if (j->st == PLAIT_OK && pthread_create(&j->thread, NULL, writer_main, j) == 0) {
            j->has_thread = 1;
            return PLAIT_OK;
        }
        if (j->st == PLAIT_OK) j->st = plait_set_error(PLAIT_ERR_SYSTEM, "cannot start the checkpoint's writer thread");
        return j->st;
    }
    float *buf = j->st == PLAIT_OK && most ? plait_alloc(most * sizeof(float), PLAIT_MEM_HOST, 64, "checkpoint buffer")
                                           : NULL;
    if (j->st == PLAIT_OK && most && !buf) j->st = PLAIT_ERR_NO_MEMORY;
    if (j->st == PLAIT_OK) j->st = write_file(run, j->path, j->parts, j->n, NULL, buf, &j->wst, &j->wrote);
    plait_free(buf);
    finish_file(j);
    atomic_store(&j->written, 1);
    return j->st;
}

int plait_run_shards_written(const plait_shard_job *job) {
    plait_shard_job *j = (plait_shard_job *)job;
    atomic_store(&j->released, 1); /* a step has ended since the save's */
    return atomic_load(&j->written);
}

void plait_run_shards_drop(plait_shard_job *job) {
    if (job) atomic_store(&job->released, 1);
    if (job && job->has_thread) pthread_join(job->thread, NULL);
    job_free(job);
}

plait_status plait_run_shards_end(plait_run *run, plait_shard_job *j, plait_ckpt_writer *w, int *others_failed) {
    int me = run->world.mesh.world_rank, world = run->world.mesh.world_size;
    atomic_store(&j->released, 1);
    if (j->has_thread) pthread_join(j->thread, NULL);
    j->has_thread = 0;
    size_t n = j->n, per = n * REC + TAIL;
    int64_t *mine = calloc(per, sizeof *mine);
    int64_t *all = me == 0 ? calloc(per * (size_t)world, sizeof *all) : NULL;
    if (!mine || (me == 0 && !all)) {
        free(mine);
        free(all);
        job_free(j);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory ending the sharded checkpoint");
    }
    plait_status st = j->st, wst = j->wst;
    if (wst != PLAIT_OK) /* this rank's own file failed: said here, with the file */
        plait_log(PLAIT_LOG_ERROR, "checkpoint", "world rank %d could not write its shard %s: %s", me, j->path, j->why);
    if (st == PLAIT_OK && wst == PLAIT_OK && plait_restart_count() == 0 &&
        plait_config_int(run->cfg, "run", "debug_die_in_save") == j->step &&
        plait_config_int(run->cfg, "run", "debug_die_in_save_rank") == me && me != 0)
        raise(SIGKILL); /* for tests: one rank's shard in place, no index, no marker */
    for (size_t i = 0; i < n; i++) {
        int64_t *rec = mine + i * REC;
        const part *p = &j->parts[i];
        if (!p->count) continue;
        const plait_shard *sh = &p->lp->shard;
        const plait_shard *two = plait_param_split_twice(p->lp) ? &run->work.plan.second_shards[p->g] : NULL;
        int64_t v[REC] = {1,
                          (int64_t)p->begin,
                          (int64_t)(p->begin + p->count),
                          sh->dim,
                          sh->parts,
                          sh->index,
                          sh->groups,
                          sh->padded_len,
                          two ? two->dim : -1,
                          two ? two->parts : 1,
                          two ? two->index : 0};
        memcpy(rec, v, sizeof v);
    }
    int64_t *tail = mine + n * REC;
    tail[0] = st == PLAIT_OK && wst == PLAIT_OK, tail[1] = (int64_t)j->bytes, tail[2] = j->crc, tail[3] = j->wrote;
    /* the barrier: rank 0 learns every rank's slices once each file is in place */
    plait_status cst = plait_comm_gather(run->world.comm, mine, all, per, PLAIT_I64, 0, NULL, NULL);
    if (st == PLAIT_OK) st = cst;
    if (st == PLAIT_OK && wst != PLAIT_OK)
        st = plait_set_error(PLAIT_ERR_SYSTEM, "world rank %d could not write its shard %s: %s", me, j->path, j->why);
    *others_failed = 0;
    for (int r = 0; me == 0 && st == PLAIT_OK && r < world; r++) *others_failed |= !all[(size_t)r * per + n * REC];
    if (me == 0 && st == PLAIT_OK && !*others_failed) st = write_index(run, w, all, j->parts, n, j->step);
    free(mine);
    free(all);
    job_free(j);
    return st;
}
