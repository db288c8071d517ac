/* Recovery from memory: snapshots into the launchers' memory and the
 * restart that reads them (run_replica.h). */
#include "train/run_replica.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm/comm.h"
#include "elastic/agent_client.h"
#include "launch/bootstrap.h"
#include "launch/restart.h"
#include "runtime/error.h"
#include "runtime/host_memory.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "host/kept_buffers.h"
#include "train/run_internal.h"
#include "train/run_kept.h"

/* Tags of the replicas' point-to-point messages on the world (user tags,
 * apart from the checkpoint's 0x5a...). */
#define TAG_SNAPSHOT 0x52100000u
#define TAG_RESTORE 0x52200000u
#define MAX_STAGES 64
/* The n_shards of a rank's own image (its kept buffers, shard = its world
 * rank) in its launcher's keeper, beside the stages' (n_shards = pp). */
#define KEPT_SHARDS (-1)

/* One image in flight to or from a peer. */
typedef struct flight_item {
    int recv;            /* 1: a peer's image arriving here */
    int fd;              /* the memfd (receiver) */
    void *map;
    size_t bytes;
    plait_request *req;
    int origin;          /* the node of the owner */
} flight_item;

struct plait_replica_flight {
    int32_t *stage_of;   /* global param -> its stage */
    flight_item item[2 * MAX_STAGES];
    int n;
};

int plait_run_replicas_on(const plait_run *run) {
    if (!plait_agent_present() || plait_config_int(run->cfg, "run", "replica_every") <= 0) return 0;
    plait_agent_set_timeout(plait_config_float(run->cfg, "comm", "timeout"));
    return 1;
}

/* Ranks per host: every launcher of an elastic job runs as many
 * (PLAIT_LOCAL_SIZE); node k holds world ranks k*R .. k*R+R-1. */
static int ranks_per_host(const plait_run *run) {
    const char *v = getenv("PLAIT_LOCAL_SIZE");
    int r = v ? atoi(v) : 0;
    int w = run->world.mesh.world_size;
    if (r < 1 || w % r) r = plait_job_local_size(run->world.job);
    return r < 1 ? 1 : r;
}

/* The rank that keeps a copy of world rank w's image: the same local
 * index on the next host; -1 on a job of one host. */
static int buddy_of(const plait_run *run, int w) {
    int r = ranks_per_host(run), hosts = run->world.mesh.world_size / r;
    if (hosts < 2) return -1;
    return ((w / r + 1) % hosts) * r + w % r;
}

static struct plait_replica_flight *flight(plait_run *run) {
    if (run->replica) return run->replica;
    struct plait_replica_flight *f = calloc(1, sizeof *f);
    const plait_model_spec *spec = run->model.spec;
    if (f) f->stage_of = malloc(sizeof(int32_t) * (size_t)(spec->n_params ? spec->n_params : 1));
    if (!f || !f->stage_of) {
        free(f);
        return NULL;
    }
    for (int32_t g = 0; g < spec->n_params; g++) f->stage_of[g] = run->work.plan.layer_stage[spec->params[g].layer];
    run->replica = f;
    return f;
}

static size_t image_bytes(plait_run *run, int32_t stage) {
    return plait_ckpt_image_size(run->model.spec, run->optim.ops->state_names, run->replica->stage_of, stage);
}

int64_t plait_run_first_snapshot(const plait_run *run, int64_t every) {
    if (every <= 0) return 0;
    int64_t first = (run->step / every + 1) * every;
    return first < run->steps ? first : 0; /* none at the last step: the run's end saves a checkpoint */
}

