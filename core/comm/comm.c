/* Communicator creation, split, release and counters (the failure state is
 * comm_state.c, the names of algorithms coll_names.c). */
#include "comm/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "staging/staging.h"
#include "commstate/comm_topo.h"
#include "commstate/comm_watchdog.h"
#include "commstate/request.h"
#include "plugin/loader.h"
#include "runtime/error.h"
#include "runtime/hash.h"
#include "runtime/memory.h"
#include "runtime/log.h"




void plait_comm_settings_default(plait_comm_settings *s) {
    s->timeout_s = 300.0;
    s->algorithm = PLAIT_ALGO_AUTO;
    s->check_collectives = 0;
    s->staging_chunk = (size_t)4 << 20;
    s->device = NULL;
}

plait_status plait_comm_settings_from_config(const plait_config *cfg, plait_comm_settings *s) {
    plait_comm_settings_default(s);
    plait_value v;
    plait_status st = plait_config_get(cfg, "comm", "timeout", &v);
    if (st != PLAIT_OK) return st;
    s->timeout_s = v.f;
    if ((st = plait_config_get(cfg, "comm", "algorithm", &v)) != PLAIT_OK) return st;
    int algo = plait_coll_algo_parse(v.s);
    if (algo < 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "[comm] algorithm = %s is not an algorithm",
                               v.s ? v.s : "");
    s->algorithm = (plait_coll_algo)algo;
    if ((st = plait_config_get(cfg, "comm", "check_collectives", &v)) != PLAIT_OK) return st;
    s->check_collectives = (int)v.i;
    if ((st = plait_config_get(cfg, "comm", "staging_chunk", &v)) != PLAIT_OK) return st;
    s->staging_chunk = (size_t)v.i;
    return PLAIT_OK;
}


/* ---- ids ------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x) { return plait_mix64(x + 0x9e3779b97f4a7c15ull); }

/* A child's comm id from facts every member shares: the parent's id, which
 * split of the parent this is, the color, and which of the child's two
 * plugin communicators. A 32-bit hash: collisions among a job's few dozen
 * communicators are vanishingly unlikely (about n²/2^33). */
static uint32_t child_comm_id(uint32_t parent, uint32_t split_no, uint32_t color, uint32_t which) {
    uint64_t h = splitmix64(parent);
    h = splitmix64(h ^ split_no);
    h = splitmix64(h ^ ((uint64_t)color << 1));
    h = splitmix64(h ^ which);
    uint32_t id = (uint32_t)(h ^ (h >> 32));
    return id ? id : 1;
}

/* ---- creation -------------------------------------------------------- */

static int ops_complete(const plait_comm_ops *ops) {
    return ops && ops->struct_size >= offsetof(plait_comm_ops, native_coll) + sizeof ops->native_coll &&
           ops->init && ops->derive && ops->destroy && ops->isend && ops->irecv && ops->test &&
           ops->wait;
}

static plait_comm *comm_alloc(const char *name, int rank, int size) {
    plait_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->world_ranks = calloc((size_t)size, sizeof(int));
    if (!c->world_ranks) {
        free(c);
        return NULL;
    }
    snprintf(c->name, sizeof c->name, "%s", name && *name ? name : "comm");
    c->rank = rank;
    c->size = size;
    atomic_init(&c->last_algo, -1);
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->work_cond, NULL);
    pthread_cond_init(&c->done_cond, NULL);
    pthread_mutex_init(&c->p2p_lock, NULL);
    return c;
}

static void comm_release_memory(plait_comm *c) {
    pthread_mutex_destroy(&c->lock);
    pthread_cond_destroy(&c->work_cond);
    pthread_cond_destroy(&c->done_cond);
    pthread_mutex_destroy(&c->p2p_lock);
    if (!c->scratch_leaked) plait_free(c->scratch);
    free(c->failure);
    plait_comm_topo_free(c);
    free(c->world_ranks);
    free(c);
}

/* How long the plugin's init() or derive() for `c` may wait on its members:
 * the bootstrap's timeout, which a rendezvous gives up after, or the
 * communicator's if longer. */
static double setup_timeout(const plait_comm *c, const plait_bootstrap *bs) {
    return bs && bs->timeout_s > c->settings.timeout_s ? bs->timeout_s : c->settings.timeout_s;
}

/* destroy() one plugin communicator of `c`, watched: a plugin waiting there
 * on a peer that is gone would hang the rank at its end. */
