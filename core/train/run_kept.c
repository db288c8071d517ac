/* The kept buffers in a run's checkpoints: see run_kept.h. */
#include "train/run_kept.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "host/kept_buffers.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/memory.h"
#include "train/run_internal.h"

/* Tags of the save's point-to-point messages on the world (user tags,
 * apart from the checkpoint's 0x5a... and the replicas' 0x52...). */
#define TAG_MANIFEST 0x5b000000u
#define TAG_DATA 0x5b100000u

static void layout_of(const plait_run *run, char *buf, size_t cap) {
    const plait_mesh *m = &run->world.mesh;
    plait_kept_layout(buf, cap, m->world_size, m->dp, m->tp, m->pp, m->order);
}

/* "count name\n" a buffer, malloc'd (*len without the NUL). */
static char *own_text(size_t *len) {
    int n = plait_kept_count();
    size_t cap = (size_t)n * 128 + 1, used = 0;
    char *text = malloc(cap);
    if (!text) return NULL;
    text[0] = '\0';
    plait_kept k;
    for (int i = 0; plait_kept_at(i, &k); i++)
        if (used + 128 < cap) used += (size_t)snprintf(text + used, cap - used, "%zu %s\n", k.count, k.name);
    *len = used;
    return text;
}

static plait_status add_entries(plait_kept_manifest *m, int rank, char *text) {
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        size_t count;
        char name[96];
        if (sscanf(line, "%zu %95s", &count, name) != 2)
            return plait_set_error(PLAIT_ERR_PROTOCOL, "world rank %d's kept buffers: unreadable entry \"%s\"", rank,
                                   line);
        int *r = realloc(m->rank, (size_t)(m->n + 1) * sizeof *r);
        if (r) m->rank = r;
        size_t *c = r ? realloc(m->count, (size_t)(m->n + 1) * sizeof *c) : NULL;
        if (c) m->count = c;
        char(*nm)[96] = c ? realloc(m->name, (size_t)(m->n + 1) * sizeof *nm) : NULL;
        if (!nm) return plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
        m->name = nm;
        m->rank[m->n] = rank;
        m->count[m->n] = count;
        snprintf(m->name[m->n], sizeof m->name[m->n], "%s", name);
        if (count > m->most) m->most = count;
        m->n++;
    }
    return PLAIT_OK;
}

plait_status plait_run_kept_manifest(plait_run *run, plait_kept_manifest *m) {
    memset(m, 0, sizeof *m);
    int me = run->world.mesh.world_rank, world = run->world.mesh.world_size;
    size_t len = 0;
    char *text = own_text(&len);
    int64_t mine = text ? (int64_t)len : 0, *lens = me == 0 ? calloc((size_t)world, sizeof *lens) : NULL;
    plait_status st = text && (me != 0 || lens) ? PLAIT_OK : plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
    /* every rank takes part whatever happened here, so that none waits */
    plait_status cst = plait_comm_gather(run->world.comm, &mine, lens, 1, PLAIT_I64, 0, NULL, NULL);
    if (st == PLAIT_OK) st = cst;
    if (me != 0) {
        if (cst == PLAIT_OK && mine > 0) cst = plait_comm_send(run->world.comm, text, len, PLAIT_U8, 0, TAG_MANIFEST, NULL);
        if (st == PLAIT_OK) st = cst;
        plait_kept k;
        for (int i = 0; plait_kept_at(i, &k); i++)
            if (k.count > m->most) m->most = k.count;
        free(text);
        return st;
    }
    for (int r = 0; cst == PLAIT_OK && r < world; r++) {
        if (!lens || lens[r] <= 0) continue;
        char *t = r == 0 ? text : malloc((size_t)lens[r] + 1);
        if (!t) {
            st = plait_set_error(PLAIT_ERR_NO_MEMORY, "out of memory");
            break;
        }
        if (r != 0) {
            cst = plait_comm_recv(run->world.comm, t, (size_t)lens[r], PLAIT_U8, r, TAG_MANIFEST, NULL);
            t[lens[r]] = '\0';
        }
        if (st == PLAIT_OK) st = cst;
        if (st == PLAIT_OK) st = add_entries(m, r, t);
        if (r != 0) free(t);
    }
    free(lens);
    free(text);
    return st;
}

void plait_run_kept_tensor_name(const plait_run *run, char *buf, size_t cap, int rank, const char *name) {
    char layout[96];
    layout_of(run, layout, sizeof layout);
    plait_kept_tensor_name(buf, cap, layout, rank, name);
}