plait_status plait_run_check_replica_room(plait_run *run, int64_t first) {
    int r = ranks_per_host(run), me = run->world.mesh.world_rank;
    if (first <= 0 || me % r != 0 || plait_restart_count() > 0 || !flight(run)) return PLAIT_OK;
    int host = me / r;
    double need = 0;
    for (int32_t s = 0; s < run->world.mesh.pp; s++) {
        int owner = plait_run_stage_owner(run, s), buddy = buddy_of(run, owner);
        double img = (double)image_bytes(run, s);
        if (owner / r == host) need += 2 * img;
        if (buddy >= 0 && buddy / r == host) need += 2 * img;
    }
    /* each rank's own kept buffers, two snapshots (this rank's stand for
     * its host's others) */
    plait_kept k;
    for (int i = 0; plait_kept_at(i, &k); i++) need += 2.0 * r * 4.0 * (double)k.count;
    plait_host_memory m;
    plait_host_memory_read(&m);
    if (need <= 0 || m.usable == 0 || m.usable == UINT64_MAX || need <= (double)m.usable) return PLAIT_OK;
    char a[32], room[512], what[1024];
    snprintf(what, sizeof what,
             "this host's launcher would hold %s of replicas (the two newest snapshots of the stages this host and "
             "the one before it own) from the snapshot at step %lld on, and %s, so the kernel would end processes "
             "of the job then (the OOM killer); more memory, fewer ranks a host, or [run] replica_every = 0 with "
             "disk checkpoints avoid it",
             plait_bytes_text(need, a, sizeof a), (long long)first, plait_host_memory_room_text(&m, room, sizeof room));
    if (!plait_config_bool(run->cfg, "run", "memory_check")) {
        static int warned; /* once: the check before the first snapshot would say it again */
        if (!warned++) PLAIT_WARN("replica", "%s ([run] memory_check = false: training anyway)", what);
        return PLAIT_OK;
    }
    plait_error_mark_final();
    return plait_set_error(PLAIT_ERR_NO_MEMORY, "%s; [run] memory_check = false starts it anyway", what);
}

/* Build this stage's image on its owner (every rank of the stage takes
 * part in the gathers, as in a checkpoint save). */
