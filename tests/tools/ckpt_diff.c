/*
 * ckpt_diff A B [--files model|optim|all] [--rtol X] [--bits]
 * Compares two checkpoint directories tensor by tensor (both files verified
 * on open). --bits: every tensor must be bit-identical (memcmp). Otherwise
 * each tensor's max|a-b| / max|a| must be <= rtol: the difference relative to
 * the tensor's scale, so elements that happen to sit near zero do not turn
 * rounding noise into a large relative error. Prints the worst tensor; exit 0 when within bounds, 1 otherwise,
 * 2 on usage or I/O errors.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "train/checkpoint.h"

static int compare_file(const plait_ckpt *a, const plait_ckpt *b, plait_ckpt_file f, int bits, double rtol,
                        double *worst, char *worst_name, size_t wn) {
    const plait_st_file *fa = plait_ckpt_st(a, f), *fb = plait_ckpt_st(b, f);
    if (!fa || !fb) return 0;
    if (plait_st_count(fa) != plait_st_count(fb)) {
        fprintf(stderr, "different tensor counts: %zu vs %zu\n", plait_st_count(fa), plait_st_count(fb));
        return 1;
    }
    int bad = 0;
    for (size_t i = 0; i < plait_st_count(fa); i++) {
        const plait_st_tensor *ta = plait_st_tensor_at(fa, i);
        const plait_st_tensor *tb = plait_st_find(fb, ta->name);
        if (!tb || tb->numel != ta->numel) {
            fprintf(stderr, "%s: missing or different shape in the second checkpoint\n", ta->name);
            bad = 1;
            continue;
        }
        if (bits) {
            if (memcmp(ta->data, tb->data, ta->bytes) != 0) {
                size_t k = 0;
                while (k < ta->numel && memcmp(&ta->data[k], &tb->data[k], sizeof(float)) == 0) k++;
                fprintf(stderr, "%s: differs first at element %zu (%.9g vs %.9g)\n", ta->name, k, ta->data[k],
                        tb->data[k]);
                bad = 1;
            }
            continue;
        }
        double scale = 0;
        for (size_t k = 0; k < ta->numel; k++) scale = fmax(scale, fabs(ta->data[k]));
        double diff = 0;
        for (size_t k = 0; k < ta->numel; k++) {
            double d = fabs((double)ta->data[k] - (double)tb->data[k]);
            if (!(d <= diff)) diff = d; /* NaN counts as worst */
        }
        double rel = scale > 0 ? diff / scale : diff;
        if (!(rel <= *worst) || !isfinite(rel)) {
            *worst = rel;
            snprintf(worst_name, wn, "%s", ta->name);
        }
        if (!(rel <= rtol)) bad = 1;
    }
    return bad;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ckpt_diff A B [--files model|optim|all] [--rtol X] [--bits]\n");
        return 2;
    }
    int bits = 0, files = 3;
    double rtol = 1e-5;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--bits")) bits = 1;
        else if (!strcmp(argv[i], "--rtol") && i + 1 < argc) rtol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--files") && i + 1 < argc) {
            i++;
            files = !strcmp(argv[i], "model") ? 1 : !strcmp(argv[i], "optim") ? 2 : 3;
        }
    }
    plait_ckpt *a = NULL, *b = NULL;
    if (plait_ckpt_open(argv[1], &a) != PLAIT_OK || plait_ckpt_open(argv[2], &b) != PLAIT_OK) {
        fprintf(stderr, "ckpt_diff: %s\n", plait_last_error());
        return 2;
    }
    double worst = 0;
    char name[512] = "-";
    int bad = 0;
    if (files & 1) bad |= compare_file(a, b, PLAIT_CKPT_MODEL, bits, rtol, &worst, name, sizeof name);
    if (files & 2) bad |= compare_file(a, b, PLAIT_CKPT_OPTIM, bits, rtol, &worst, name, sizeof name);
    if (bits)
        printf("%s\n", bad ? "checkpoints differ" : "checkpoints bit-identical");
    else
        printf("worst relative difference %.3g in %s (tolerance %.3g)\n", worst, name, rtol);
    plait_ckpt_close(a);
    plait_ckpt_close(b);
    return bad;
}
