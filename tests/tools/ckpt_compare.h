/*
 * Comparing two checkpoints, for the end-to-end tests (the ckpt_diff tool)
 * and its own unit test.
 *
 *   ckpt_diff A B [--files model|optim|all] [--bits | --rtol X | --elementwise --rtol X --atol Y]
 *
 * Both directories are opened with plait_ckpt_open, which verifies them
 * (marker, manifest, checksums, strict safetensors headers, F32 only); one
 * that fails, e.g. with optim.safetensors missing, is a usage/I-O error.
 * Then, in each selected file (default all), the two checkpoints must hold
 * the same tensor names with the same shapes: a tensor present on one side
 * only, a shape that differs (even with the same element count) and a
 * selection without any tensor are failures, each named on stderr. The
 * values are compared in one of three modes:
 *   --bits         every tensor bit-identical;
 *   per tensor     (default, --rtol X, X = 1e-5 unless given)
 *                  max|a-b| / max|a| <= X for each tensor: the difference
 *                  relative to the tensor's scale, so elements that happen
 *                  to sit near zero do not turn rounding noise into a large
 *                  relative error;
 *   --elementwise  (--rtol X, --atol Y, both 0 unless given) every element:
 *                  |a-b| <= X * max(|a|, |b|) + Y.
 * NaN anywhere in a compared value fails (bits: only if the bits differ).
 * stdout gets one summary line (the worst tensor or element); stderr one
 * line per problem.
 *
 * Exit status (ckpt_diff_run's return): 0 within bounds, 1 different, 2 bad
 * arguments or a checkpoint that does not open.
 */
#ifndef PLAIT_TESTS_CKPT_COMPARE_H
#define PLAIT_TESTS_CKPT_COMPARE_H

#include <stdio.h>

/* Run the tool on argv (argv[0] is the program name), writing the summary to
 * `out` and problems to `err`. Not thread-safe (plait's error state). */
int ckpt_diff_run(int argc, char **argv, FILE *out, FILE *err);

#endif