static void destroy_plugin(const plait_comm *c, void *plugin_comm) {
    plait_watchdog_destroy(c->ops, plugin_comm, c->name, c->settings.timeout_s);
}

/* derive() one plugin communicator over `members` (parent ranks) with a
 * fresh bootstrap from the factory. */
static plait_status derive_plugin(const plait_comm *child, void *parent_plugin, uint32_t comm_id,
                                  const int *members, void **out) {
    const plait_bootstrap_factory *f = &child->factory;
    if (!f->create)
        return plait_set_error(PLAIT_ERR_INVALID_ARG,
                               "creating communicator '%s': no bootstrap factory to build its "
                               "rendezvous (the world was created without one)",
                               child->name);
    plait_bootstrap *bs = NULL;
    plait_status st = f->create(f->ctx, comm_id, child->rank, child->size, child->world_ranks, &bs);
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "creating the rendezvous for communicator '%s' (id %08x)",
                                child->name, comm_id);
    plait_comm_derive d = {.struct_size = sizeof d,
                           .bootstrap = bs,
                           .size = child->size,
                           .members = members,
                           .rank = child->rank};
    plait_plugin_call call;
    plait_watchdog_enter_setup(&call, child->ops, "derive", child->name, setup_timeout(child, bs));
    plait_status made = child->ops->derive(parent_plugin, &d, out);
    st = plait_watchdog_leave_setup(&call, made);
    if (made == PLAIT_OK && st != PLAIT_OK) { /* made, then refused */
        destroy_plugin(child, *out);
        *out = NULL;
    }
    if (f->destroy) f->destroy(f->ctx, bs);
    if (st != PLAIT_OK)
        return plait_wrap_error(st, "comm plugin derive() for communicator '%s' (rank %d of %d)",
                                child->name, child->rank, child->size);
    return PLAIT_OK;
}

plait_status plait_comm_create_world(const plait_comm_ops *ops, const plait_config *config,
                                     const plait_bootstrap *bootstrap,
                                     const plait_bootstrap_factory *factory,
                                     const plait_comm_settings *settings, const char *name,
                                     plait_comm **out) {
    *out = NULL;
    if (!ops_complete(ops))
        return plait_set_error(PLAIT_ERR_ABI, "the comm plugin's function table lacks a required "
                                              "function (init, derive, destroy, isend, irecv, "
                                              "test, wait) or is too small");
    if (!bootstrap || bootstrap->size < 1 || bootstrap->rank < 0 || bootstrap->rank >= bootstrap->size)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "world bootstrap missing or has rank %d of %d",
                               bootstrap ? bootstrap->rank : -1, bootstrap ? bootstrap->size : 0);
    plait_comm *c = comm_alloc(name ? name : "world", bootstrap->rank, bootstrap->size);
    if (!c) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory creating the world communicator");
    for (int i = 0; i < c->size; i++) c->world_ranks[i] = i;
    c->id = bootstrap->comm_id;
    c->ops = ops;
    if (settings)
        c->settings = *settings;
    else
        plait_comm_settings_default(&c->settings);
    if (c->settings.device) {
        /* a host kind or no copy: no device */
        if (!plait_mem_is_host(c->settings.device->kind) && c->settings.device->copy) c->device = *c->settings.device;
    } else {
        (void)plait_comm_device_open(&c->device); /* none: stays host memory */
    }
    c->settings.device = NULL; /* the caller's record is not kept: c->device is */
    if (factory) c->factory = *factory;

    plait_comm_init ia = {.struct_size = sizeof ia,
                          .host = plait_plugin_host(),
                          .config = config,
                          .bootstrap = bootstrap,
                          .world_rank = c->rank,
                          .world_size = c->size};
    plait_plugin_call call;
    plait_watchdog_enter_setup(&call, ops, "init", c->name, setup_timeout(c, bootstrap));
    plait_status made = ops->init(&ia, &c->pcoll);
    plait_status st = plait_watchdog_leave_setup(&call, made);
    if (made == PLAIT_OK && st != PLAIT_OK) destroy_plugin(c, c->pcoll); /* made, then refused */
    if (st != PLAIT_OK) {
        plait_wrap_error(st, "comm plugin init() on world rank %d of %d", c->rank, c->size);
        comm_release_memory(c);
        return st;
    }
    st = plait_comm_topo_init_world(c, bootstrap);
    int *members = st == PLAIT_OK ? malloc((size_t)c->size * sizeof(int)) : NULL;
    if (!members) {
        destroy_plugin(c, c->pcoll);
        if (st != PLAIT_OK) {
            comm_release_memory(c);
            return st;
        }
        comm_release_memory(c);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < c->size; i++) members[i] = i;
    st = derive_plugin(c, c->pcoll, child_comm_id(c->id, 0xffffffffu, 0, 1), members, &c->pp2p);
    free(members);
    if (st != PLAIT_OK) {
        destroy_plugin(c, c->pcoll);
        comm_release_memory(c);
        return st;
    }
    PLAIT_DEBUG("comm", "world communicator ready: rank %d of %d", c->rank, c->size);
    *out = c;
    return PLAIT_OK;
}

