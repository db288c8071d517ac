/*
 * The whole model against PyTorch: tests/reference/make_gpt_fixture.py
 * (GPT-2 and the mlp arch) and make_llama_fixture.py (the llama arch: every
 * Llama kernel of the table, RMSNorm, the rotation, SwiGLU and
 * grouped-query attention, forward and backward; and multi-query attention
 * with Llama 3.1's rope scaling) wrote the exact weights,
 * a batch, and PyTorch's float64 logits, loss and parameter gradients. The
 * float32 model must match them closely.
 *
 *   test_model_reference                         the core's CPU kernels, host memory
 *   test_model_reference DEVICE PRECISION [--perturb] [RUN_KEY=VALUE ...]
 *
 * The second form opens [device] plugin = DEVICE with [run] precision =
 * PRECISION as a rank does (device/device.h, then the host table), so the
 * weights, gradients and activations live in the device's memory and every
 * kernel is the device's; results are copied back to be compared, with the
 * tolerances of that precision (tolerance_for below); RUN_KEY=VALUE adds
 * [run] keys (debug_bf16_emulate=true: the cpu device's bf16 without the
 * instructions, which calibrates the bf16 bounds here). DEVICE cuda with no
 * CUDA device (or no cuda plugin built) exits 77, "skipped" for ctest.
 * --perturb adds a small amount (tolerance_for: 1e-3 in fp32) to one
 * weight after the fixture's are loaded and expects the comparison to
 * fail: the checks on the sim and cpu devices prove it can.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h"
#include "host/host_table.h"
#include "model/model_harness.h"
#include "plugin/loader.h"
#include "runtime/error.h"

typedef struct fx_tensor {
    char name[128];
    char dtype[4];
    int ndim;
    long dims[4];
    size_t numel;
    void *data;
} fx_tensor;

typedef struct fixture {
    char arch[8];
    int n_layer, n_head, n_embd, block_size, vocab_size, batch;
    char arch_keys[512]; /* the arch's own [model] lines (llama's), or "" */
    int n;
    fx_tensor t[128];
    unsigned char *blob;
} fixture;

static void load_fixture(fixture *f, const char *file) {
    char path[1024];
    const char *src = getenv("PLAIT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/reference/%s", src ? src : ".", file);
    FILE *fp = fopen(path, "rb");
    if (!fp) fail_msg("cannot open fixture %s (set PLAIT_SOURCE_DIR)", path);
    memset(f, 0, sizeof *f);
    char line[1024];
    assert_non_null(fgets(line, sizeof line, fp));
    assert_string_equal(line, "PLAITFX1\n");
    assert_non_null(fgets(line, sizeof line, fp));
    int keys = 0;
    assert_int_equal(sscanf(line,
                            "config arch %7s n_layer %d n_head %d n_embd %d block_size %d "
                            "vocab_size %d batch %d%n",
                            f->arch, &f->n_layer, &f->n_head, &f->n_embd, &f->block_size, &f->vocab_size, &f->batch,
                            &keys),
                     7);
    /* the arch's own keys, "key value" pairs, as [model] lines */
    size_t kept = 0;
    char key[64], value[64];
    for (int n = 0; sscanf(line + keys, " %63s %63s%n", key, value, &n) == 2; keys += n) {
        kept += (size_t)snprintf(f->arch_keys + kept, sizeof f->arch_keys - kept, "%s = %s\n", key, value);
        assert_true(kept < sizeof f->arch_keys);
    }
    size_t total = 0;
    while (fgets(line, sizeof line, fp) && strcmp(line, "end\n") != 0) {
        assert_true(f->n < 128);
        fx_tensor *t = &f->t[f->n++];
        int off = 0;
        assert_int_equal(sscanf(line, "tensor %127s %3s %d%n", t->name, t->dtype, &t->ndim, &off),
                         3);
        t->numel = 1;
        for (int i = 0; i < t->ndim; i++) {
            int used = 0;
            assert_int_equal(sscanf(line + off, "%ld%n", &t->dims[i], &used), 1);
            off += used;
            t->numel *= (size_t)t->dims[i];
        }
        total += t->numel * (strcmp(t->dtype, "f64") == 0 ? 8 : 4);
    }
    f->blob = malloc(total);
    assert_non_null(f->blob);
    assert_int_equal(fread(f->blob, 1, total, fp), total);
    assert_int_equal(fgetc(fp), EOF);
    fclose(fp);
    unsigned char *p = f->blob;
    for (int i = 0; i < f->n; i++) {
        f->t[i].data = p;
        p += f->t[i].numel * (strcmp(f->t[i].dtype, "f64") == 0 ? 8 : 4);
    }
}

