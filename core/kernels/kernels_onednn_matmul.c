/*
 * bf16 matrix products through oneDNN's matmul primitive (bf16 operands,
 * fp32 accumulation, an fp32 output or a bf16 one rounded as it is
 * stored): the native bf16 products of the CPU path where the BLAS has no
 * cblas_sbgemm (Debian's OpenBLAS 0.3.21 has none).
 * oneDNN 2.6 exposes no bf16 GEMM function, only the primitive, whose
 * creation costs far more than a product of plait's tiles: so each math
 * thread keeps the primitives of the tile shapes it has run (a product's
 * tiles have at most four shapes, a model a few dozen products), with its
 * own stream, memory objects and scratchpad (user-managed, so that no two
 * threads ever share one).
 *
 * oneDNN is reached through dlsym on the library kernels_onednn.c loaded;
 * its structures are opaque here (plait builds without oneDNN's headers),
 * held in buffers larger than 2.6's (tests/cpu/test_onednn.c checks the
 * sizes and the enum values against the headers where they are installed).
 * Each product runs on the calling thread alone (its OpenMP team held at
 * one), so a tile's result does not depend on the thread count, and oneDNN
 * picks its kernel from the CPU at run time: AMX tiles
 * ("brg:avx512_core_amx_bf16") or AVX512_BF16 dot products.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/kernels_internal.h"
#include "kernels/onednn_abi.h"

typedef int (*fn_engine_create)(void **, int, size_t);
typedef int (*fn_stream_create)(void **, void *, unsigned);
typedef int (*fn_md_init_by_strides)(plait_dnnl_md *, int, const int64_t *, int, const int64_t *);
typedef int (*fn_matmul_desc_init)(plait_dnnl_matmul_desc *, const plait_dnnl_md *, const plait_dnnl_md *,
                                   const plait_dnnl_md *, const plait_dnnl_md *);
typedef int (*fn_ptr_out)(void **);
typedef int (*fn_destroy)(void *);
typedef int (*fn_attr_set_int)(void *, int);
typedef int (*fn_attr_set_scales)(void *, int64_t, int, const float *);
typedef int (*fn_post_ops_append_sum)(void *, float);
typedef int (*fn_attr_set_post_ops)(void *, const void *);
typedef int (*fn_pd_create)(void **, const void *, const void *, void *, const void *);
typedef int (*fn_pd_query)(const void *, int, int, void *);
typedef const plait_dnnl_md *(*fn_pd_query_md)(const void *, int, int);
typedef size_t (*fn_md_get_size)(const plait_dnnl_md *);
typedef int (*fn_primitive_create)(void **, const void *);
typedef int (*fn_memory_create)(void **, const plait_dnnl_md *, void *, void *);
typedef int (*fn_memory_set_handle)(void *, void *);
typedef int (*fn_execute)(const void *, void *, int, const plait_dnnl_exec_arg *);

static struct {
    fn_engine_create engine_create;
    fn_stream_create stream_create;
    fn_md_init_by_strides md_init;
    fn_matmul_desc_init matmul_init;
    fn_ptr_out attr_create, post_ops_create;
    fn_destroy attr_destroy, post_ops_destroy, pd_destroy, primitive_destroy, memory_destroy, stream_destroy;
    fn_attr_set_int attr_set_scratchpad;
    fn_attr_set_scales attr_set_scales;
    fn_post_ops_append_sum append_sum;
    fn_attr_set_post_ops attr_set_post_ops;
    fn_pd_create pd_create;
    fn_pd_query pd_query;
    fn_pd_query_md pd_query_md;
    fn_md_get_size md_size;
    fn_primitive_create primitive_create;
    fn_memory_create memory_create;
    fn_memory_set_handle memory_set_handle;
    fn_execute execute;
    fn_destroy stream_wait;
    void *engine;
    char impl[96];
    char err[512];
    int ready; /* 1 usable, -1 not */
} g;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#define SYM(field, name)                                                                                               \
    do {                                                                                                               \
        void *s_ = plait_k_onednn_sym(name);                                                                           \
        if (!s_) {                                                                                                     \
            snprintf(g.err, sizeof g.err, "oneDNN has no %s: plait needs oneDNN 2.x (Debian's libdnnl2)", name);       \
            return -1;                                                                                                 \
        }                                                                                                              \
        memcpy(&g.field, &s_, sizeof g.field);                                                                         \
    } while (0)

