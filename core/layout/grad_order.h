/*
 * The order in which a step's gradients finish: the one definition
 * (plait_grad_finisher in sdk/include/plait/parallel.h says what each step
 * does and why the order is what it is). The step executor
 * (train/run_step.c) walks it; plugins get it as host->grad_finish_order
 * (the hybrid plugin orders its axes by it).
 *
 * Pure and thread-safe; the array is static.
 */
#ifndef PLAIT_CORE_LAYOUT_GRAD_ORDER_H
#define PLAIT_CORE_LAYOUT_GRAD_ORDER_H

#include <stdint.h>
#include <plait/parallel.h>

/* Stores the finishers in order in *order; returns how many. */
int32_t plait_grad_finish_order(const plait_grad_finisher **order);

#endif
