/* The parallel checks of `plait plugin test` (see kit_parallel.h). */
#include "conformance/kit_parallel.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <plait/parallel.h>

#include "train/plan_check.h"
#include "train/preflight.h"

/* ---- the kit's model and data -------------------------------------------- */

int kit_parallel_write_config(const char *dir, char *ini, size_t cap) {
    char corpus[4096];
    snprintf(corpus, sizeof corpus, "%s/corpus.txt", dir);
    FILE *f = fopen(corpus, "w");
    if (!f) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", corpus, strerror(errno)), -1;
    /* 48 KiB of lowercase words from a fixed generator: bytes as tokens,
     * the same text on every machine */
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 48 * 1024; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        fputc((x >> 40) % 6 == 0 ? ' ' : 'a' + (int)((x >> 20) % 26), f);
    }
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", corpus, strerror(errno)), -1;
    snprintf(ini, cap, "%s/kit.ini", dir);
    f = fopen(ini, "w");
    if (!f) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", ini, strerror(errno)), -1;
    fprintf(f,
            "; written by plait plugin test for a parallel plugin\n"
            "[run]\nseed = 7\nsteps = 3\neval_every = 0\nckpt_every = 0\ndeterministic = true\nprogress = off\n"
            "[model]\narch = gpt\nn_layer = 4\nn_head = 4\nn_embd = 32\nblock_size = 16\nvocab_size = 256\n"
            "[data]\npath = %s\nval_fraction = 0\nglobal_batch = 8\nmicro_batch = 1\n"
            "[optim]\nplugin = adam\nlr = 1e-2\nwarmup_steps = 0\n",
            corpus);
    if (fclose(f) != 0) return plait_set_error(PLAIT_ERR_SYSTEM, "%s: %s", ini, strerror(errno)), -1;
    return 0;
}

int kit_parallel_layouts(uint32_t axes, int sizes[][3]) {
    /* single axes first, then their products (a plugin with several axes) */
    static const int all[][3] = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {1, 1, 4}, {2, 2, 1},
                                 {2, 1, 2}, {1, 2, 2}, {2, 2, 2}, {4, 1, 1}, {1, 4, 1}};
    const uint32_t bit[3] = {PLAIT_PARALLEL_AXIS_DP, PLAIT_PARALLEL_AXIS_TP, PLAIT_PARALLEL_AXIS_PP};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof all[0] && n < KIT_PARALLEL_MAX_LAYOUTS; i++) {
        int ok = 1;
        for (int a = 0; a < 3; a++)
            if (all[i][a] > 1 && !(axes & bit[a])) ok = 0;
        if (ok) memcpy(sizes[n++], all[i], sizeof all[i]);
    }
    return n;
}

void plait_kit_parallel_plans(plait_config *cfg, const char *layout, kit_report *rep) {
    int dp = (int)plait_config_int(cfg, "parallel", "dp"), tp = (int)plait_config_int(cfg, "parallel", "tp"),
        pp = (int)plait_config_int(cfg, "parallel", "pp");
    char name[32];
    snprintf(name, sizeof name, "plan %s", layout);
    plait_plan_set *ps = plait_plan_set_new(dp, tp, pp);
    if (!ps) {
        kit_report_add(rep, name, "plan", KIT_FAIL, "out of memory");
        return;
    }
    /* The preflight refuses a plan breaking a rule, as `plait train` does;
     * the kit's own copy of the plans names the rule for the report. */
    plait_status st = plait_layout_preflight_visit(cfg, plait_plan_set_add, ps);
    char why[KIT_WHY_LEN] = "";
    const char *rule = st != PLAIT_OK && plait_plan_set_ranks(ps) == dp * tp * pp
                           ? plait_plan_set_check(ps, why, sizeof why)
                           : NULL;
    if (st != PLAIT_OK && !rule) {
        rule = "plan";
        snprintf(why, sizeof why, "create/plan failed: %s", plait_last_error());
    }
    if (rule)
        kit_report_add(rep, name, rule, KIT_FAIL, "%s", why);
    else
        kit_report_add(rep, name, "plan", KIT_PASS, "%d ranks planned by every rule", dp * tp * pp);
    plait_plan_set_free(ps);
}

/* ---- losses -------------------------------------------------------------- */

/* The `loss` column of metrics.csv: up to `cap` values as text (compared
 * as printed: 17 significant digits, so equal text is equal bits). */
static int read_losses(const char *csv, char vals[][40], int cap) {
    FILE *f = fopen(csv, "r");
    if (!f) return -1;
    char line[4096];
    int col = -1, n = 0;
    if (fgets(line, sizeof line, f)) {
        int c = 0;
        for (char *save = NULL, *t = strtok_r(line, ",\n", &save); t; t = strtok_r(NULL, ",\n", &save), c++)
            if (strcmp(t, "loss") == 0) col = c;
    }
    while (col >= 0 && n < cap && fgets(line, sizeof line, f)) {
        char *p = line;
        for (int c = 0; c < col && p; c++) p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL;
        if (!p) continue;
        size_t len = strcspn(p, ",\n");
        snprintf(vals[n++], sizeof vals[0], "%.*s", (int)len, p);
    }
    fclose(f);
    return col < 0 ? -1 : n;
}

void plait_kit_parallel_losses(const char *layout, const char *base_csv, const char *run_csv, double rel_tol,
                               kit_report *rep) {
    char name[32], base[16][40], run[16][40];
    snprintf(name, sizeof name, "losses %s", layout);
    int nb = read_losses(base_csv, base, 16), nr = read_losses(run_csv, run, 16);
    if (nb <= 0) {
        kit_report_add(rep, name, "losses", KIT_FAIL, "the one-process run wrote no losses (%s)", base_csv);
        return;
    }
    if (nr != nb) {
        kit_report_add(rep, name, "losses", KIT_FAIL, "the layout's run wrote %d losses, one process %d (%s)",
                       nr < 0 ? 0 : nr, nb, run_csv);
        return;
    }
    double worst = 0;
    for (int i = 0; i < nb; i++) {
        double b = strtod(base[i], NULL), r = strtod(run[i], NULL), rel = fabs(r - b) / fabs(b);
        int same = rel_tol > 0 ? rel <= rel_tol : strcmp(base[i], run[i]) == 0;
        if (!same || r != r) {
            kit_report_add(rep, name, "losses", KIT_FAIL, "step %d: loss %s, one process %s (relative %.2g; %s)", i + 1,
                           run[i], base[i], rel, rel_tol > 0 ? "allowed 1e-5" : "must be equal");
            return;
        }
        if (rel > worst) worst = rel;
    }
    if (rel_tol > 0)
        kit_report_add(rep, name, "losses", KIT_PASS, "%d steps within %.2g of one process (allowed %.0e)", nb, worst,
                       rel_tol);
    else
        kit_report_add(rep, name, "losses", KIT_PASS, "%d steps bit-identical to one process (last %s)", nb,
                       base[nb - 1]);
}
