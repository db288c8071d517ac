/*
 * The replicas' start: rank 0 of the DP group broadcasts its parameters, and
 * with [parallel.dp] verify_params every rank checks by checksum that the
 * replicas are identical. The debug key debug_perturb_replicas tests both:
 * every rank initialises identically from the seed, so without help no test
 * could tell whether the broadcast and the checksum work; DP ranks > 0 shift
 * their parameters before the broadcast (which must undo it) or after it
 * (which the checksum must catch).
 *
 * Device-agnostic: parameters are tensor memory, read on the host only in
 * staged chunks through the device's copy (plait/device_util.h).
 */
#include "dp_replicas.h"

#include <stdlib.h>

#include <plait/device_util.h>

const char *const dp_perturb_choices[] = {"off", "before", "after", NULL};

/* A host buffer for staged reads of tensor memory (start-up and debug
 * paths only). NULL with the message set. */
static float *staging_alloc(const plait_host *host) {
    return host->alloc(PLAIT_TENSOR_STAGING_FLOATS * sizeof(float), PLAIT_MEM_HOST_PINNED, 64, "dp staging");
}

/* An expert tensor split over the ep group (plait/model.h: dimension 0):
 * the ranks of the DP group hold different experts, the ranks of
 * mesh->edp_comm the same ones. */
static int ep_split(const plait_param *p) {
    return (p->flags & PLAIT_PARAM_EXPERT) && p->shard.dim == 0 && p->shard.parts > 1;
}

/* FNV-1a over the parameter bytes: cheap, and any difference between replicas
 * shows (the broadcast makes them equal; this proves it). The bytes come to
 * the host in chunks through the device's copy. */
static plait_status params_checksum(const plait_host *host, const plait_param_set *set, uint64_t *out) {
    uint64_t h = 1469598103934665603ull;
    float *staging = staging_alloc(host);
    if (!staging) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (int32_t i = 0; i < set->n_params && st == PLAIT_OK; i++) {
        if (!set->params[i].data) continue; /* held in shards by the optimizer (ZeRO-3) */
        if (ep_split(&set->params[i])) continue; /* another rank's experts differ */
        for (size_t at = 0; at < set->params[i].numel && st == PLAIT_OK; at += PLAIT_TENSOR_STAGING_FLOATS) {
            size_t n = set->params[i].numel - at;
            if (n > PLAIT_TENSOR_STAGING_FLOATS) n = PLAIT_TENSOR_STAGING_FLOATS;
            st = plait_tensor_to_host(host, staging, set->params[i].data + at, n);
            const unsigned char *p = (const unsigned char *)staging;
            for (size_t k = 0; st == PLAIT_OK && k < n * sizeof(float); k++) h = (h ^ p[k]) * 1099511628211ull;
        }
    }
    host->free(staging);
    *out = h;
    return st;
}

/* Parameter i holds values of its own here: not sharded away (ZeRO-3) and not
 * a tied copy sharing storage with an earlier original. */
static int owns_storage(const plait_param_set *set, int32_t i) {
    const float *data = set->params[i].data;
    if (!data) return 0;
    for (int32_t j = 0; j < i; j++)
        if (set->params[j].data == data) return 0;
    return 1;
}

/* Debug only: a round trip through a host buffer (the kernels have no
 * "add a constant"; this path is not worth one). */
static plait_status perturb_replica(const plait_host *host, const plait_mesh *mesh, dp_perturb when,
                                    plait_param_set *set) {
    if (mesh->dp_rank == 0) return PLAIT_OK;
    float delta = 0.01f * (float)mesh->dp_rank;
    float *staging = staging_alloc(host);
    if (!staging) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    for (int32_t i = 0; i < set->n_params && st == PLAIT_OK; i++) {
        if (!owns_storage(set, i)) continue;
        for (size_t at = 0; at < set->params[i].numel && st == PLAIT_OK; at += PLAIT_TENSOR_STAGING_FLOATS) {
            size_t n = set->params[i].numel - at;
            if (n > PLAIT_TENSOR_STAGING_FLOATS) n = PLAIT_TENSOR_STAGING_FLOATS;
            float *v = set->params[i].data + at;
            st = plait_tensor_to_host(host, staging, v, n);
            for (size_t k = 0; st == PLAIT_OK && k < n; k++) staging[k] += delta;
            if (st == PLAIT_OK) st = plait_tensor_from_host(host, v, staging, n);
        }
    }
    host->free(staging);
    host->log(PLAIT_LOG_WARN, "dp", "debug_perturb_replicas: DP rank %d shifted its parameters by %g %s the broadcast",
              mesh->dp_rank, (double)delta, when == DP_PERTURB_BEFORE ? "before" : "after");
    return st;
}

plait_status dp_replicas_start(const plait_host *host, const plait_mesh *mesh, const dp_replica_checks *checks,
                               plait_param_set *set) {
    const plait_coll_api *coll = host->coll;
    plait_comm *dp = mesh->dp_comm;
    plait_status st =
        checks->perturb == DP_PERTURB_BEFORE ? perturb_replica(host, mesh, checks->perturb, set) : PLAIT_OK;
    plait_coll_opts opts = plait_tensor_coll_opts(host, PLAIT_ALGO_AUTO, "dp initial broadcast");
    for (int32_t i = 0; i < set->n_params && st == PLAIT_OK; i++) {
        if (!owns_storage(set, i)) continue;
        plait_param *p = &set->params[i];
        plait_comm *group = ep_split(p) ? mesh->edp_comm : dp; /* NULL: ep = dp x cp, one holder */
        if (group) st = coll->broadcast(group, p->data, p->numel, PLAIT_F32, 0, &opts, NULL);
    }
    if (st == PLAIT_OK && checks->perturb == DP_PERTURB_AFTER) st = perturb_replica(host, mesh, checks->perturb, set);
    if (st != PLAIT_OK || !checks->verify) return st;
    uint64_t mine = 0;
    st = params_checksum(host, set, &mine);
    if (st != PLAIT_OK) return st;
    int n = mesh->dp;
    uint64_t *all = malloc(sizeof(uint64_t) * (size_t)n);
    if (!all) return host->set_error(PLAIT_ERR_NO_MEMORY, "dp: out of memory");
    st = coll->allgather(dp, &mine, all, 1, PLAIT_I64, NULL, NULL); /* host memory: the default kind */
    for (int r = 1; st == PLAIT_OK && r < n; r++)
        if (all[r] != all[0])
            st = host->set_error(PLAIT_ERR_INTERNAL,
                                 "dp: replicas differ after the initial broadcast: DP rank %d (world rank %d) has "
                                 "parameter checksum %016llx, DP rank 0 has %016llx",
                                 r, coll->world_rank(dp, r), (unsigned long long)all[r],
                                 (unsigned long long)all[0]);
    free(all);
    if (st == PLAIT_OK)
        host->log(PLAIT_LOG_DEBUG, "dp", "replicas identical (checksum %016llx)", (unsigned long long)mine);
    return st;
}
