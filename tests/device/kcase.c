#include "device/kcase.h"
#include "device/kref_bf16.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host/host_table.h"
#include "runtime/error.h"

int kc_fp32;

uint64_t kc_next(kc_ctx *x) { /* splitmix64 */
    uint64_t z = (x->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void die(const char *what) {
    fprintf(stderr, "FATAL: %s: %s\n", what, plait_last_error());
    exit(1);
}

/* host data -> a buffer of the context's kind (device memory on the device) */
static void *place(kc_ctx *x, const void *host, size_t bytes) {
    if (x->n_bufs == KC_MAX_BUFS) die("too many buffers in one case");
    void *p;
    if (x->dev) {
        p = x->dev->alloc(bytes ? bytes : 1, "test");
        if (!p) die("device alloc");
        if (x->dev->copy(p, host, bytes, PLAIT_COPY_TO_DEVICE) != PLAIT_OK) die("upload");
    } else {
        p = malloc(bytes ? bytes : 1);
        if (!p) die("malloc");
        memcpy(p, host, bytes);
    }
    x->bufs[x->n_bufs++] = p;
    return p;
}

float *kc_rand(kc_ctx *x, size_t n, float lo, float hi) {
    float *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++) h[i] = lo + (hi - lo) * ((float)(kc_next(x) >> 40) / (float)(1 << 24));
    float *p = place(x, h, n * sizeof *h);
    free(h);
    return p;
}

float *kc_out(kc_ctx *x, size_t n) {
    float *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++) h[i] = NAN;
    float *p = place(x, h, n * sizeof *h);
    free(h);
    return p;
}

plait_bf16 *kc_rand_bf16(kc_ctx *x, size_t n, float lo, float hi) {
    plait_bf16 *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++) h[i] = kref_bf16_of(lo + (hi - lo) * ((float)(kc_next(x) >> 40) / (float)(1 << 24)));
    plait_bf16 *p = place(x, h, n * sizeof *h);
    free(h);
    return p;
}

plait_bf16 *kc_out_bf16(kc_ctx *x, size_t n) {
    plait_bf16 *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++) h[i] = kref_bf16_of(NAN);
    plait_bf16 *p = place(x, h, n * sizeof *h);
    free(h);
    return p;
}

int32_t *kc_ints(kc_ctx *x, size_t n, int32_t lo, int32_t hi, int neg_every) {
    int32_t *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = neg_every > 0 && i % (size_t)neg_every == (size_t)neg_every - 1
                   ? -1
                   : lo + (int32_t)(kc_next(x) % (uint64_t)(hi - lo));
    int32_t *p = place(x, h, n * sizeof *h);
    free(h);
    return p;
}

void *kc_bytes(kc_ctx *x, const void *src, size_t n) { return place(x, src, n); }

void kc_result_add(kc_ctx *x, const char *name, const void *p, size_t n, size_t elem, kc_class cls) {
    if (x->n_res == KC_MAX_RESULTS) die("too many results in one case");
    kc_result *r = &x->res[x->n_res++];
    r->name = name;
    r->n = n;
    r->elem = elem;
    r->cls = cls;
    r->host = malloc(n * elem + 1);
    if (x->dev) {
        if (x->dev->copy(r->host, p, n * elem, PLAIT_COPY_TO_HOST) != PLAIT_OK) die(name);
    } else {
        memcpy(r->host, p, n * elem);
    }
}

void *kc_host_copy(kc_ctx *x, const void *p, size_t bytes) {
    if (x->n_host == KC_MAX_BUFS) die("too many host copies in one case");
    void *h = malloc(bytes + 1);
    if (x->dev) {
        if (x->dev->copy(h, p, bytes, PLAIT_COPY_TO_HOST) != PLAIT_OK) die("download");
    } else {
        memcpy(h, p, bytes);
    }
    x->host[x->n_host++] = h;
    return h;
}

void kc_same(kc_ctx *x, const char *name, const void *p, const void *q, size_t bytes) {
    const void *a = kc_host_copy(x, p, bytes), *b = kc_host_copy(x, q, bytes);
    unsigned char same = memcmp(a, b, bytes) == 0;
    if (x->n_res == KC_MAX_RESULTS) die("too many results in one case");
    kc_result *r = &x->res[x->n_res++];
    r->name = name;
    r->n = 1;
    r->elem = 1;
    r->cls = KC_EXACT;
    r->host = malloc(1);
    memcpy(r->host, &same, 1);
}