plait_status plait_run_kept_declare(const plait_run *run, const plait_kept_manifest *m, plait_ckpt_writer *w) {
    plait_status st = PLAIT_OK;
    for (int i = 0; st == PLAIT_OK && i < m->n; i++) {
        char name[256];
        plait_run_kept_tensor_name(run, name, sizeof name, m->rank[i], m->name[i]);
        int64_t shape[1] = {(int64_t)m->count[i]};
        st = plait_ckpt_declare(w, PLAIT_CKPT_OPTIM, name, 1, shape);
    }
    return st;
}

plait_status plait_run_kept_write(plait_run *run, const plait_kept_manifest *m, plait_ckpt_writer *w) {
    int me = run->world.mesh.world_rank;
    float *buf = m->most ? plait_alloc(m->most * sizeof(float), PLAIT_MEM_HOST, 64, "checkpoint buffer") : NULL;
    if (m->most && !buf) return PLAIT_ERR_NO_MEMORY;
    plait_status st = PLAIT_OK;
    plait_kept k;
    if (me != 0) {
        for (int j = 0; st == PLAIT_OK && plait_kept_at(j, &k); j++) {
            st = plait_kept_to_host(&k, buf);
            if (st == PLAIT_OK)
                st = plait_comm_send(run->world.comm, buf, k.count, PLAIT_F32, 0, TAG_DATA + (uint32_t)j, NULL);
        }
        plait_free(buf);
        return st;
    }
    plait_status wst = PLAIT_OK;
    for (int i = 0, j = 0; st == PLAIT_OK && i < m->n; i++) {
        j = i > 0 && m->rank[i] == m->rank[i - 1] ? j + 1 : 0; /* the entry's index on its rank */
        if (m->rank[i] == 0) {
            if (!plait_kept_at(j, &k) || k.count != m->count[i])
                st = plait_set_error(PLAIT_ERR_INTERNAL, "kept buffer %s changed during the save", m->name[i]);
            else
                st = plait_kept_to_host(&k, buf);
        } else {
            st = plait_comm_recv(run->world.comm, buf, m->count[i], PLAIT_F32, m->rank[i], TAG_DATA + (uint32_t)j,
                                 NULL);
        }
        if (st == PLAIT_OK && w && wst == PLAIT_OK) {
            char name[256];
            plait_run_kept_tensor_name(run, name, sizeof name, m->rank[i], m->name[i]);
            wst = plait_ckpt_write(w, name, buf, m->count[i]);
        }
    }
    plait_free(buf);
    return st != PLAIT_OK ? st : wst;
}

void plait_run_kept_manifest_free(plait_kept_manifest *m) {
    free(m->rank);
    free(m->count);
    free(m->name);
    memset(m, 0, sizeof *m);
}

plait_status plait_run_kept_restore(plait_run *run, const plait_ckpt_source *src) {
    int me = run->world.mesh.world_rank, n = plait_kept_count();
    int votes[2] = {1, n == 0}; /* MIN: every rank found all of its own; nobody keeps any */
    plait_kept k;
    for (int i = 0; plait_kept_at(i, &k); i++) {
        char name[256];
        plait_run_kept_tensor_name(run, name, sizeof name, me, k.name);
        const plait_st_tensor *t = src->find(src->find_ctx, name);
        if (!t || !t->data || t->numel != k.count) votes[0] = 0;
    }
    plait_status st = plait_comm_allreduce(run->world.comm, votes, votes, 2, PLAIT_I32, PLAIT_MIN, NULL, NULL);
    if (st != PLAIT_OK || votes[1]) return st;
    if (!votes[0]) {
        char layout[96];
        layout_of(run, layout, sizeof layout);
        if (me == 0)
            PLAIT_WARN("train",
                       "%s holds no error feedback for this layout (%s: world size, mesh and order), so onebit's "
                       "residuals start from zero and the steps from %lld on differ from an uninterrupted run's: "
                       "they are saved per rank, and only a resume with the saving run's layout and plugins "
                       "reads them back (it was saved by another layout, other buckets or without onebit; an "
                       "elastic restart from memory finds a rank's own on its host only)",
                       src->what, layout, (long long)run->step + 1);
        return PLAIT_OK;
    }
    for (int i = 0; st == PLAIT_OK && plait_kept_at(i, &k); i++) {
        char name[256];
        plait_run_kept_tensor_name(run, name, sizeof name, me, k.name);
        st = plait_kept_from_host(&k, src->find(src->find_ctx, name)->data);
    }
    if (st == PLAIT_OK && me == 0)
        PLAIT_INFO("train", "error feedback of compressed gradient reductions restored from %s", src->what);
    return st;
}
