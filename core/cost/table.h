/*
 * Printing `plait plan`'s ranking: a header naming the cluster, one row per
 * valid layout (best predicted tokens/s first), and why each other layout
 * was skipped. Writes to `out` only; thread-safe for distinct streams.
 */
#ifndef PLAIT_CORE_COST_TABLE_H
#define PLAIT_CORE_COST_TABLE_H

#include <stdio.h>

#include "cost/layouts.h"

void plait_cost_print_header(FILE *out, const char *config, int ranks, const plait_cluster *c, double mem_limit);
/* Rows of the valid layouts (results already ranked); returns how many fit. */
size_t plait_cost_print_table(FILE *out, const plait_cost_result *r, size_t n);
/* "skipped: LAYOUT: WHY" for every invalid layout; returns their count. */
size_t plait_cost_print_skipped(FILE *out, const plait_cost_result *r, size_t n);

#endif