static plait_status build(plait_run *run, int *fd, void **map, size_t *bytes, uint32_t *crc) {
    const plait_model_spec *spec = run->model.spec;
    const char *const *states = run->optim.ops->state_names;
    int me = run->world.mesh.world_rank;
    int32_t p = run->work.stage;
    int owner = plait_run_stage_owner(run, p);
    *bytes = image_bytes(run, p);
    plait_status st = PLAIT_OK;
    if (me == owner) {
        st = plait_replica_mem_create(*bytes, fd, map);
        if (st == PLAIT_OK) {
            plait_ckpt_data data;
            plait_run_data_record(run, &data);
            plait_ckpt_image_state s = {
                .step = run->step,
                .optim_step = run->optim.ops->get_step ? run->optim.ops->get_step(run->optim.state) : run->step,
                .seed = run->seed,
                .data_tokens = data.tokens,
                .data_train_tokens = data.train_tokens,
                .data_train_crc32c = data.train_crc32c,
                .stage = p,
                .stages = run->world.mesh.pp,
                .dp = run->world.mesh.dp,
                .tp = run->world.mesh.tp,
                .pp = run->world.mesh.pp};
            st = plait_ckpt_image_begin(*map, *bytes, &s, spec, states, run->replica->stage_of);
        }
    }
    size_t max_local = 1;
    for (int32_t i = 0; i < run->params.set.n_params; i++)
        if (run->params.set.params[i].numel > max_local) max_local = run->params.set.params[i].numel;
    int tp = run->world.mesh.tp;
    float *slice = plait_alloc(max_local * sizeof(float) * (size_t)(tp > 1 ? tp + 1 : 1), PLAIT_MEM_HOST, 64,
                               "replica buffer");
    if (!slice && st == PLAIT_OK) st = PLAIT_ERR_NO_MEMORY;
    /* every rank goes through every tensor in the same order (a failure
     * here is everyone's: the all-reduce below) */
    int ok = st == PLAIT_OK;
    uint32_t tag = TAG_SNAPSHOT - 0x100000u;
    for (int32_t g = 0; ok && g < spec->n_params; g++) {
        if (!plait_ckpt_param_stored(spec, g)) continue;
        for (int k = -1; ok && (k < 0 || (states && states[k])); k++) {
            const char *which = k < 0 ? "param" : states[k];
            float *slot = me == owner ? plait_ckpt_image_slot(*map, spec, g, which) : NULL;
            st = plait_run_gather_full(run, g, which, tag++, slot, slice,
                                       tp > 1 ? slice + max_local : NULL, 0);
            ok = st == PLAIT_OK;
        }
    }
    plait_free(slice);
    if (ok && me == owner) {
        *crc = plait_ckpt_image_seal(*map);
        st = plait_replica_mem_seal(*fd, *bytes, map);
        ok = st == PLAIT_OK;
    }
    int all = ok;
    plait_status cst = plait_comm_allreduce(run->world.comm, &all, &all, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
    if (st == PLAIT_OK && cst != PLAIT_OK) st = cst;
    if (st == PLAIT_OK && !all) st = plait_set_error(PLAIT_ERR_SYSTEM, "another rank could not build its replica");
    return st;
}

/* This rank's kept buffers (onebit's error feedback, train/run_kept.h) as
 * an image of their own in its launcher's keeper, never copied to another
 * host: they serve a restart of the same layout on the same hosts (a rank
 * lost, its host still there), and another layout starts them at zero
 * anyway. */
static plait_status put_kept(plait_run *run) {
    int n = plait_kept_count(), me = run->world.mesh.world_rank;
    if (n == 0) return PLAIT_OK;
    char(*names)[256] = calloc((size_t)n, sizeof *names);
    const char **np = calloc((size_t)n, sizeof *np);
    size_t *counts = calloc((size_t)n, sizeof *counts);
    plait_status st = names && np && counts ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    plait_kept k;
    for (int i = 0; st == PLAIT_OK && i < n && plait_kept_at(i, &k); i++) {
        plait_run_kept_tensor_name(run, names[i], sizeof names[i], me, k.name);
        np[i] = names[i];
        counts[i] = k.count;
    }
    plait_ckpt_image_tensors t = {.n = (size_t)n, .names = np, .counts = counts};
    size_t bytes = st == PLAIT_OK ? plait_ckpt_image_tensors_size(&t) : 0;
    int fd = -1;
    void *map = NULL;
    if (st == PLAIT_OK) st = plait_replica_mem_create(bytes, &fd, &map);
    if (st == PLAIT_OK) {
        plait_ckpt_image_state s = {.step = run->step, .stage = 0, .stages = 1, .dp = run->world.mesh.dp,
                                    .tp = run->world.mesh.tp, .pp = run->world.mesh.pp};
        st = plait_ckpt_image_begin_tensors(map, bytes, &s, &t);
    }
    for (int i = 0; st == PLAIT_OK && i < n && plait_kept_at(i, &k); i++)
        st = plait_kept_to_host(&k, plait_ckpt_image_slot_named(map, names[i]));
    uint32_t crc = 0;
    if (st == PLAIT_OK) {
        crc = plait_ckpt_image_seal(map);
        st = plait_replica_mem_seal(fd, bytes, &map);
    }
    if (st == PLAIT_OK) {
        plait_replica_info info = {.step = run->step, .shard = me, .n_shards = KEPT_SHARDS, .bytes = bytes,
                                   .crc = crc, .origin = me / ranks_per_host(run)};
        st = plait_agent_put(&info, fd);
    }
    if (map) munmap(map, bytes);
    if (fd >= 0) close(fd);
    free(names);
    free(np);
    free(counts);
    return st;
}

plait_status plait_run_replicate(plait_run *run) {
    plait_status st = plait_run_replica_settle(run);
    if (st != PLAIT_OK) return st;
    struct plait_replica_flight *f = flight(run);
    if (!f) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    int me = run->world.mesh.world_rank, r = ranks_per_host(run), pp = run->world.mesh.pp;
    if (pp > MAX_STAGES) return plait_set_error(PLAIT_ERR_UNSUPPORTED, "replicas of more than %d stages", MAX_STAGES);
    int fd = -1;
    void *map = NULL;
    size_t bytes = 0;
    uint32_t crc = 0;
    st = build(run, &fd, &map, &bytes, &crc);
    if (st == PLAIT_OK && plait_restart_count() == 0 &&
        plait_config_int(run->cfg, "run", "debug_die_in_replica") == run->step &&
        plait_config_int(run->cfg, "run", "debug_die_in_save_rank") == me)
        raise(SIGKILL); /* for tests: a rank lost between the stages' images and its own */
    if (st == PLAIT_OK) st = put_kept(run);
    int owner = plait_run_stage_owner(run, run->work.stage) == me;
    if (st == PLAIT_OK && owner) {
        plait_replica_info info = {.step = run->step, .shard = run->work.stage, .n_shards = pp, .bytes = bytes,
                                   .crc = crc, .origin = me / r};
        st = plait_agent_put(&info, fd);
    }
    if (fd >= 0) close(fd); /* the keeper holds its own */
    if (st != PLAIT_OK) {
        if (map) munmap(map, bytes);
        return plait_wrap_error(st, "replica of step %lld", (long long)run->step);
    }
    /* the copies to the next host: posted now, waited for after the next step */
    for (int q = 0; q < pp && st == PLAIT_OK; q++) {
        int o = plait_run_stage_owner(run, q), b = buddy_of(run, o);
        if (b < 0) continue;
        if (me == o) {
            flight_item *it = &f->item[f->n++];
            *it = (flight_item){.recv = 0, .fd = -1, .map = map, .bytes = bytes, .origin = o / r};
            map = NULL;
            st = plait_comm_send(run->world.comm, it->map, bytes, PLAIT_U8, b, TAG_SNAPSHOT + (uint32_t)q, &it->req);
        }
        if (me == b) {
            flight_item *it = &f->item[f->n++];
            *it = (flight_item){.recv = 1, .fd = -1, .bytes = image_bytes(run, q), .origin = o / r};
            st = plait_replica_mem_create(it->bytes, &it->fd, &it->map);
            if (st == PLAIT_OK)
                st = plait_comm_recv(run->world.comm, it->map, it->bytes, PLAIT_U8, o, TAG_SNAPSHOT + (uint32_t)q,
                                     &it->req);
        }
    }
    if (map) munmap(map, bytes); /* no peer to send to (one host) */
    return st;
}

plait_status plait_run_replica_settle(plait_run *run) {
    struct plait_replica_flight *f = run->replica;
    if (!f || !f->n) return PLAIT_OK;
    plait_status st = PLAIT_OK;
    int64_t corrupt = plait_config_int(run->cfg, "run", "debug_corrupt_replica");
    for (int i = 0; i < f->n; i++) {
        flight_item *it = &f->item[i];
        plait_status w = it->req ? plait_request_wait(it->req) : PLAIT_OK;
        it->req = NULL;
        if (w == PLAIT_OK && it->recv) {
            plait_ckpt_image img;
            w = plait_ckpt_image_open(it->map, it->bytes, 0, "a peer's replica", &img);
            if (w == PLAIT_OK && corrupt > 0 && img.state.step >= corrupt && plait_restart_count() == 0) {
                /* for tests: damaged after it arrived, as failing memory would */
                ((unsigned char *)it->map)[it->bytes - 1] ^= 0x5a;
                PLAIT_WARN("train", "debug_corrupt_replica: the copy of shard %d of step %lld kept here is damaged "
                           "on purpose", (int)img.state.stage, (long long)img.state.step);
            }
            plait_replica_info info = {.step = img.state.step, .shard = img.state.stage,
                                       .n_shards = img.state.stages, .bytes = it->bytes, .crc = img.crc,
                                       .origin = it->origin};
            if (w == PLAIT_OK) w = plait_replica_mem_seal(it->fd, it->bytes, &it->map);
            if (w == PLAIT_OK) w = plait_agent_put(&info, it->fd);
            plait_ckpt_image_free(&img);
        }
        if (it->map) munmap(it->map, it->bytes);
        if (it->fd >= 0) close(it->fd);
        it->map = NULL;
        it->fd = -1;
        if (st == PLAIT_OK && w != PLAIT_OK) st = plait_wrap_error(w, "the copy of a replica to or from another host");
    }
    f->n = 0;
    return st;
}

void plait_run_replica_close(plait_run *run) {
    struct plait_replica_flight *f = run->replica;
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        /* a request still posted keeps the buffer: leave its mapping */
        if (f->item[i].map && !f->item[i].req) munmap(f->item[i].map, f->item[i].bytes);
        if (f->item[i].fd >= 0) close(f->item[i].fd);
    }
    free(f->stage_of);
    free(f);
    run->replica = NULL;
}

