/*
 * The cuda device's contracts where its work runs late (a GPU's streams;
 * the CUDA emulator's, tests/cuda_emu, which runs queued work only when
 * the host waits):
 *
 *  - staged reads: plait_tensor_read of a tensor over several 4 MiB
 *    staging chunks (how Adam's and ZeRO's state come back on resume)
 *    gives every element its own value. The staging buffer is page-locked
 *    and refilled right after each copy returns, so a copy that returns
 *    before reading it (plait/device.h forbids it) hands later chunks'
 *    values to earlier ones;
 *  - reentrancy (plait/kernels.h): two threads calling the kernel table at
 *    once, on their own data, with shapes that grow the plugin's shared
 *    scratch (bf16 operand copies, column sums, Σx² partials) while the
 *    other thread's work is queued, get the results one thread alone gets,
 *    bit for bit;
 *  - scratch grown mid-run (the first step does it): no device-wide
 *    synchronisation (counted by the emulator), and the scratch counted in
 *    memory_stats;
 *  - failures where they happened: a kernel entry's failure is reported by
 *    the model thread's synchronize, never by another thread's wait for an
 *    event (the communicator's thread waiting for a collective's input).
 *
 * argv[1]: the precision (fp32, tf32, bf16; default bf16). PLAIT_TEST_CUDA_PLUGIN names
 * the plugin (default cuda; cuda_emu for the emulator). Exits 77 (skipped,
 * never passed) where the plugin finds no device.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/device_util.h>

#include "config/config.h"
#include "device/device.h"
#include "host/host_table.h"
#include "plugin/loader.h"
#include "runtime/error.h"

static int g_fails;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) g_fails++;
}

/* ---- staged reads ------------------------------------------------------------ */

/* element i of every tensor: exact in float for i < 2^24 */
static float value_at(size_t i) { return (float)(i % 16777216) + 0.5f; }

static plait_status source_read(void *ctx, int32_t index, const char *which, size_t offset, size_t count,
                                float *dst) {
    (void)ctx, (void)index, (void)which;
    for (size_t i = 0; i < count; i++) dst[i] = value_at(offset + i);
    return PLAIT_OK;
}

static void check_staged_read(const plait_host *h) {
    const size_t n = 2 * PLAIT_TENSOR_STAGING_FLOATS + 12345; /* three chunks, the last partial */
    float *dev = plait_tensor_alloc(h, n, "staged read test");
    float *back = malloc(n * sizeof *back);
    if (!dev || !back) {
        check(0, "memory for the staged read");
        return;
    }
    plait_value_source src = {sizeof src, NULL, source_read};
    plait_status st = plait_tensor_read(h, &src, 0, "m", 0, n, dev);
    if (st == PLAIT_OK) st = plait_tensor_to_host(h, back, dev, n);
    size_t wrong = 0, first = n;
    for (size_t i = 0; st == PLAIT_OK && i < n; i++)
        if (back[i] != value_at(i)) {
            if (!wrong) first = i;
            wrong++;
        }
    if (st != PLAIT_OK) printf("     %s\n", plait_last_error());
    if (wrong) printf("     %zu of %zu elements wrong, the first at %zu\n", wrong, n, first);
    check(st == PLAIT_OK && wrong == 0, "a tensor read through three page-locked staging chunks has every value");
    h->free(dev);
    free(back);
}

/* ---- two threads calling the kernels ----------------------------------------------- */

typedef struct work {
    const plait_host *h;
    const plait_kernels *k;
    int64_t rows, C, OC; /* this thread's shapes */
    int rounds;
    float *inp, *w, *out, *dinp, *dw, *db, *mean, *rstd, *lw;
    double sumsq;
    float *result; /* host: out, dinp, dw, db after the last round */
    plait_status st;
} work;

static float *dev_values(const plait_host *h, size_t n, unsigned seed) {
    float *host = malloc(n * sizeof *host), *d = plait_tensor_alloc(h, n, "reentrancy test");
    if (!host || !d) {
        free(host);
        return d;
    }
    for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u + seed) % 2001) / 1000.0f - 1.0f;
    if (plait_tensor_from_host(h, d, host, n) != PLAIT_OK) d = NULL;
    free(host);
    return d;
}

