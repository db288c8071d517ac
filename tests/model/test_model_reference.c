/*
 * The whole model against PyTorch: tests/reference/make_gpt_fixture.py
 * wrote the exact weights, a batch, and PyTorch's float64 logits, loss and
 * parameter gradients. The float32 model must match them closely.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_harness.h"

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
    char line[512];
    assert_non_null(fgets(line, sizeof line, fp));
    assert_string_equal(line, "PLAITFX1\n");
    assert_non_null(fgets(line, sizeof line, fp));
    assert_int_equal(sscanf(line,
                            "config arch %7s n_layer %d n_head %d n_embd %d block_size %d "
                            "vocab_size %d batch %d",
                            f->arch, &f->n_layer, &f->n_head, &f->n_embd, &f->block_size,
                            &f->vocab_size, &f->batch),
                     7);
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

/* |got - want| <= atol + rtol*|want| everywhere, with atol relative to the
 * tensor's largest magnitude. Prints the worst element on failure. */
static void compare(const char *what, const float *got, const double *want, size_t n, double rtol,
                    double atol_rel) {
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    double atol = atol_rel * scale, worst = 0;
    size_t wi = 0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)got[i] - want[i]) / (atol + rtol * fabs(want[i]) + 1e-30);
        if (err > worst) {
            worst = err;
            wi = i;
        }
    }
    if (getenv("PLAIT_TEST_VERBOSE")) printf("%-50s worst %.3f of tolerance (rtol %.0e)\n", what, worst, rtol);
    if (worst > 1.0)
        fail_msg("%s: element %zu is %.9g, PyTorch says %.9g (max |ref| %.3g)", what, wi,
                 (double)got[wi], want[wi], scale);
}

static void run_fixture(const char *file) {
    fixture *f = malloc(sizeof *f);
    assert_non_null(f);
    load_fixture(f, file);
    char ini[512];
    snprintf(ini, sizeof ini,
             "[model]\narch = %s\nn_layer = %d\nn_head = %d\nn_embd = %d\nblock_size = %d\n"
             "vocab_size = %d\n",
             f->arch, f->n_layer, f->n_head, f->n_embd, f->block_size, f->vocab_size);
    harness h;
    assert_int_equal(harness_init(&h, ini, f->batch, 1, 0, NULL), 0);
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
        memcpy(p->data, t->data, p->numel * sizeof(float));
        checked++;
    }
    assert_int_equal(checked, h.set.n_params - 1);

    const size_t ntok = (size_t)f->batch * (size_t)f->block_size;
    plait_model_set_loss_scale(h.model, 1.0f / (float)ntok);
    assert_int_equal(harness_forward(&h, fx_get(f, "tokens")->data, fx_get(f, "targets")->data),
                     PLAIT_OK);
    compare("logits", plait_model_logits(h.model, 0), fx_get(f, "logits")->data,
            ntok * (size_t)f->vocab_size, 1e-5, 1e-6);
    double loss = plait_model_loss_sum(h.model, 0) / (double)ntok;
    double want = ((double *)fx_get(f, "loss")->data)[0];
    if (fabs(loss - want) > 1e-6 * fabs(want)) fail_msg("loss %.9f, PyTorch %.9f", loss, want);

    for (int32_t l = h.spec->n_layers - 1; l >= 0; l--)
        assert_int_equal(plait_model_backward_layer(h.model, l, 0), PLAIT_OK);
    /* the trainer sums the tied head's gradient into wte's */
    plait_param *wte = harness_param(&h, "transformer.wte.weight");
    plait_param *head = harness_param(&h, "lm_head.weight");
    for (size_t i = 0; i < wte->numel; i++) wte->grad[i] += head->grad[i];
    for (int32_t i = 0; i < h.set.n_params; i++) {
        plait_param *p = &h.params[i];
        if (p->flags & PLAIT_PARAM_TIED_COPY) continue;
        char name[160];
        snprintf(name, sizeof name, "grad.%s", p->name);
        compare(name, p->grad, fx_get(f, name)->data, p->numel, 1e-5, 1e-6);
    }
    harness_free(&h);
    free(f->blob);
    free(f);
}

static void test_gpt_matches_pytorch(void **state) {
    (void)state;
    run_fixture("gpt_fixture.bin");
}

static void test_mlp_matches_pytorch(void **state) {
    (void)state;
    run_fixture("mlp_fixture.bin");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt_matches_pytorch),
        cmocka_unit_test(test_mlp_matches_pytorch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