/* ---- the restart ------------------------------------------------------ */

typedef struct held_image {
    int have;
    void *data;           /* mapped (from this host's keeper) or malloc'd (received) */
    size_t bytes;
    int mapped;
    plait_ckpt_image img; /* parsed */
} held_image;

struct plait_replica_set {
    int64_t step;
    int n;                /* stages */
    held_image shard[MAX_STAGES];
    held_image kept;      /* this rank's kept buffers, when its host holds them */
    char what[96];
};

/* What one rank says it holds: its host's list (local rank 0), or nothing. */
typedef struct inventory {
    int32_t count, pad;
    struct {
        int64_t step;
        int32_t shard, shards;
        uint64_t bytes;
        uint32_t crc, pad;
    } e[64];
} inventory;

static void drop_image(held_image *h) {
    if (!h->have) return;
    plait_ckpt_image_free(&h->img);
    if (h->mapped) munmap(h->data, h->bytes);
    else free(h->data);
    memset(h, 0, sizeof *h);
}

void plait_replica_set_free(plait_replica_set *set) {
    if (!set) return;
    for (int k = 0; k < set->n; k++) drop_image(&set->shard[k]);
    drop_image(&set->kept);
    free(set);
}

/* Map this host's image of (step, k) and check it: 1 usable, 0 absent or
 * damaged (logged). k is a stage, or with stages KEPT_SHARDS a rank whose
 * own image it is. */