static int bind(void) {
    SYM(engine_create, "dnnl_engine_create");
    SYM(stream_create, "dnnl_stream_create");
    SYM(stream_destroy, "dnnl_stream_destroy");
    SYM(stream_wait, "dnnl_stream_wait");
    SYM(md_init, "dnnl_memory_desc_init_by_strides");
    SYM(matmul_init, "dnnl_matmul_desc_init");
    SYM(attr_create, "dnnl_primitive_attr_create");
    SYM(attr_destroy, "dnnl_primitive_attr_destroy");
    SYM(attr_set_scratchpad, "dnnl_primitive_attr_set_scratchpad_mode");
    SYM(attr_set_scales, "dnnl_primitive_attr_set_output_scales");
    SYM(post_ops_create, "dnnl_post_ops_create");
    SYM(post_ops_destroy, "dnnl_post_ops_destroy");
    SYM(append_sum, "dnnl_post_ops_append_sum");
    SYM(attr_set_post_ops, "dnnl_primitive_attr_set_post_ops");
    SYM(pd_create, "dnnl_primitive_desc_create");
    SYM(pd_destroy, "dnnl_primitive_desc_destroy");
    SYM(pd_query, "dnnl_primitive_desc_query");
    SYM(pd_query_md, "dnnl_primitive_desc_query_md");
    SYM(md_size, "dnnl_memory_desc_get_size");
    SYM(primitive_create, "dnnl_primitive_create");
    SYM(primitive_destroy, "dnnl_primitive_destroy");
    SYM(memory_create, "dnnl_memory_create");
    SYM(memory_destroy, "dnnl_memory_destroy");
    SYM(memory_set_handle, "dnnl_memory_set_data_handle");
    SYM(execute, "dnnl_primitive_execute");
    return 0;
}

/* ---- one product's primitive ---------------------------------------- */
typedef struct key {
    int64_t M, N, K, lda, ldb, ldc;
    int trans_a, trans_b;
    int c_bf16; /* C bf16, rounded by oneDNN (alpha 1, beta 0), else fp32 */
    float alpha, beta;
} key;

typedef struct entry {
    key k;
    void *prim, *mem[4]; /* src, weights, dst, scratchpad */
    void *scratch;
    int used;
    int refused; /* oneDNN refused the shape (or memory ran out): not asked again */
} entry;

/* Describes and creates C[M,N] = alpha op(A) op(B) + beta C (row-major,
 * bf16 A and B, fp32 C, or bf16 C when k->c_bf16) into e: 0, or a oneDNN
 * status. */
