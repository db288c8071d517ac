/* The store's record of its gathers and their conflicts (store_gather.h). */
#include "launch/store_gather.h"

#include <stdio.h>
#include <string.h>

/* The join of the job (launch/bootstrap.c): its members are world ranks,
 * so a conflict there is a launch mistake the message can name. */
#define JOIN_PREFIX "job/join/"

typedef struct who {
    uint32_t n;     /* sizes only */
    int32_t rank;
    char peer[64];
} who;

int store_gathers_init(store_gathers *g) {
    memset(g, 0, sizeof *g);
    if (store_table_init(&g->sizes) == 0 && store_table_init(&g->owners) == 0 && store_table_init(&g->failed) == 0)
        return 0;
    store_gathers_free(g);
    return -1;
}

void store_gathers_free(store_gathers *g) {
    store_table_free(&g->sizes);
    store_table_free(&g->owners);
    store_table_free(&g->failed);
}

const char *store_gathers_failed(const store_gathers *g, const char *prefix, size_t plen) {
    store_kv *e = store_table_find(&g->failed, prefix, plen);
    return e ? (const char *)e->val : NULL;
}

static const char *fail(store_gathers *g, const char *prefix, size_t plen, const char *why) {
    if (store_table_set(&g->failed, prefix, plen, why, strlen(why) + 1) != 0) return NULL;
    return store_gathers_failed(g, prefix, plen);
}

static who describe(uint32_t n, int32_t rank, const char *peer) {
    who w = {.n = n, .rank = rank};
    snprintf(w.peer, sizeof w.peer, "%s", peer);
    return w;
}

const char *store_gathers_check(store_gathers *g, const store_table *table, const char *prefix, size_t plen,
                                uint32_t n, uint32_t index, int32_t rank, const char *peer, const void *val,
                                size_t vlen) {
    const char *failed = store_gathers_failed(g, prefix, plen);
    if (failed) return failed;
    int join = plen == strlen(JOIN_PREFIX) && memcmp(prefix, JOIN_PREFIX, plen) == 0;
    char why[768];
    who me = describe(n, rank, peer);
    store_kv *first = store_table_find(&g->sizes, prefix, plen);
    if (!first) {
        (void)store_table_set(&g->sizes, prefix, plen, &me, sizeof me);
    } else {
        const who *f = (const who *)first->val;
        if (f->n != n) {
            if (join)
                snprintf(why, sizeof why,
                         "world rank %d (from %s) joins a job of %u ranks, world rank %d (from %s) counts %u: every "
                         "host's launcher must be given the same layout ([parallel] dp x tp x pp) and the same "
                         "--nnodes",
                         (int)rank, peer, n, (int)f->rank, f->peer, f->n);
            else
                snprintf(why, sizeof why,
                         "gather '%.*s': world rank %d (from %s) counts %u members, world rank %d (from %s) counts "
                         "%u (ranks of different plait versions or configurations?)",
                         (int)plen, prefix, (int)rank, peer, n, (int)f->rank, f->peer, f->n);
            return fail(g, prefix, plen, why);
        }
    }
    char key[1100];
    int kl = snprintf(key, sizeof key, "%.*s%u", (int)plen, prefix, index);
    if (kl < 0 || (size_t)kl >= sizeof key) return NULL;
    store_kv *old = store_table_find(table, key, (size_t)kl);
    if (old && (old->vlen != vlen || (vlen && memcmp(old->val, val, vlen) != 0))) {
        store_kv *o = store_table_find(&g->owners, key, (size_t)kl);
        const who *ow = o ? (const who *)o->val : NULL;
        char earlier[96];
        if (ow) snprintf(earlier, sizeof earlier, "world rank %d from %s", (int)ow->rank, ow->peer);
        else snprintf(earlier, sizeof earlier, "an earlier member");
        if (join)
            snprintf(why, sizeof why,
                     "two processes joined as world rank %u (%s, and world rank %d from %s): was one --node-rank "
                     "given to two hosts' launchers?",
                     index, earlier, (int)rank, peer);
        else
            snprintf(why, sizeof why, "gather '%.*s': index %u is claimed twice (%s, and world rank %d from %s)",
                     (int)plen, prefix, index, earlier, (int)rank, peer);
        return fail(g, prefix, plen, why);
    }
    (void)store_table_set(&g->owners, key, (size_t)kl, &me, sizeof me);
    return NULL;
}