static int map_local(int64_t step, int k, int stages, int verify, held_image *h) {
    int fd = -1;
    plait_replica_info info;
    if (plait_agent_get(step, k, stages, &fd, &info) != PLAIT_OK) {
        plait_clear_error();
        return 0;
    }
    const void *map = NULL;
    plait_status st = plait_replica_mem_map(fd, info.bytes, &map);
    close(fd);
    char what[128];
    if (stages == KEPT_SHARDS)
        snprintf(what, sizeof what, "the error feedback of rank %d at step %lld on this host", k, (long long)step);
    else
        snprintf(what, sizeof what, "the replica of stage %d at step %lld on this host", k, (long long)step);
    if (st != PLAIT_OK) {
        PLAIT_WARN("train", "%s cannot be mapped: %s", what, plait_last_error());
        return 0;
    }
    st = plait_ckpt_image_open(map, info.bytes, verify, what, &h->img);
    if (st == PLAIT_OK && (h->img.crc != info.crc || h->img.state.step != step ||
                           h->img.state.stage != (stages == KEPT_SHARDS ? 0 : k)))
        st = plait_set_error(PLAIT_ERR_PROTOCOL, "%s does not match the keeper's record of it", what);
    if (st != PLAIT_OK) {
        PLAIT_WARN("train", "%s; it is not used", plait_last_error());
        munmap((void *)map, info.bytes);
        return 0;
    }
    h->have = 1;
    h->data = (void *)map;
    h->bytes = info.bytes;
    h->mapped = 1;
    return 1;
}

static const plait_st_tensor *find_in_set(const void *ctx, const char *name) {
    const plait_replica_set *set = ctx;
    for (int k = 0; k < set->n; k++) {
        if (!set->shard[k].have) continue;
        const plait_st_tensor *t = plait_ckpt_image_find(&set->shard[k].img, name);
        if (t) return t;
    }
    return set->kept.have ? plait_ckpt_image_find(&set->kept.img, name) : NULL;
}

/* The stages whose images hold this rank's parameters (a tied copy reads
 * its original's). */
static uint64_t stages_needed(plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    uint64_t need = 0;
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        int32_t g = run->params.set.params[i].index;
        const char *name = plait_ckpt_param_name(spec, g);
        for (int32_t h = 0; h < spec->n_params; h++)
            if (plait_ckpt_param_stored(spec, h) && strcmp(spec->params[h].name, name) == 0)
                need |= 1ull << run->replica->stage_of[h];
    }
    return need;
}

/* Every tensor this rank reads is in the images, shaped as the model's. */
static int complete(const plait_replica_set *set, const plait_run *run) {
    const plait_model_spec *spec = run->model.spec;
    const char *const *states = run->optim.ops->state_names;
    for (int32_t i = 0; i < run->params.set.n_params; i++) {
        const plait_param *p = &run->params.set.params[i];
        const char *base = plait_ckpt_param_name(spec, p->index);
        for (int k = -1; k < 0 || (states && states[k]); k++) {
            char name[1024];
            if (k < 0) snprintf(name, sizeof name, "%s", base);
            else plait_ckpt_optim_name(name, sizeof name, states[k], base);
            const plait_st_tensor *t = find_in_set(set, name);
            if (!t || t->ndim != p->ndim) return 0;
            for (int d = 0; d < p->ndim; d++)
                if (t->shape[d] != p->shape[d]) return 0;
        }
    }
    return 1;
}

