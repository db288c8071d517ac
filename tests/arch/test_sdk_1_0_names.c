/* Source written against SDK 1.0 keeps compiling: the names renamed for
 * one meaning per name (configuration keys are "key", not "param"; a comm
 * plugin's own collectives are "native_coll", not "coll"; staging is
 * "staging", not "stage") stay available as aliases of the same types, the
 * same struct fields and the same values. */
#undef PLAIT_NO_SDK_1_0_NAMES /* plait's own build hides the old names */
#include <stddef.h>
#include <stdio.h>

#include <plait/plait.h>
#include <plait/device_util.h>

static const plait_param_decl keys[] = {
    {sizeof(plait_param_decl), PLAIT_PARAM_REQUIRED, "x", PLAIT_PARAM_INT, NULL, 0, 1, NULL, "x"},
};
static const plait_comm_coll_ops native = {.struct_size = sizeof native};
static const plait_comm_ops ops = {.struct_size = sizeof ops, .coll = &native};
static const plait_plugin_desc desc = {.struct_size = sizeof desc, .params = keys, .n_params = 1,
                                       .param_size = sizeof(plait_param_decl)};

int main(void) {
    int bad = 0;
    if (keys[0].type != PLAIT_KEY_INT || keys[0].flags != PLAIT_KEY_REQUIRED) bad = 1;
    if (sizeof(plait_param_decl) != sizeof(plait_key_decl)) bad = 1;
    if (ops.native_coll != &native || offsetof(plait_comm_ops, coll) != offsetof(plait_comm_ops, native_coll)) bad = 1;
    if (PLAIT_PARAM_HIDDEN != PLAIT_KEY_HIDDEN || PLAIT_PARAM_SAME_ON_ALL != PLAIT_KEY_SAME_ON_ALL) bad = 1;
    if (desc.keys != keys || desc.n_keys != 1 || desc.key_size != sizeof(plait_key_decl) ||
        offsetof(plait_plugin_desc, params) != offsetof(plait_plugin_desc, keys) ||
        offsetof(plait_plugin_desc, n_params) != offsetof(plait_plugin_desc, n_keys) ||
        offsetof(plait_plugin_desc, param_size) != offsetof(plait_plugin_desc, key_size))
        bad = 1;
    if (PLAIT_TENSOR_STAGE_FLOATS != PLAIT_TENSOR_STAGING_FLOATS) bad = 1; /* an SDK 1.3 name, kept the same way */
    puts(bad ? "FAIL: an SDK 1.0 name no longer means what it did" : "SDK 1.0 names ok");
    return bad;
}