static fx_tensor *fx_get(fixture *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    fail_msg("fixture has no tensor %s", name);
    return NULL;
}

/* How close to PyTorch's float64 each precision must come. fp32: the
 * float32 model (CPU or GPU: only the order of float32 additions differs).
 * tf32 reads GEMM operands with 10 mantissa bits (unit roundoff 2^-11 =
 * 4.9e-4) and bf16 with 7 (2^-8 = 3.9e-3), accumulating in float32. The
 * fixtures' products are short (K <= 72), so one product's normwise error
 * is about 2u; a gradient comes out of about ten chained products (forward
 * and backward through 2 blocks and the head), whose independent errors
 * grow as sqrt(10): 2u x 3.2 ~ 3e-3 (tf32), 2.5e-2 (bf16). The bounds
 * allow twice that. Elementwise the bound is looser (a single small element
 * can carry the whole rounding of its row) and guards against garbage
 * (unwritten or misplaced elements) that the norm could average away; the
 * loss is a mean over every token, so its error is smaller. */
typedef struct tolerance {
    double rtol, atol_rel; /* elementwise: |got - want| <= atol_rel max|want| + rtol |want| */
    double norm;           /* ||got - want|| / ||want|| */
    double loss;           /* relative */
    double perturb;        /* --perturb: added to one weight; these bounds must notice.
                              bf16's notice 0.5 (the fixture's weights are ~0.02), not
                              0.05: they catch wrong or unwritten elements, not a
                              rounding-sized error in one weight */
} tolerance;

static tolerance tolerance_for(const char *precision) {
    if (strcmp(precision, "tf32") == 0) return (tolerance){1e-2, 5e-3, 6e-3, 1e-3, 5e-2};
    if (strcmp(precision, "bf16") == 0) return (tolerance){2.5e-1, 5e-2, 5e-2, 1e-2, 0.5};
    return (tolerance){1e-5, 1e-6, 1e-5, 1e-6, 1e-3};
}

static struct {
    const char *device, *precision; /* device NULL: no device opened (the CPU kernels) */
    int perturb;
    tolerance tol;
} g_run = {NULL, "fp32", 0, {1e-5, 1e-6, 1e-5, 1e-6, 1e-3}};

/* Checks `got` (n floats, host memory) against `want` elementwise and by
 * the norm; prints the worst element and returns 1 when either bound is
 * broken, else 0. */
static int compare(const char *what, const float *got, const double *want, size_t n) {
    const tolerance *t = &g_run.tol;
    double scale = 0, diff2 = 0, want2 = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    double atol = t->atol_rel * scale, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)got[i] - want[i];
        double err = fabs(d) / (atol + t->rtol * fabs(want[i]) + 1e-30);
        if (!(err <= worst)) { /* NaN is the worst */
            worst = err;
            wi = i;
        }
        diff2 += d * d;
        want2 += want[i] * want[i];
    }
    double norm = sqrt(diff2) / (sqrt(want2) + 1e-300);
    if (getenv("PLAIT_TEST_VERBOSE"))
        printf("%-50s worst %.3f of tolerance (rtol %.0e), normwise %.2e\n", what, worst, t->rtol, norm);
    if (!(worst <= 1.0) || !(norm <= t->norm)) {
        print_message("%s: element %zu is %.9g, PyTorch says %.9g (max |ref| %.3g; worst %.3g of the "
                      "elementwise bound); normwise error %.3g (bound %.1e)\n",
                      what, wi, (double)got[wi], want[wi], scale, worst, norm, t->norm);
        return 1;
    }
    return 0;
}

/* n floats of the model's memory (the device's, or host), as a host copy. */
static float *fetch(const float *src, size_t n) {
    float *h = malloc(n * sizeof *h);
    assert_non_null(h);
    assert_int_equal(plait_device_copy(h, src, n * sizeof *h, PLAIT_COPY_TO_HOST), PLAIT_OK);
    return h;
}