static int work_init(work *x, const plait_host *h, const plait_kernels *k, int64_t rows, int64_t C, int64_t OC,
                     unsigned seed) {
    memset(x, 0, sizeof *x);
    x->h = h, x->k = k, x->rows = rows, x->C = C, x->OC = OC, x->rounds = 6;
    x->inp = dev_values(h, (size_t)(rows * C), seed);
    x->w = dev_values(h, (size_t)(OC * C), seed + 1);
    x->lw = dev_values(h, (size_t)C, seed + 3);
    x->out = plait_tensor_alloc(h, (size_t)(rows * OC), "reentrancy test");
    x->dinp = plait_tensor_alloc(h, (size_t)(rows * C), "reentrancy test");
    x->dw = plait_tensor_alloc(h, (size_t)C, "reentrancy test");
    x->db = plait_tensor_alloc(h, (size_t)C, "reentrancy test");
    x->mean = plait_tensor_alloc(h, (size_t)rows, "reentrancy test");
    x->rstd = plait_tensor_alloc(h, (size_t)rows, "reentrancy test");
    x->result = malloc((size_t)(rows * OC + rows * C + 2 * C) * sizeof(float));
    return x->inp && x->w && x->lw && x->out && x->dinp && x->dw && x->db && x->mean && x->rstd &&
           x->result;
}

/* A product (bf16 operand copies in bf16), LayerNorm forward and backward
 * (column-sum scratch), Σx² (its partials and the pinned result): every
 * round the same inputs, so every round the same outputs. */
static void *work_run(void *arg) {
    work *x = arg;
    const plait_kernels *k = x->k;
    for (int r = 0; r < x->rounds; r++) {
        k->matmul_forward(x->out, x->inp, x->w, NULL, x->rows, x->C, x->OC);
        k->layernorm_forward(x->dinp, x->mean, x->rstd, x->inp, x->lw, x->lw, x->rows, x->C);
        k->zero(x->dw, (size_t)x->C);
        k->zero(x->db, (size_t)x->C);
        k->layernorm_backward(x->dinp, x->dw, x->db, x->inp, x->inp, x->lw, x->mean, x->rstd, x->rows, x->C);
        x->sumsq = k->sumsq(x->out, (size_t)(x->rows * x->OC));
    }
    float *p = x->result;
    x->st = plait_tensor_to_host(x->h, p, x->out, (size_t)(x->rows * x->OC));
    p += x->rows * x->OC;
    if (x->st == PLAIT_OK) x->st = plait_tensor_to_host(x->h, p, x->dinp, (size_t)(x->rows * x->C));
    p += x->rows * x->C;
    if (x->st == PLAIT_OK) x->st = plait_tensor_to_host(x->h, p, x->dw, (size_t)x->C);
    if (x->st == PLAIT_OK) x->st = plait_tensor_to_host(x->h, p + x->C, x->db, (size_t)x->C);
    return NULL;
}

static size_t work_floats(const work *x) { return (size_t)(x->rows * x->OC + x->rows * x->C + 2 * x->C); }

static void work_free(work *x) {
    float *d[] = {x->inp, x->w, x->out, x->dinp, x->dw, x->db, x->mean, x->rstd, x->lw};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) x->h->free(d[i]);
    free(x->result);
}