static int create(const key *k, entry *e, void **pd_out) {
    plait_dnnl_md a, b, c;
    int64_t da[PLAIT_DNNL_MAX_NDIMS] = {k->M, k->K}, db[PLAIT_DNNL_MAX_NDIMS] = {k->K, k->N},
            dc[PLAIT_DNNL_MAX_NDIMS] = {k->M, k->N};
    /* a transposed operand: the same matrix read with its strides swapped */
    int64_t sa[PLAIT_DNNL_MAX_NDIMS] = {k->trans_a ? 1 : k->lda, k->trans_a ? k->lda : 1};
    int64_t sb[PLAIT_DNNL_MAX_NDIMS] = {k->trans_b ? 1 : k->ldb, k->trans_b ? k->ldb : 1};
    int64_t sc[PLAIT_DNNL_MAX_NDIMS] = {k->ldc, 1};
    int st = g.md_init(&a, 2, da, PLAIT_DNNL_BF16, sa);
    if (st == PLAIT_DNNL_OK) st = g.md_init(&b, 2, db, PLAIT_DNNL_BF16, sb);
    if (st == PLAIT_DNNL_OK) st = g.md_init(&c, 2, dc, k->c_bf16 ? PLAIT_DNNL_BF16 : PLAIT_DNNL_F32, sc);
    static plait_dnnl_matmul_desc desc_zero;
    plait_dnnl_matmul_desc *desc = malloc(sizeof *desc); /* 8 KiB: off the stack of a math thread */
    if (!desc) return -1;
    *desc = desc_zero;
    if (st == PLAIT_DNNL_OK) st = g.matmul_init(desc, &a, &b, NULL, &c);
    void *attr = NULL, *post = NULL, *pd = NULL;
    if (st == PLAIT_DNNL_OK) st = g.attr_create(&attr);
    if (st == PLAIT_DNNL_OK) st = g.attr_set_scratchpad(attr, PLAIT_DNNL_SCRATCHPAD_USER);
    if (st == PLAIT_DNNL_OK && k->alpha != 1.0f) st = g.attr_set_scales(attr, 1, 0, &k->alpha);
    if (st == PLAIT_DNNL_OK && k->beta != 0.0f) {
        st = g.post_ops_create(&post);
        if (st == PLAIT_DNNL_OK) st = g.append_sum(post, k->beta);
        if (st == PLAIT_DNNL_OK) st = g.attr_set_post_ops(attr, post);
    }
    if (st == PLAIT_DNNL_OK) st = g.pd_create(&pd, desc, attr, g.engine, NULL);
    free(desc);
    if (post) g.post_ops_destroy(post);
    if (attr) g.attr_destroy(attr);
    if (st != PLAIT_DNNL_OK) return st;
    if (pd_out) {
        *pd_out = pd;
        return PLAIT_DNNL_OK;
    }
    const plait_dnnl_md *smd = g.pd_query_md(pd, PLAIT_DNNL_QUERY_SCRATCHPAD_MD, 0);
    size_t sbytes = smd ? g.md_size(smd) : 0;
    e->scratch = sbytes ? aligned_alloc(64, (sbytes + 63) / 64 * 64) : NULL;
    st = sbytes && !e->scratch ? -1 : g.primitive_create(&e->prim, pd);
    if (st == PLAIT_DNNL_OK) st = g.memory_create(&e->mem[0], &a, g.engine, NULL);
    if (st == PLAIT_DNNL_OK) st = g.memory_create(&e->mem[1], &b, g.engine, NULL);
    if (st == PLAIT_DNNL_OK) st = g.memory_create(&e->mem[2], &c, g.engine, NULL);
    if (st == PLAIT_DNNL_OK && sbytes) st = g.memory_create(&e->mem[3], smd, g.engine, e->scratch);
    g.pd_destroy(pd);
    return st;
}

static void entry_free(entry *e) {
    for (int i = 0; i < 4; i++)
        if (e->mem[i]) g.memory_destroy(e->mem[i]);
    if (e->prim) g.primitive_destroy(e->prim);
    free(e->scratch);
    memset(e, 0, sizeof *e);
}

/* ---- each math thread's primitives ----------------------------------- */
#define CACHE_ENTRIES 128

typedef struct cache {
    entry e[CACHE_ENTRIES];
    void *stream;
    int next; /* the entry replaced when all are used */
} cache;

static pthread_key_t g_key;

static void cache_free(void *p) {
    cache *c = p;
    for (int i = 0; i < CACHE_ENTRIES; i++)
        if (c->e[i].used) entry_free(&c->e[i]);
    if (c->stream) g.stream_destroy(c->stream);
    free(c);
}

static void init_once(void) {
    if (plait_kernels_onednn_load(g.err, sizeof g.err) != 0 || bind() != 0 ||
        g.engine_create(&g.engine, PLAIT_DNNL_ENGINE_CPU, 0) != PLAIT_DNNL_OK ||
        pthread_key_create(&g_key, cache_free) != 0) {
        if (!g.err[0]) snprintf(g.err, sizeof g.err, "oneDNN's cpu engine could not be created");
        g.ready = -1;
        return;
    }
    /* a product of the shapes plait runs shows whether this oneDNN has a bf16
     * matmul for the CPU's ISA, and which kernel it picked */
    key k = {.M = 256, .N = 256, .K = 256, .lda = 256, .ldb = 256, .ldc = 256, .alpha = 1, .beta = 0};
    void *pd = NULL;
    int st = create(&k, NULL, &pd);
    if (st != PLAIT_DNNL_OK) {
        snprintf(g.err, sizeof g.err, "oneDNN %s has no bf16 matrix product for its %s ISA (%s)",
                 plait_k_onednn_version(), plait_k_onednn_isa_name(),
                 st == PLAIT_DNNL_UNIMPLEMENTED ? "unimplemented" : "refused");
        g.ready = -1;
        return;
    }
    const char *impl = NULL;
    if (g.pd_query(pd, PLAIT_DNNL_QUERY_IMPL_INFO_STR, 0, &impl) != PLAIT_DNNL_OK || !impl) impl = "unknown";
    snprintf(g.impl, sizeof g.impl, "%s", impl);
    g.pd_destroy(pd);
    g.ready = 1;
}

