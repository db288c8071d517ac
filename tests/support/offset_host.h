/*
 * A test host whose device memory the host cannot touch (header-only).
 *
 * Plugin unit tests hand a plugin a copy of the core's host table; this
 * turns such a copy into one with an open "device" (PLAIT_MEM_CUDA, like a
 * GPU's) whose memory is ordinary host memory returned at OH_OFFSET (bit 62
 * set): a non-canonical x86-64 address, so any host load or store through
 * it — a loop, memcpy or memset a plugin still does on tensor data — faults
 * at once. Everything legitimate goes through wrappers that translate the
 * address back and call the base table: the device's alloc, free, copy and
 * fill_zero; the vector kernels (zero, copy, scale, axpy, sumsq, adamw,
 * sumsq_exact, sumsq_merge; sumsq_value takes a host copy); the collectives
 * and point-to-point (which also fail when plait_coll_opts.mem_kind does not
 * say where a buffer lives); and the summation tree. On success every
 * result is what the base table computes, bit for bit.
 *
 * Misuse a fault would not catch (a host pointer handed to a kernel, a copy
 * in the wrong direction) aborts with a message naming the call.
 *
 * Usage: plait_host h = *base; oh_install(&h); hand &h to the plugin. The
 * test itself reads device memory with oh_real(ptr). One base table per
 * process (the wrappers keep it in this translation unit's statics);
 * thread-safe like the base table.
 */
#ifndef PLAIT_TESTS_OFFSET_HOST_H
#define PLAIT_TESTS_OFFSET_HOST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/plait.h>
#include <plait/device.h>

#define OH_OFFSET ((uintptr_t)1 << 62)

static plait_host oh_base;          /* the table oh_install() wrapped */
static plait_kernels oh_kernels_tab;
static plait_coll_api oh_coll_tab;
static plait_sum_tree_api oh_tree_tab;
static plait_device_ops oh_device_tab;
static plait_device_info oh_info = {.struct_size = sizeof(plait_device_info),
                                    .mem_kind = PLAIT_MEM_CUDA,
                                    .ordinal = 0,
                                    .name = "offset test device"};

static inline int oh_is_device(const void *p) { return ((uintptr_t)p & OH_OFFSET) != 0; }

/* The host address behind device pointer p (NULL stays NULL; a host
 * pointer is returned unchanged). */
static inline void *oh_real(const void *p) {
    return oh_is_device(p) ? (void *)((uintptr_t)p - OH_OFFSET) : (void *)(uintptr_t)p;
}

static inline void oh_die(const char *what, const void *p) {
    fprintf(stderr, "offset_host: %s (pointer %p)\n", what, p);
    abort();
}

/* A device pointer's host address; aborts on a host pointer (NULL allowed). */
static inline void *oh_dev(const void *p, const char *what) {
    if (p && !oh_is_device(p)) oh_die(what, p);
    return oh_real(p);
}

/* ---- memory and copies --------------------------------------------------- */

static inline void *oh_alloc(size_t bytes, plait_mem_kind kind, size_t align, const char *tag) {
    void *p = oh_base.alloc(bytes, kind == PLAIT_MEM_CUDA ? PLAIT_MEM_HOST : kind, align, tag);
    return p && kind == PLAIT_MEM_CUDA ? (void *)((uintptr_t)p + OH_OFFSET) : p;
}
static inline void oh_free(void *p) { oh_base.free(oh_real(p)); }
static inline void *oh_dev_alloc(size_t bytes, const char *tag) { return oh_alloc(bytes, PLAIT_MEM_CUDA, 256, tag); }

static inline plait_status oh_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    int to_dev = dir != PLAIT_COPY_TO_HOST, from_dev = dir != PLAIT_COPY_TO_DEVICE;
    if (bytes && (oh_is_device(dst) != to_dev || oh_is_device(src) != from_dev))
        oh_die(dir == PLAIT_COPY_TO_HOST     ? "device copy TO_HOST needs a device source and a host destination"
               : dir == PLAIT_COPY_TO_DEVICE ? "device copy TO_DEVICE needs a host source and a device destination"
                                             : "device copy ON_DEVICE needs device pointers",
               oh_is_device(dst) != to_dev ? dst : src);
    if (bytes) memmove(oh_real(dst), oh_real(src), bytes);
    return PLAIT_OK;
}
static inline plait_status oh_fill_zero(void *dst, size_t bytes) {
    if (bytes) memset(oh_dev(dst, "fill_zero on host memory"), 0, bytes);
    return PLAIT_OK;
}
static inline plait_status oh_synchronize(void) { return PLAIT_OK; }
static inline const plait_kernels *oh_device_kernels(void) { return &oh_kernels_tab; }