static void check_two_threads(const plait_host *h, const plait_kernels *k) {
    /* the second thread's shapes are larger: its first calls grow scratch
     * the first thread's queued work still reads */
    work a, b, alone_a, alone_b;
    if (!work_init(&a, h, k, 96, 64, 80, 1) || !work_init(&b, h, k, 300, 192, 256, 7) ||
        !work_init(&alone_a, h, k, 96, 64, 80, 1) || !work_init(&alone_b, h, k, 300, 192, 256, 7)) {
        check(0, "memory for the reentrancy test");
        return;
    }
    work_run(&alone_a);
    work_run(&alone_b);
    int same = alone_a.st == PLAIT_OK && alone_b.st == PLAIT_OK;
    for (int trial = 0; trial < 4 && same; trial++) {
        pthread_t ta, tb;
        pthread_create(&ta, NULL, work_run, &a);
        pthread_create(&tb, NULL, work_run, &b);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        if (a.st != PLAIT_OK || b.st != PLAIT_OK) {
            printf("     %s\n", plait_last_error());
            same = 0;
            break;
        }
        same = memcmp(a.result, alone_a.result, work_floats(&a) * sizeof(float)) == 0 &&
               memcmp(b.result, alone_b.result, work_floats(&b) * sizeof(float)) == 0 &&
               memcmp(&a.sumsq, &alone_a.sumsq, sizeof a.sumsq) == 0 && memcmp(&b.sumsq, &alone_b.sumsq, sizeof b.sumsq) == 0;
        if (!same) printf("     trial %d: a thread's results differ from the same calls made alone\n", trial);
    }
    check(same, "two threads calling the kernels at once get, bit for bit, what each gets alone");
    check(h->device->synchronize() == PLAIT_OK, "no failure recorded");
    work_free(&a), work_free(&b), work_free(&alone_a), work_free(&alone_b);
}

/* ---- scratch grown mid-run ------------------------------------------------------ */

/* The emulator's count of device-wide synchronisations, found in the loaded
 * plugin (plait_cuda_emu_device_syncs); NULL on a GPU's plugin. */
static uint64_t (*device_syncs_counter(const plait_kernels *k))(void) {
    Dl_info info;
    if (!dladdr((void *)k->sgemm, &info) || !info.dli_fname) return NULL;
    void *lib = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!lib) return NULL;
    uint64_t (*fn)(void) = (uint64_t (*)(void))dlsym(lib, "plait_cuda_emu_device_syncs");
    dlclose(lib); /* the loader's reference keeps it loaded */
    return fn;
}

/* Calls larger than any before grow the kernels' scratch (LayerNorm's
 * column sums; in bf16 the operand copies), as the first step does. That
 * must not synchronise the device (cudaFree would, and wait for collectives
 * in flight on the communication stream), and the scratch counts in the
 * memory report. */
static void check_scratch_growth(const plait_host *h, const plait_kernels *k) {
    const int64_t rows = 1024, C = 256, OC = 512;
    work w;
    if (!work_init(&w, h, k, rows, C, OC, 21)) {
        check(0, "memory for the scratch test");
        return;
    }
    uint64_t (*syncs)(void) = device_syncs_counter(k);
    uint64_t used0, peak0, used1, peak1, s0 = syncs ? syncs() : 0;
    h->device->memory_stats(&used0, &peak0);
    w.rounds = 1;
    k->matmul_forward(w.out, w.inp, w.w, NULL, rows, C, OC);
    k->layernorm_forward(w.dinp, w.mean, w.rstd, w.inp, w.lw, w.lw, rows, C);
    k->layernorm_backward(w.dinp, w.dw, w.db, w.inp, w.inp, w.lw, w.mean, w.rstd, rows, C);
    uint64_t s1 = syncs ? syncs() : 0;
    h->device->memory_stats(&used1, &peak1);
    printf("     scratch grown by %llu bytes; %s\n", (unsigned long long)(used1 - used0),
           syncs ? "device-wide synchronisations counted by the emulator" : "synchronisations not counted on a GPU");
    if (syncs) {
        printf("     %llu device-wide synchronisations while it grew\n", (unsigned long long)(s1 - s0));
        check(s1 == s0, "growing the kernels' scratch makes no device-wide synchronisation");
    }
    check(used1 > used0 && peak1 >= used1, "the kernels' scratch counts in memory_stats (in use and peak)");
    check(h->device->synchronize() == PLAIT_OK, "no failure recorded");
    work_free(&w);
}

/* ---- a failure reported where it happened ------------------------------------ */

typedef struct waiter {
    const plait_host *h;
    plait_device_stream stream;
    plait_status st;
    char why[256];
} waiter;

/* what the communicator's thread does for a collective: record an event and wait for it */
static void *wait_for_event(void *arg) {
    waiter *w = arg;
    plait_device_event *ev = w->h->device->event_create();
    w->st = ev ? w->h->device->event_record(ev, w->stream) : PLAIT_ERR_SYSTEM;
    if (w->st == PLAIT_OK) w->st = w->h->device->event_synchronize(ev);
    if (w->st != PLAIT_OK) snprintf(w->why, sizeof w->why, "%s", plait_last_error());
    w->h->device->event_destroy(ev);
    return NULL;
}

