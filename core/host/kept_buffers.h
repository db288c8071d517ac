/*
 * Buffers a rank keeps across steps for a plugin (host->alloc_kept,
 * plait/host.h): state that is neither a parameter nor the optimizer's
 * per-parameter state, yet that the next step reads, so a resumed run must
 * find it as it was: onebit's error feedback (plait/coll.h), one residual
 * per gradient bucket or ZeRO unit. Each is named by its plugin and
 * belongs to this rank alone; train/run_ckpt.c saves every rank's under
 * plait_kept_tensor_name's names and train/run_source.c fills them again
 * on a resume of the same layout.
 *
 * The registry is the process's (one run a process); thread-safe.
 */
#ifndef PLAIT_CORE_KEPT_BUFFERS_H
#define PLAIT_CORE_KEPT_BUFFERS_H

#include <stddef.h>
#include <plait/types.h>

/* One kept buffer: `count` floats of `kind` at `data`. */
typedef struct plait_kept {
    char name[96];
    float *data;
    size_t count;
    plait_mem_kind kind;
} plait_kept;

/* host->alloc_kept: `count` zeroed floats of `kind` (host or the device's
 * memory), registered under `name` (printable, no '/', at most 95 bytes,
 * unique among the live kept buffers), counted in the memory report under
 * `tag`. NULL and the error set on failure (a bad or taken name names it).
 * Freed by plait_kept_free. */
float *plait_kept_alloc(size_t count, plait_mem_kind kind, const char *name, const char *tag);
/* host->free: forgets `ptr` if it is a kept buffer, then frees it as
 * plait_device_free does. NULL is ignored. */
void plait_kept_free(void *ptr);

/* The live kept buffers, in the order they were allocated (the same on
 * every run of a layout): a copy of entry i into *out; 0 past the end. */
int plait_kept_at(int i, plait_kept *out);
int plait_kept_count(void);

/* Copy between a kept buffer and host memory (device copies where its
 * memory is the device's). */
plait_status plait_kept_to_host(const plait_kept *k, float *dst);
plait_status plait_kept_from_host(const plait_kept *k, const float *src);

/* The checkpoint tensor of kept buffer `name` of world rank `rank` under
 * the layout `layout` (plait_kept_layout): the layout is in the name, so a
 * run of another layout finds none of them. Like snprintf. */
int plait_kept_tensor_name(char *buf, size_t cap, const char *layout, int rank, const char *name);
/* "w4.dp2.tp2.pp1.<order>": world size, the mesh and its order ([parallel]
 * order with ',' dropped), what fixes which rank holds which residuals. */
void plait_kept_layout(char *buf, size_t cap, int world, int dp, int tp, int pp, const char *order);

#endif