/* ---- kernels --------------------------------------------------------------- */

static inline void oh_k_zero(float *x, size_t n) { oh_base.kernels->zero(oh_dev(x, "kernel zero: host pointer"), n); }
static inline void oh_k_copy(float *d, const float *s, size_t n) {
    oh_base.kernels->copy(oh_dev(d, "kernel copy: host dst"), oh_dev(s, "kernel copy: host src"), n);
}
static inline void oh_k_scale(float *x, size_t n, float a) {
    oh_base.kernels->scale(oh_dev(x, "kernel scale: host pointer"), n, a);
}
static inline void oh_k_axpy(float *y, const float *x, size_t n, float a) {
    oh_base.kernels->axpy(oh_dev(y, "kernel axpy: host y"), oh_dev(x, "kernel axpy: host x"), n, a);
}
static inline double oh_k_sumsq(const float *x, size_t n) {
    return oh_base.kernels->sumsq(oh_dev(x, "kernel sumsq: host pointer"), n);
}
static inline void oh_k_adamw(float *p, const float *g, float *m, float *v, size_t n, const plait_adamw_args *a) {
    oh_base.kernels->adamw(oh_dev(p, "kernel adamw: host param"), oh_dev(g, "kernel adamw: host grad"),
                           oh_dev(m, "kernel adamw: host m"), oh_dev(v, "kernel adamw: host v"), n, a);
}
static inline void oh_k_sumsq_exact(plait_sumsq_acc *acc, const float *x, size_t n) {
    oh_base.kernels->sumsq_exact(oh_dev(acc, "kernel sumsq_exact: host accumulator"),
                                 oh_dev(x, "kernel sumsq_exact: host pointer"), n);
}
static inline void oh_k_sumsq_merge(plait_sumsq_acc *d, const plait_sumsq_acc *s) {
    oh_base.kernels->sumsq_merge(oh_dev(d, "kernel sumsq_merge: host dst"), oh_dev(s, "kernel sumsq_merge: host src"));
}
static inline double oh_k_sumsq_value(const plait_sumsq_acc *acc) {
    if (oh_is_device(acc)) oh_die("kernel sumsq_value reads a host copy, got device memory", acc);
    return oh_base.kernels->sumsq_value(acc);
}

/* ---- collectives --------------------------------------------------------- */

/* The base call's options: the caller's with host memory, after checking
 * that the caller named the kind of `a` and `b` (either may be NULL). */
static inline plait_status oh_opts(const plait_coll_opts *in, const void *a, const void *b, plait_coll_opts *out) {
    plait_mem_kind said = in ? in->mem_kind : PLAIT_MEM_HOST;
    const void *bufs[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (!bufs[i]) continue;
        int dev = oh_is_device(bufs[i]);
        if (dev != (said == PLAIT_MEM_CUDA))
            return oh_base.set_error(PLAIT_ERR_INVALID_ARG,
                                     "offset_host: collective \"%s\" names mem_kind %d for a buffer in %s memory",
                                     in && in->label ? in->label : "?", (int)said, dev ? "device" : "host");
    }
    if (in) *out = *in;
    else memset(out, 0, sizeof *out), out->struct_size = sizeof *out;
    out->mem_kind = PLAIT_MEM_HOST;
    return PLAIT_OK;
}

#define OH_CHECKED(send_, recv_)                                  \
    plait_coll_opts o;                                            \
    plait_status st_ = oh_opts(opts, (send_), (recv_), &o);       \
    if (st_ != PLAIT_OK) return st_