int plait_k_onednn_bf16_probe(char *impl, size_t impl_len, char *err, size_t errlen) {
    pthread_once(&g_once, init_once);
    if (g.ready != 1) {
        if (err) snprintf(err, errlen, "%s", g.err);
        return -1;
    }
    if (impl) snprintf(impl, impl_len, "%s", g.impl);
    return 0;
}

static cache *this_thread(void) {
    cache *c = pthread_getspecific(g_key);
    if (c) return c;
    c = calloc(1, sizeof *c);
    if (!c) return NULL;
    if (g.stream_create(&c->stream, g.engine, PLAIT_DNNL_STREAM_IN_ORDER) != PLAIT_DNNL_OK ||
        pthread_setspecific(g_key, c) != 0) {
        if (c->stream) g.stream_destroy(c->stream);
        free(c);
        return NULL;
    }
    return c;
}

static entry *find(cache *c, const key *k) {
    for (int i = 0; i < CACHE_ENTRIES; i++)
        if (c->e[i].used && memcmp(&c->e[i].k, k, sizeof *k) == 0) return &c->e[i];
    entry *e = NULL;
    for (int i = 0; i < CACHE_ENTRIES && !e; i++)
        if (!c->e[i].used) e = &c->e[i];
    if (!e) {
        e = &c->e[c->next];
        c->next = (c->next + 1) % CACHE_ENTRIES;
        entry_free(e);
    }
    if (create(k, e, NULL) != PLAIT_DNNL_OK) {
        entry_free(e);
        e->refused = 1;
    }
    e->k = *k;
    e->used = 1;
    return e;
}

/* Runs the product k on this thread's primitive for it: 0, or -1 */
static int run(const key *k, const uint16_t *A, const uint16_t *B, void *C) {
    if (k->M <= 0 || k->N <= 0) return 0;
    if (g.ready != 1) return -1;
    cache *c = this_thread();
    entry *e = c ? find(c, k) : NULL;
    if (!e || e->refused) return -1;
    void *handles[3];
    memcpy(&handles[0], &A, sizeof A); /* oneDNN's handles are not const; it only reads A and B */
    memcpy(&handles[1], &B, sizeof B);
    handles[2] = C;
    for (int i = 0; i < 3; i++)
        if (g.memory_set_handle(e->mem[i], handles[i]) != PLAIT_DNNL_OK) return -1;
    plait_dnnl_exec_arg args[4] = {{PLAIT_DNNL_ARG_SRC, e->mem[0]},
                                   {PLAIT_DNNL_ARG_WEIGHTS, e->mem[1]},
                                   {PLAIT_DNNL_ARG_DST, e->mem[2]},
                                   {PLAIT_DNNL_ARG_SCRATCHPAD, e->mem[3]}};
    /* the implementation oneDNN picks for a shape may be one of its
     * generated GEMM kernels (kernels_onednn.c: the signals held) */
    sigset_t saved;
    plait_k_onednn_enter(&saved);
    int ok = g.execute(e->prim, c->stream, e->mem[3] ? 4 : 3, args) == PLAIT_DNNL_OK &&
             g.stream_wait(c->stream) == PLAIT_DNNL_OK;
    plait_k_onednn_leave(&saved);
    return ok ? 0 : -1;
}

static key key_of(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    key k;
    memset(&k, 0, sizeof k); /* the padding too: keys compare as bytes */
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.trans_a = trans_a != 0, k.trans_b = trans_b != 0;
    return k;
}

int plait_k_onednn_bf16_gemm(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                             int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    key k = key_of(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    k.alpha = alpha, k.beta = beta;
    return run(&k, A, B, C);
}

int plait_k_onednn_bf16_gemm_rounded(int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, const uint16_t *A,
                                     int64_t lda, const uint16_t *B, int64_t ldb, uint16_t *C, int64_t ldc) {
    key k = key_of(trans_a, trans_b, M, N, K, lda, ldb, ldc);
    k.c_bf16 = 1, k.alpha = 1.0f, k.beta = 0.0f;
    return run(&k, A, B, C);
}