/* Map this host's images of step s (local rank 0) and share which stages
 * each host holds intact: *complete when every stage is somewhere. */
static plait_status try_step(plait_run *run, uint64_t *bits, int64_t s, plait_replica_set *set, int *complete) {
    int me = run->world.mesh.world_rank, world = run->world.mesh.world_size, r = ranks_per_host(run);
    int pp = run->world.mesh.pp;
    set->n = pp;
    set->step = s;
    uint64_t valid = 0;
    if (me % r == 0)
        for (int k = 0; k < pp; k++) {
            drop_image(&set->shard[k]);
            if (map_local(s, k, pp, 1, &set->shard[k])) valid |= 1ull << k;
        }
    plait_status st = plait_comm_allgather(run->world.comm, &valid, bits, sizeof valid, PLAIT_U8, NULL, NULL);
    if (st != PLAIT_OK) return st;
    uint64_t somewhere = 0;
    for (int w = 0; w < world; w += r) somewhere |= bits[w];
    *complete = somewhere == (pp >= 64 ? ~0ull : (1ull << pp) - 1);
    if (!*complete && me == 0)
        for (int k = 0; k < pp; k++)
            if (!(somewhere >> k & 1))
                PLAIT_WARN("train", "the replicas of step %lld lack stage %d: every copy of it is gone or damaged",
                           (long long)s, k);
    return PLAIT_OK;
}

/* Whether every rank's host holds that rank's kept buffers of step s
 * intact: a rank killed while its snapshot was being taken leaves the
 * stages' images of that step but not its own, and the step before holds
 * both. A rank whose host holds none of its own at any step (a new host,
 * or no kept buffers: they are made after this, so the keeper's list is
 * what says) counts as holding them: no older step has more. The image
 * checked stays mapped in set->kept for the restore. Collective. */
