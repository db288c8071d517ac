/* The distributed optimizer's masters, checked before any rank starts (cli/masters_check.h). */
#include "cli/masters_check.h"

#include "cli/cost_device.h"
#include "cost/activations.h"
#include "cost/layouts.h"
#include "device/device.h"
#include "model/model.h"
#include "runtime/error.h"

plait_status plait_cli_check_masters(const plait_config *cfg) {
    /* only master = sharded is refused where the model reads float32: any
     * other choice is fine whatever the device, which then is not asked */
    if (plait_cost_check_masters(cfg, 0) == PLAIT_OK) return PLAIT_OK;
    plait_clear_error();
    plait_cli_device dev;
    plait_cli_device_ask(cfg, &dev);
    plait_model_desc *desc = NULL;
    if (dev.fell_back || plait_model_describe(cfg, 1, &desc) != PLAIT_OK) {
        plait_clear_error(); /* the ranks refuse it, or the preflight described the model */
        return PLAIT_OK;
    }
    const int tp = (int)plait_config_int(cfg, "parallel", "tp");
    const plait_cost_shape_in in = {.B = 1,
                                    .tp = tp,
                                    .tensor_parallel = tp > 1,
                                    .cp = (int)plait_config_int(cfg, "parallel", "cp"),
                                    .precision = plait_device_precision(cfg),
                                    .device = &dev.cost};
    plait_cost_shape shape;
    plait_cost_shape_init(&shape, plait_model_desc_spec(desc), &in);
    plait_model_desc_free(desc);
    return plait_cost_check_masters(cfg, shape.bf16);
}