static inline plait_status oh_allreduce(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t,
                                        plait_redop op, const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->allreduce(c, oh_real(s), oh_real(r), n, t, op, &o, q);
}
static inline plait_status oh_reduce_scatter(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t,
                                             plait_redop op, const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->reduce_scatter(c, oh_real(s), oh_real(r), n, t, op, &o, q);
}
static inline plait_status oh_allgather(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t,
                                        const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->allgather(c, oh_real(s), oh_real(r), n, t, &o, q);
}
static inline plait_status oh_broadcast(plait_comm *c, void *b, size_t n, plait_dtype t, int root,
                                        const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(b, NULL);
    return oh_base.coll->broadcast(c, oh_real(b), n, t, root, &o, q);
}
static inline plait_status oh_reduce(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t, plait_redop op,
                                     int root, const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->reduce(c, oh_real(s), oh_real(r), n, t, op, root, &o, q);
}
static inline plait_status oh_gather(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t, int root,
                                     const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->gather(c, oh_real(s), oh_real(r), n, t, root, &o, q);
}
static inline plait_status oh_scatter(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t, int root,
                                      const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->scatter(c, oh_real(s), oh_real(r), n, t, root, &o, q);
}
static inline plait_status oh_alltoall(plait_comm *c, const void *s, void *r, size_t n, plait_dtype t,
                                       const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(s, r);
    return oh_base.coll->alltoall(c, oh_real(s), oh_real(r), n, t, &o, q);
}
static inline plait_status oh_send(plait_comm *c, const void *b, size_t n, plait_dtype t, int peer, uint32_t tag,
                                   const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(b, NULL);
    return oh_base.coll->send(c, oh_real(b), n, t, peer, tag, &o, q);
}
static inline plait_status oh_recv(plait_comm *c, void *b, size_t n, plait_dtype t, int peer, uint32_t tag,
                                   const plait_coll_opts *opts, plait_request **q) {
    OH_CHECKED(b, NULL);
    return oh_base.coll->recv(c, oh_real(b), n, t, peer, tag, &o, q);
}
#undef OH_CHECKED

/* ---- summation tree ------------------------------------------------------- */

static inline plait_status oh_tree_add(plait_sum_tree *t, int32_t j, const void *value, void *total, size_t offset,
                                       size_t n, int *done) {
    return oh_base.sum_tree->add(t, j, oh_dev(value, "sum_tree add: host value"),
                                 oh_dev(total, "sum_tree add: host total"), offset, n, done);
}

/* ---- installation ----------------------------------------------------------- */

/* Turn *h (a copy of `*h` is kept as the base) into the offset host. */
static inline void oh_install(plait_host *h) {
    oh_base = *h;
    oh_kernels_tab = (plait_kernels){
        .struct_size = sizeof(plait_kernels),
        .zero = oh_k_zero,
        .copy = oh_k_copy,
        .scale = oh_k_scale,
        .axpy = oh_k_axpy,
        .sumsq = oh_k_sumsq,
        .adamw = oh_k_adamw,
        .sumsq_exact = oh_k_sumsq_exact,
        .sumsq_merge = oh_k_sumsq_merge,
        .sumsq_value = oh_k_sumsq_value,
    };
    oh_coll_tab = *h->coll;
    oh_coll_tab.allreduce = oh_allreduce;
    oh_coll_tab.reduce_scatter = oh_reduce_scatter;
    oh_coll_tab.allgather = oh_allgather;
    oh_coll_tab.broadcast = oh_broadcast;
    oh_coll_tab.reduce = oh_reduce;
    oh_coll_tab.gather = oh_gather;
    oh_coll_tab.scatter = oh_scatter;
    oh_coll_tab.alltoall = oh_alltoall;
    oh_coll_tab.send = oh_send;
    oh_coll_tab.recv = oh_recv;
    oh_device_tab = (plait_device_ops){
        .struct_size = sizeof(plait_device_ops),
        .alloc = oh_dev_alloc,
        .free = oh_free,
        .copy = oh_copy,
        .fill_zero = oh_fill_zero,
        .synchronize = oh_synchronize,
        .kernels = oh_device_kernels,
    };
    h->alloc = oh_alloc;
    h->free = oh_free;
    h->kernels = &oh_kernels_tab;
    h->coll = &oh_coll_tab;
    if (PLAIT_HOST_HAS(h, sum_tree)) {
        oh_tree_tab = *h->sum_tree;
        oh_tree_tab.add = oh_tree_add;
        h->sum_tree = &oh_tree_tab;
    }
    h->device = &oh_device_tab;
    h->device_info = &oh_info;
}

#endif