/* Runs one fixture; returns how many comparisons failed. */
static int run_fixture(const char *file) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    load_fixture(f, file);
    char ini[1024];
    snprintf(ini, sizeof ini,
             "[model]\narch = %s\nn_layer = %d\nn_head = %d\nn_embd = %d\nblock_size = %d\n"
             "vocab_size = %d\n%s",
             f->arch, f->n_layer, f->n_head, f->n_embd, f->block_size, f->vocab_size, f->arch_keys);
    harness h;
    assert_int_equal(harness_init(&h, ini, f->batch, 1, 0, NULL), 0);
    assert_int_equal(h.on_device, g_run.device && plait_device_mem_kind() != PLAIT_MEM_HOST);
    /* the fixture's weights, and nothing left over from init */
    int checked = 0;
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        char name[160];
        snprintf(name, sizeof name, "param.%s", p->name);
        fx_tensor *t = fx_get(f, name);
        assert_int_equal(t->numel, p->numel);
        assert_int_equal(t->ndim, p->ndim);
        for (int d = 0; d < p->ndim; d++) assert_int_equal(t->dims[d], p->shape[d]);
        float *w = t->data;
        if (g_run.perturb && p->ndim == 2 && checked == 0) {
            /* the first matrix (the embedding: every logit sees it, tied to
             * the head or, untied, through token 0, which the batch reads) */
            w = malloc(p->numel * sizeof *w);
            assert_non_null(w);
            memcpy(w, t->data, p->numel * sizeof *w);
            w[5] += (float)g_run.tol.perturb;
            print_message("perturbed %s[5] by %g\n", p->name, g_run.tol.perturb);
        }
        assert_int_equal(plait_device_copy(p->data, w, p->numel * sizeof(float), PLAIT_COPY_TO_DEVICE), PLAIT_OK);
        if (w != t->data) free(w);
        checked++;
    }
    /* every parameter but a tied head */
    assert_int_equal(checked, h.set.n_params - (harness_param(&h, "transformer.wte.weight") != NULL));

    const size_t ntok = (size_t)f->batch * (size_t)f->block_size;
    int failed = 0;
    plait_model_set_loss_scale(h.model, 1.0f / (float)ntok);
    assert_int_equal(harness_forward(&h, fx_get(f, "tokens")->data, fx_get(f, "targets")->data),
                     PLAIT_OK);
    float *logits = fetch(plait_model_logits(h.model, 0), ntok * (size_t)f->vocab_size);
    failed += compare("logits", logits, fx_get(f, "logits")->data, ntok * (size_t)f->vocab_size);
    free(logits);
    double loss = plait_model_loss_sum(h.model, 0) / (double)ntok;
    double want = ((double *)fx_get(f, "loss")->data)[0];
    if (!(fabs(loss - want) <= g_run.tol.loss * fabs(want))) {
        print_message("loss %.9f, PyTorch %.9f (relative bound %.0e)\n", loss, want, g_run.tol.loss);
        failed++;
    }

    for (int32_t l = h.spec->n_layers - 1; l >= 0; l--)
        assert_int_equal(plait_model_backward_layer(h.model, l, 0), PLAIT_OK);
    /* the trainer sums the tied head's gradient into wte's (here on the
     * host copies: the sum is the trainer's, not the model's) */
    plait_param *wte = harness_param(&h, "transformer.wte.weight");
    plait_param *head = harness_param(&h, "lm_head.weight");
    float *wte_grad = wte ? fetch(wte->grad, wte->numel) : NULL;
    if (wte) {
        float *head_grad = fetch(head->grad, head->numel);
        for (size_t i = 0; i < wte->numel; i++) wte_grad[i] += head_grad[i];
        free(head_grad);
    }
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p->name);
        float *g = p == wte ? wte_grad : fetch(p->grad, p->numel);
        failed += compare(name, g, fx_get(f, name)->data, p->numel);
        if (g != wte_grad) free(g);
    }
    free(wte_grad);
    if (g_run.device) assert_int_equal(plait_device_ops_open()->synchronize(), PLAIT_OK);
    harness_free(&h);
    free(f->blob);
    free(f);
    return failed;
}

/* Without --perturb every comparison holds; with it, some must fail. */
static void check_fixture(const char *file) {
    int failed = run_fixture(file);
    if (g_run.perturb) {
        if (failed == 0) fail_msg("%s: a weight perturbed by %g went unnoticed", file, g_run.tol.perturb);
        print_message("%s: the perturbed weight was caught (%d comparisons failed, as they must)\n", file, failed);
    } else if (failed) {
        fail_msg("%s: %d comparisons with PyTorch failed (%s%s%s)", file, failed, g_run.device ? g_run.device : "cpu kernels",
                 g_run.device ? ", " : "", g_run.device ? g_run.precision : "");
    }
}