/* ---- exclusive use (split's derive) ------------------------------------ */

/* Wait until no collective is queued or running, then hold `busy`. */
static void acquire_exclusive(plait_comm *c) {
    pthread_mutex_lock(&c->lock);
    while (c->busy || c->head) pthread_cond_wait(&c->done_cond, &c->lock);
    c->busy = 1;
    pthread_mutex_unlock(&c->lock);
}

static void release_exclusive(plait_comm *c) {
    pthread_mutex_lock(&c->lock);
    c->busy = 0;
    pthread_cond_broadcast(&c->work_cond);
    pthread_cond_broadcast(&c->done_cond);
    pthread_mutex_unlock(&c->lock);
}

/* ---- split ---------------------------------------------------------------- */

struct member_sort {
    int key, parent_rank;
};

static int member_cmp(const void *a, const void *b) {
    const struct member_sort *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->parent_rank > y->parent_rank) - (x->parent_rank < y->parent_rank);
}

/* Every member's (color, key) into `all`: over the communicator itself when
 * its transport moves host memory, else through the rendezvous store (a
 * device-memory transport such as NCCL cannot carry this host array). */
static plait_status exchange_colors(plait_comm *comm, uint32_t split_no, const int32_t mine[2], int32_t *all,
                                    const char *name) {
    if (comm->ops->mem_kinds & PLAIT_MEM_KIND_BIT(PLAIT_MEM_HOST)) {
        plait_coll_args a = {.kind = PLAIT_COLL_ALLGATHER,
                             .send = mine,
                             .recv = all,
                             .count = 2,
                             .dtype = PLAIT_I32,
                             .algo = PLAIT_ALGO_AUTO,
                             .internal = 1};
        snprintf(a.label, sizeof a.label, "split into '%s'", name ? name : "");
        return plait_comm_submit(comm, &a, NULL);
    }
    const plait_bootstrap_factory *f = &comm->factory;
    if (!f->create)
        return plait_set_error(PLAIT_ERR_INVALID_ARG, "split of '%s': no bootstrap factory for the exchange",
                               comm->name);
    plait_bootstrap *bs = NULL;
    /* color 0xffffffff is never a child's (colors are non-negative ints) */
    plait_status st = f->create(f->ctx, child_comm_id(comm->id, split_no, 0xffffffffu, 2), comm->rank, comm->size,
                                comm->world_ranks, &bs);
    if (st == PLAIT_OK) {
        st = bs->allgather(bs->ctx, mine, all, 2 * sizeof(int32_t));
        if (f->destroy) f->destroy(f->ctx, bs);
    }
    return st == PLAIT_OK ? st : plait_wrap_error(st, "split of '%s' into '%s': exchanging colors", comm->name,
                                                  name ? name : "");
}