void kc_value(kc_ctx *x, const char *name, double v, kc_class cls) {
    if (x->n_res == KC_MAX_RESULTS) die("too many results in one case");
    kc_result *r = &x->res[x->n_res++];
    r->name = name;
    r->n = 1;
    r->elem = sizeof v;
    r->cls = cls;
    r->host = malloc(sizeof v);
    memcpy(r->host, &v, sizeof v);
}

static void release(kc_ctx *x) {
    for (int i = 0; i < x->n_bufs; i++) {
        if (x->dev)
            x->dev->free(x->bufs[i]);
        else
            free(x->bufs[i]);
    }
    for (int i = 0; i < x->n_res; i++) free(x->res[i].host);
    for (int i = 0; i < x->n_host; i++) free(x->host[i]);
    memset(x, 0, sizeof *x);
}

static double value_at(const kc_result *r, size_t i) {
    if (r->elem == 2) return (double)kref_float_of(((const plait_bf16 *)r->host)[i]);
    return r->elem == 8 ? ((const double *)r->host)[i] : (double)((const float *)r->host)[i];
}

/* failures of `got` against `ref` (printed) */
static int compare(const char *cname, const kc_result *got, const kc_result *ref, double gemm_tol) {
    if (got->n != ref->n || got->elem != ref->elem) {
        printf("FAIL %s/%s: result shapes differ\n", cname, got->name);
        return 1;
    }
    if (got->cls == KC_EXACT || got->elem == 1) {
        int same = memcmp(got->host, ref->host, got->n * got->elem) == 0;
        printf("%s %s/%s: %s\n", same ? "ok  " : "FAIL", cname, got->name, same ? "bit-identical to the CPU" : "differs from the CPU");
        return !same;
    }
    double tol = got->cls == KC_GEMM ? gemm_tol : got->cls == KC_BF16 ? 2e-2 : 1e-5;
    double max_err = 0, max_ref = 0;
    size_t bad = 0, worst = 0;
    for (size_t i = 0; i < got->n; i++) {
        double g = value_at(got, i), f = value_at(ref, i);
        if (isnan(f)) continue; /* not a value the contract defines */
        if (isnan(g)) {
            if (!bad++) worst = i;
            continue;
        }
        if (fabs(f) > max_ref) max_ref = fabs(f);
        if (fabs(g - f) > max_err) max_err = fabs(g - f), worst = bad ? worst : i;
    }
    double rel = max_ref > 0 ? max_err / max_ref : max_err;
    int ok = bad == 0 && rel <= tol;
    printf("%s %s/%s: relative error %.3g (tolerance %.0e) over %zu values%s", ok ? "ok  " : "FAIL", cname, got->name,
           rel, tol, got->n, bad ? "" : "\n");
    if (bad) printf(", %zu NaN (first at %zu)\n", bad, worst);
    return !ok;
}

int kc_run(const char *name, kc_case_fn fn, const plait_kernels *cpu, const plait_kernels *gpu,
           const plait_device_ops *dev, double gemm_tol, uint64_t seed) {
    kc_ctx ref = {.k = cpu, .rng = seed}, a = {.k = gpu, .dev = dev, .rng = seed},
           b = {.k = gpu, .dev = dev, .rng = seed};
    fn(&ref);
    fn(&a);
    fn(&b);
    int fails = 0;
    if (dev->synchronize() != PLAIT_OK) {
        printf("FAIL %s: synchronize: %s\n", name, plait_last_error());
        fails++;
    }
    for (int i = 0; i < a.n_res && i < ref.n_res; i++) {
        fails += compare(name, &a.res[i], &ref.res[i], gemm_tol);
        if (memcmp(a.res[i].host, b.res[i].host, a.res[i].n * a.res[i].elem) != 0) {
            printf("FAIL %s/%s: two device runs differ\n", name, a.res[i].name);
            fails++;
        }
    }
    if (a.n_res != ref.n_res || a.n_res == 0) {
        printf("FAIL %s: %d results on the device, %d on the CPU\n", name, a.n_res, ref.n_res);
        fails++;
    }
    release(&ref);
    release(&a);
    release(&b);
    return fails;
}

static void *host_alloc(size_t bytes, const char *tag) {
    (void)tag;
    void *p = NULL;
    return posix_memalign(&p, 256, bytes) == 0 ? p : NULL;
}
static plait_status host_copy(void *dst, const void *src, size_t bytes, plait_copy_dir dir) {
    (void)dir;
    memmove(dst, src, bytes);
    return PLAIT_OK;
}
static plait_status host_sync(void) { return PLAIT_OK; }

const plait_device_ops *kc_host_device(void) {
    static const plait_device_ops host = {
        .struct_size = sizeof host, .alloc = host_alloc, .free = free, .copy = host_copy, .synchronize = host_sync};
    return &host;
}