static void test_gpt_matches_pytorch(void **state) {
    (void)state;
    check_fixture("gpt_fixture.bin");
}

static void test_mlp_matches_pytorch(void **state) {
    (void)state;
    check_fixture("mlp_fixture.bin");
}

static void test_llama_matches_pytorch(void **state) {
    (void)state;
    check_fixture("llama_fixture.bin");
}

static void test_llama_mqa_matches_pytorch(void **state) {
    (void)state;
    check_fixture("llama_mqa_fixture.bin");
}

static plait_config *g_cfg;

/* Opens [device] plugin = device with [run] precision as a rank does.
 * Returns 0, 77 (skip: cuda with no CUDA device or no cuda plugin), or 1. */
static int open_device(const char *device, const char *precision, const char *run_keys) {
    char ini[1024];
    snprintf(ini, sizeof ini, "[device]\nplugin = %s\n[run]\nprecision = %s\n%s", device, precision, run_keys);
    char *const no_env[] = {NULL};
    plait_config *cfg = plait_config_new();
    if (!cfg || plait_config_declare_core(cfg) != PLAIT_OK || plait_config_load_string(cfg, "test.ini", ini) != PLAIT_OK ||
        plait_config_finalize(cfg, no_env) != PLAIT_OK) {
        fprintf(stderr, "test_model_reference: %s\n", plait_last_error());
        plait_config_free(cfg);
        return 1;
    }
    plait_host_install();
    int32_t n = 0;
    plait_status st = plait_device_preflight_count(cfg, &n);
    if (st != PLAIT_OK && strcmp(device, "cuda") == 0) {
        /* not built (the plugin cannot be loaded) or no GPU: skipped, never passed */
        printf("SKIP: %s\n", plait_last_error());
        plait_config_free(cfg);
        return 77;
    }
    if (st == PLAIT_OK) st = plait_device_open(plait_plugin_host(), cfg, 0, 1);
    /* the device may read its keys while open: the config lives until exit */
    g_cfg = cfg;
    if (st != PLAIT_OK) {
        fprintf(stderr, "test_model_reference: %s\n", plait_last_error());
        return 1;
    }
    plait_host_attach_device();
    const plait_device_info *info = plait_device_info_open();
    printf("device %s (%s), precision %s: tolerances elementwise rtol %.0e + %.0e max|ref|, normwise %.0e, "
           "loss %.0e\n",
           device, info->name, precision, g_run.tol.rtol, g_run.tol.atol_rel, g_run.tol.norm, g_run.tol.loss);
    return 0;
}

int main(int argc, char **argv) {
    /* DEVICE PRECISION, then --perturb and [run] overrides key=value */
    char extra[512] = "";
    size_t used = 0;
    int bad = argc == 2;
    for (int i = 3; i < argc && !bad; i++) {
        const char *eq = strchr(argv[i], '=');
        if (strcmp(argv[i], "--perturb") == 0)
            g_run.perturb = 1;
        else if (eq && eq != argv[i] && used < sizeof extra)
            used += (size_t)snprintf(extra + used, sizeof extra - used, "%.*s = %s\n", (int)(eq - argv[i]), argv[i],
                                     eq + 1);
        else
            bad = 1;
    }
    if (bad || used >= sizeof extra) {
        fprintf(stderr, "usage: %s [DEVICE fp32|tf32|bf16 [--perturb] [RUN_KEY=VALUE ...]]\n", argv[0]);
        return 2;
    }
    if (argc >= 3) {
        g_run.device = argv[1];
        g_run.precision = argv[2];
        g_run.tol = tolerance_for(argv[2]);
        int rc = open_device(argv[1], argv[2], extra);
        if (rc) return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_matches_pytorch),
        cmocka_unit_test(test_mlp_matches_pytorch),
        cmocka_unit_test(test_llama_matches_pytorch),
        cmocka_unit_test(test_llama_mqa_matches_pytorch),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_run.device) {
        plait_device_close();
        plait_host_attach_device(); /* back to the CPU kernels before the plugins go */
        plait_host_uninstall();
    }
    plait_config_free(g_cfg);
    return rc;
}
