/* ckpt_diff: compare two checkpoint directories (usage and modes in
 * ckpt_compare.h). */
#include <stdio.h>

#include "ckpt_compare.h"

int main(int argc, char **argv) { return ckpt_diff_run(argc, argv, stdout, stderr); }
