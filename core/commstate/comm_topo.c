/* The host map of a communicator (comm_topo.h). */
#include "commstate/comm_topo.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "runtime/host_identity.h"

/* Renumber `raw` (any ints; equal = same host) densely in order of first
 * appearance into comm->host_of. */
static plait_status number_hosts(plait_comm *comm, const uint64_t *raw) {
    int *host_of = malloc(sizeof(int) * (size_t)comm->size);
    if (!host_of) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the host map of '%s'", comm->name);
    int n_hosts = 0;
    for (int r = 0; r < comm->size; r++) {
        host_of[r] = -1;
        for (int q = 0; q < r && host_of[r] < 0; q++)
            if (raw[q] == raw[r]) host_of[r] = host_of[q];
        if (host_of[r] < 0) host_of[r] = n_hosts++;
    }
    free(comm->host_of);
    comm->host_of = host_of;
    comm->n_hosts = n_hosts;
    return PLAIT_OK;
}

plait_status plait_comm_topo_init_world(plait_comm *comm, const plait_bootstrap *bs) {
    uint64_t *keys = calloc((size_t)comm->size, sizeof *keys);
    if (!keys) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the host map of '%s'", comm->name);
    uint64_t mine = plait_host_key();
    plait_status st = comm->size == 1 ? PLAIT_OK : bs->allgather(bs->ctx, &mine, keys, sizeof mine);
    if (comm->size == 1) keys[0] = mine;
    if (st == PLAIT_OK) st = number_hosts(comm, keys);
    else plait_wrap_error(st, "communicator '%s': exchanging which host each rank runs on", comm->name);
    free(keys);
    return st;
}

plait_status plait_comm_topo_inherit(plait_comm *child, const plait_comm *parent, const int *parent_members) {
    uint64_t *raw = malloc(sizeof *raw * (size_t)child->size);
    if (!raw) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the host map of '%s'", child->name);
    for (int i = 0; i < child->size; i++)
        raw[i] = parent->host_of ? (uint64_t)parent->host_of[parent_members[i]] : 0;
    plait_status st = number_hosts(child, raw);
    free(raw);
    return st;
}

plait_status plait_comm_set_hosts(plait_comm *comm, const int *host_of) {
    uint64_t *raw = malloc(sizeof *raw * (size_t)comm->size);
    if (!raw) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory for the host map of '%s'", comm->name);
    for (int i = 0; i < comm->size; i++) raw[i] = (uint64_t)(int64_t)host_of[i];
    plait_status st = number_hosts(comm, raw);
    free(raw);
    return st;
}

int plait_comm_n_hosts(const plait_comm *comm) { return comm->host_of ? comm->n_hosts : 1; }

int plait_comm_host_of(const plait_comm *comm, int rank) {
    return comm->host_of && rank >= 0 && rank < comm->size ? comm->host_of[rank] : 0;
}

void plait_comm_topo_free(plait_comm *comm) {
    free(comm->host_of);
    comm->host_of = NULL;
    comm->n_hosts = 0;
}
