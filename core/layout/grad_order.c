#include "layout/grad_order.h"

/* DP before PP: the embedding group sums the tied pair over values already
 * reduced over DP (so each pair is summed once, not once per DP replica).
 * The parallel plugin before the optimizer: an optimizer that reduces
 * gradients (ZeRO) all-reduces a PLAIT_PARAM_TIED_REMOTE parameter's
 * gradient over DP at its last backward, keeps it whole for the embedding
 * group's sum, and takes its shard of the sum in its own finish. The core's
 * local tied fold last: it adds gradients that are complete. */
static const plait_grad_finisher g_order[] = {
    PLAIT_GRAD_FINISH_DP, PLAIT_GRAD_FINISH_PP, PLAIT_GRAD_FINISH_TP, PLAIT_GRAD_FINISH_OPTIM, PLAIT_GRAD_FINISH_TIED,
};

int32_t plait_grad_finish_order(const plait_grad_finisher **order) {
    *order = g_order;
    return (int32_t)(sizeof g_order / sizeof g_order[0]);
}