plait_status plait_comm_split(plait_comm *comm, int color, int key, const char *name,
                              plait_comm **out) {
    *out = NULL;
    plait_status st = plait_comm_check_usable(comm);
    if (st != PLAIT_OK) return st;
    int32_t mine[2] = {color < 0 ? -1 : color, key};
    int32_t *all = malloc((size_t)comm->size * sizeof mine);
    struct member_sort *ms = malloc((size_t)comm->size * sizeof *ms);
    int *members = malloc((size_t)comm->size * sizeof(int));
    if (!all || !ms || !members) {
        free(all), free(ms), free(members);
        return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory in split");
    }
    pthread_mutex_lock(&comm->lock);
    uint32_t split_no = comm->n_splits++;
    pthread_mutex_unlock(&comm->lock);
    st = exchange_colors(comm, split_no, mine, all, name);
    if (st != PLAIT_OK || color < 0) goto done;

    int n = 0;
    for (int i = 0; i < comm->size; i++)
        if (all[2 * i] == mine[0]) ms[n++] = (struct member_sort){all[2 * i + 1], i};
    qsort(ms, (size_t)n, sizeof *ms, member_cmp);
    int my_rank = -1;
    for (int i = 0; i < n; i++) {
        members[i] = ms[i].parent_rank;
        if (members[i] == comm->rank) my_rank = i;
    }
    if (my_rank < 0) {
        st = plait_set_error(PLAIT_ERR_INTERNAL, "split: rank %d not among its own color's members",
                             comm->rank);
        goto done;
    }
    plait_comm *child = comm_alloc(name, my_rank, n);
    if (!child) {
        st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory in split");
        goto done;
    }
    for (int i = 0; i < n; i++) child->world_ranks[i] = comm->world_ranks[members[i]];
    child->ops = comm->ops;
    child->settings = comm->settings;
    child->device = comm->device;
    child->factory = comm->factory;
    child->parent = comm;
    child->id = child_comm_id(comm->id, split_no, (uint32_t)color, 0);
    if ((st = plait_comm_topo_inherit(child, comm, members)) != PLAIT_OK) {
        comm_release_memory(child);
        goto done;
    }

    acquire_exclusive(comm);
    st = derive_plugin(child, comm->pcoll, child->id, members, &child->pcoll);
    release_exclusive(comm);
    if (st == PLAIT_OK) {
        pthread_mutex_lock(&comm->p2p_lock);
        st = derive_plugin(child, comm->pp2p, child_comm_id(comm->id, split_no, (uint32_t)color, 1),
                           members, &child->pp2p);
        pthread_mutex_unlock(&comm->p2p_lock);
        if (st != PLAIT_OK) destroy_plugin(child, child->pcoll);
    }
    if (st != PLAIT_OK) {
        comm_release_memory(child);
        goto done;
    }
    pthread_mutex_lock(&comm->lock);
    comm->children++;
    pthread_mutex_unlock(&comm->lock);
    PLAIT_DEBUG("comm", "split '%s' from '%s': color %d, rank %d of %d (id %08x)", child->name,
                comm->name, color, child->rank, child->size, child->id);
    *out = child;
done:
    free(all);
    free(ms);
    free(members);
    return st;
}

/* ---- release ----------------------------------------------------------- */

void plait_comm_free(plait_comm *comm) {
    if (!comm) return;
    pthread_mutex_lock(&comm->lock);
    int children = comm->children;
    pthread_mutex_unlock(&comm->lock);
    if (children > 0) {
        PLAIT_ERROR("comm", "comm_free('%s'): %d communicator(s) split from it are still alive; "
                            "free children first (leaking '%s')",
                    comm->name, children, comm->name);
        return;
    }
    pthread_mutex_lock(&comm->lock);
    while (comm->head || comm->busy) pthread_cond_wait(&comm->done_cond, &comm->lock);
    comm->stopping = 1;
    pthread_cond_broadcast(&comm->work_cond);
    int started = comm->worker_started;
    pthread_mutex_unlock(&comm->lock);
    if (started) pthread_join(comm->worker, NULL);
    plait_staging_free(comm->staging, comm->scratch_leaked);
    if (!comm->scratch_leaked) {
        destroy_plugin(comm, comm->pp2p);
        destroy_plugin(comm, comm->pcoll);
    }
    if (comm->parent) {
        pthread_mutex_lock(&comm->parent->lock);
        comm->parent->children--;
        pthread_mutex_unlock(&comm->parent->lock);
    }
    comm_release_memory(comm);
}

/* ---- counters, settings ---------------------------------------------------- */

void plait_comm_get_stats(const plait_comm *comm, plait_comm_stats *out) {
    plait_comm_stats s = {.struct_size = sizeof s};
    plait_comm *c = (plait_comm *)(uintptr_t)comm;
    s.bytes_sent = atomic_load(&c->bytes_sent);
    s.bytes_received = atomic_load(&c->bytes_received);
    s.collectives = atomic_load(&c->collectives);
    s.wait_seconds = (double)atomic_load(&c->wait_ns) * 1e-9;
    size_t n = out->struct_size < sizeof s ? out->struct_size : sizeof s;
    uint32_t keep = out->struct_size;
    memcpy(out, &s, n);
    out->struct_size = keep;
}

int plait_comm_last_algorithm(const plait_comm *comm) {
    return atomic_load(&((plait_comm *)(uintptr_t)comm)->last_algo);
}

void plait_comm_set_algorithm(plait_comm *comm, plait_coll_algo algo) { comm->settings.algorithm = algo; }
void plait_comm_set_timeout(plait_comm *comm, double timeout_s) { comm->settings.timeout_s = timeout_s; }