static plait_status kept_everywhere(plait_run *run, int64_t s, plait_replica_set *set, int *yes) {
    plait_replica_info list[64]; /* as many as a keeper lists */
    int me = run->world.mesh.world_rank, n = 0, any = 0, at_s = 0;
    if (plait_agent_list(list, 64, &n) != PLAIT_OK) {
        plait_clear_error();
        n = 0;
    }
    for (int i = 0; i < n; i++)
        if (list[i].n_shards == KEPT_SHARDS && list[i].shard == me) {
            any = 1;
            at_s |= list[i].step == s;
        }
    drop_image(&set->kept);
    *yes = !any || (at_s && map_local(s, me, KEPT_SHARDS, 1, &set->kept));
    return plait_comm_allreduce(run->world.comm, yes, yes, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
}

/* The step a restart resumes at: the newest (not older than the disk's,
 * among at most four tried) whose every stage is intact somewhere and
 * whose every rank's host holds its kept buffers; failing the second, the
 * newest with the first (the missing kept buffers then start at zero, as
 * the restore says). set holds its images on return. Collective. */
static plait_status choose_step(plait_run *run, const inventory *all, uint64_t *bits, int64_t disk_step,
                                plait_replica_set *set, int *chosen) {
    int world = run->world.mesh.world_size, r = ranks_per_host(run), pp = run->world.mesh.pp;
    int64_t tried = INT64_MAX, fallback = -1;
    plait_status st = PLAIT_OK;
    *chosen = 0;
    for (int attempt = 0; st == PLAIT_OK && attempt < 4 && !*chosen; attempt++) {
        int64_t s = -1;
        for (int w = 0; w < world; w += r)
            for (int i = 0; i < all[w].count && i < 64; i++)
                if (all[w].e[i].shards == pp && all[w].e[i].step > s && all[w].e[i].step < tried &&
                    all[w].e[i].step >= disk_step)
                    s = all[w].e[i].step;
        if (s < 0) break;
        tried = s;
        int complete = 0, kept = 0;
        st = try_step(run, bits, s, set, &complete);
        if (st == PLAIT_OK && complete) st = kept_everywhere(run, s, set, &kept);
        if (st != PLAIT_OK || !complete) continue;
        *chosen = kept;
        if (!kept && fallback < 0) fallback = s;
        if (!kept && run->world.mesh.world_rank == 0)
            PLAIT_INFO("train",
                       "the replicas of step %lld lack a rank's error feedback (the rank ended while that "
                       "snapshot was taken): an older snapshot holding every rank's is looked for",
                       (long long)s);
    }
    if (st == PLAIT_OK && !*chosen && fallback >= 0) {
        st = try_step(run, bits, fallback, set, chosen);
        if (st == PLAIT_OK && *chosen && run->world.mesh.world_rank == 0)
            PLAIT_INFO("train", "no snapshot holds every rank's error feedback: resuming from step %lld's",
                       (long long)fallback);
    }
    return st;
}

/* long: four collective steps every rank takes in lockstep (numbered
 * below), sharing the inventory, the chosen step's bits and the set, which
 * each exit frees; read top to bottom, as numbered */
plait_status plait_run_replica_find(plait_run *run, int64_t disk_step, plait_replica_set **out) {
    *out = NULL;
    struct plait_replica_flight *f = flight(run);
    if (!f) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    int me = run->world.mesh.world_rank, world = run->world.mesh.world_size, r = ranks_per_host(run);
    int pp = run->world.mesh.pp, local0 = me % r == 0;
    if (pp > MAX_STAGES) return PLAIT_OK;
    plait_comm *comm = run->world.comm;
    /* 1. what every host holds */
    inventory mine;
    memset(&mine, 0, sizeof mine);
    if (local0) {
        plait_replica_info list[64];
        int n = 0;
        if (plait_agent_list(list, 64, &n) != PLAIT_OK) {
            PLAIT_WARN("train", "cannot ask this host's replica keeper: %s", plait_last_error());
            n = 0;
        }
        int m = 0; /* the stages' images only */
        for (int i = 0; i < n; i++) {
            if (list[i].n_shards <= 0) continue;
            mine.e[m].step = list[i].step;
            mine.e[m].shard = list[i].shard;
            mine.e[m].shards = list[i].n_shards;
            mine.e[m].bytes = list[i].bytes;
            mine.e[m].crc = list[i].crc;
            m++;
        }
        mine.count = m;
    }
    inventory *all = malloc(sizeof *all * (size_t)world);
    uint64_t *bits = malloc(sizeof *bits * (size_t)world);
    plait_replica_set *set = calloc(1, sizeof *set);
    if (!all || !bits || !set) {
        free(all);
        free(bits);
        free(set);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    plait_status st = plait_comm_allgather(comm, &mine, all, sizeof mine, PLAIT_U8, NULL, NULL);
    /* 2. the newest step not older than the disk's whose every stage has an
     * intact copy somewhere, and whose every rank holds its own kept buffers */
    int chosen = 0;
    if (st == PLAIT_OK) st = choose_step(run, all, bits, disk_step, set, &chosen);
    if (st != PLAIT_OK || !chosen) {
        if (st == PLAIT_OK && me == 0)
            PLAIT_WARN("train", "no replica in memory serves this restart (none of step >= %lld with every stage "
                       "intact): resuming from %s", (long long)(disk_step > 0 ? disk_step : 0),
                       disk_step >= 0 ? "the disk checkpoint" : "the start");
        plait_replica_set_free(set);
        free(all);
        free(bits);
        return st;
    }
    /* 3. each rank the images it needs: its own host's, or a holder's */
    uint64_t need = stages_needed(run);
    uint64_t *needs = malloc(sizeof *needs * (size_t)world);
    plait_request **req = calloc((size_t)world * (size_t)pp + (size_t)pp, sizeof *req);
    int n_req = 0;
    if (!needs || !req) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    if (st == PLAIT_OK) st = plait_comm_allgather(comm, &need, needs, sizeof need, PLAIT_U8, NULL, NULL);
    uint64_t here = bits[me - me % r];
    for (int k = 0; st == PLAIT_OK && k < pp; k++) {
        int src = -1;
        for (int w = 0; w < world && src < 0; w += r)
            if (bits[w] >> k & 1) src = w;
        size_t bytes = 0;
        for (int i = 0; i < all[src].count && i < 64; i++)
            if (all[src].e[i].step == set->step && all[src].e[i].shard == k && all[src].e[i].shards == pp)
                bytes = all[src].e[i].bytes;
        held_image *h = &set->shard[k];
        if ((need >> k & 1) && !h->have) {
            if (here >> k & 1) {
                if (!map_local(set->step, k, pp, 0, h)) st = plait_set_error(PLAIT_ERR_PROTOCOL, "replica vanished");
            } else {
                h->data = malloc(bytes ? bytes : 1);
                h->bytes = bytes;
                if (!h->data) st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for a replica of %zu bytes",
                                                   bytes);
                else st = plait_comm_recv(comm, h->data, bytes, PLAIT_U8, src, TAG_RESTORE + (uint32_t)k,
                                          &req[n_req++]);
            }
        }
        if (me == src)
            for (int w = 0; w < world && st == PLAIT_OK; w++)
                if ((needs[w] >> k & 1) && !(bits[w - w % r] >> k & 1))
                    st = plait_comm_send(comm, set->shard[k].data, bytes, PLAIT_U8, w, TAG_RESTORE + (uint32_t)k,
                                         &req[n_req++]);
    }
    for (int i = 0; i < n_req; i++) {
        plait_status w = plait_request_wait(req[i]);
        if (st == PLAIT_OK) st = w;
    }
    for (int k = 0; st == PLAIT_OK && k < pp; k++) {
        held_image *h = &set->shard[k];
        if (h->have || !h->data) continue;
        char what[128];
        snprintf(what, sizeof what, "the replica of stage %d at step %lld received from another host", k,
                 (long long)set->step);
        st = plait_ckpt_image_open(h->data, h->bytes, 1, what, &h->img);
        h->have = st == PLAIT_OK;
    }
    /* 4. every rank has what it reads, or all go to the disk */
    int ok = st == PLAIT_OK && complete(set, run);
    plait_status cst = plait_comm_allreduce(comm, &ok, &ok, 1, PLAIT_I32, PLAIT_MIN, NULL, NULL);
    if (st == PLAIT_OK) st = cst;
    free(needs);
    free(req);
    free(all);
    free(bits);
    if (st != PLAIT_OK || !ok) {
        if (me == 0 && st == PLAIT_OK)
            PLAIT_WARN("train", "the replicas of step %lld do not hold every tensor this layout reads: resuming from "
                       "%s", (long long)set->step, disk_step >= 0 ? "the disk checkpoint" : "the start");
        plait_replica_set_free(set);
        return st;
    }
    /* this rank's own kept buffers, where its host kept them (verified: no
     * other copy exists); absent, the restore starts them at zero. The
     * choice mapped the chosen step's already, but for a step it fell back
     * to, whose kept buffers some rank lacks */
    if (!set->kept.have || set->kept.img.state.step != set->step) {
        drop_image(&set->kept);
        (void)map_local(set->step, me, KEPT_SHARDS, 1, &set->kept);
    }
    snprintf(set->what, sizeof set->what, "the replicas of step %lld in memory", (long long)set->step);
    *out = set;
    return PLAIT_OK;
}

void plait_replica_set_source(plait_replica_set *set, const plait_run *run, plait_ckpt_source *src) {
    plait_ckpt_source_init_find(src, find_in_set, set, set->what, run->model.spec, &run->params.set);
    src->second = run->work.plan.second_shards;
}

void plait_replica_set_state(const plait_replica_set *set, plait_ckpt_state *state) {
    const plait_ckpt_image_state *s = NULL;
    for (int k = 0; k < set->n && !s; k++)
        if (set->shard[k].have) s = &set->shard[k].img.state;
    memset(state, 0, sizeof *state);
    if (!s) return;
    state->step = s->step;
    state->data_step = s->step;
    state->seed = s->seed;
    state->optim_step = s->optim_step;
    state->has_data = 1;
    state->data.tokens = s->data_tokens;
    state->data.train_tokens = s->data_train_tokens;
    state->data.train_crc32c = s->data_train_crc32c;
    state->data.path = "(as the replicas recorded it)";
}

const char *plait_replica_set_what(const plait_replica_set *set) { return set->what; }