/* A kernel entry that fails (a product cuBLASLt refuses: lda 2 < K 8)
 * records its failure for the model's thread. Another thread waiting for an
 * event meanwhile, as the communicator's thread waits for a collective's
 * ready event, must not be handed that failure: its collective did nothing
 * wrong, and the step would lose the error. synchronize() reports it. */
static void check_failure_attribution(const plait_host *h, const plait_kernels *k) {
    float *a = dev_values(h, 64, 11), *b = dev_values(h, 64, 12), *c = plait_tensor_alloc(h, 64, "attribution test");
    if (!a || !b || !c) {
        check(0, "memory for the failure attribution test");
        return;
    }
    k->sgemm(0, 0, 4, 4, 8, 1.0f, a, 2, b, 4, 0.0f, c, 4);
    int quiet = 1;
    for (int s = 0; s < 2; s++) {
        waiter w = {h, s ? PLAIT_STREAM_COMPUTE : PLAIT_STREAM_COMM, PLAIT_OK, ""};
        pthread_t t;
        pthread_create(&t, NULL, wait_for_event, &w);
        pthread_join(t, NULL);
        if (w.st != PLAIT_OK) printf("     event on the %s stream: %s\n", s ? "compute" : "communication", w.why);
        quiet &= w.st == PLAIT_OK;
    }
    check(quiet, "another thread's event waits (communication and compute stream) do not report a kernel's failure");
    plait_status st = h->device->synchronize();
    const char *why = st != PLAIT_OK ? plait_last_error() : "";
    if (st != PLAIT_OK) printf("     synchronize: %s\n", why);
    check(st != PLAIT_OK && strstr(why, "cuBLASLt"), "the model thread's synchronize reports the failed product");
    check(h->device->synchronize() == PLAIT_OK, "a reported failure is reported once");
    h->free(a), h->free(b), h->free(c);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "bf16";
    const char *plugin = getenv("PLAIT_TEST_CUDA_PLUGIN") ? getenv("PLAIT_TEST_CUDA_PLUGIN") : "cuda";
    plait_host_install();
    plait_config *cfg = plait_config_new();
    char text[160];
    snprintf(text, sizeof text, "[device]\nplugin = %s\n[run]\nprecision = %s\ndeterministic = true\n", plugin, mode);
    static char *const noenv[] = {NULL};
    if (plait_config_declare_core(cfg) != PLAIT_OK || plait_config_load_string(cfg, "test.ini", text) != PLAIT_OK ||
        plait_config_finalize(cfg, noenv) != PLAIT_OK) {
        fprintf(stderr, "FATAL: config: %s\n", plait_last_error());
        return 1;
    }
    if (plait_device_open(plait_plugin_host(), cfg, 0, 1) != PLAIT_OK) {
        const char *why = plait_last_error();
        if (strstr(why, "no CUDA device")) {
            printf("SKIP: %s\n", why);
            plait_config_free(cfg);
            return 77;
        }
        fprintf(stderr, "FATAL: open: %s\n", why);
        plait_config_free(cfg);
        return 1;
    }
    plait_host_attach_device();
    const plait_host *h = plait_host_table();
    printf("device: %s, precision %s\n", plait_device_info_open()->name, mode);
    uint64_t used = 0, peak = 0;
    h->device->memory_stats(&used, &peak);
    check(used >= (uint64_t)16 << 20, "the column-sum scratch (scratch_mib, 16 MiB) is allocated when the device opens");
    check_staged_read(h);
    check_two_threads(h, plait_device_kernels());
    check_failure_attribution(h, plait_device_kernels());
    check_scratch_growth(h, plait_device_kernels());
    plait_device_close();
    plait_host_attach_device();
    plait_config_free(cfg);
    printf("%s: %d failure%s\n", g_fails ? "FAILED" : "passed", g_fails, g_fails == 1 ? "" : "s");
    return g_fails ? 1 : 0;
}
