/* What a checkpoint's parts are called: its directory ("ckpt-<digits>",
 * checkpoint_name.h) and the names its tensors are stored under
 * (checkpoint.h). The writer, the reader and the directory scan all name
 * through here. */
#include <stdio.h>
#include <string.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_name.h"
#include "model/tied.h"

const char *plait_ckpt_param_name(const plait_model_spec *spec, int32_t i) {
    return plait_tied_source(spec, &spec->params[i])->name;
}

int plait_ckpt_param_stored(const plait_model_spec *spec, int32_t i) { return !plait_tied_is_copy(&spec->params[i]); }

int plait_ckpt_optim_name(char *buf, size_t cap, const char *state, const char *param_name) {
    return snprintf(buf, cap, "optim.%s.%s", state, param_name);
}

int plait_ckpt_parse_dir_name(const char *name, int64_t *step) {
    size_t plen = strlen(PLAIT_CKPT_DIR_PREFIX);
    if (strncmp(name, PLAIT_CKPT_DIR_PREFIX, plen) != 0) return -1;
    const char *d = name + plen;
    if (!*d || strlen(d) > 18) return -1;
    int64_t v = 0;
    for (; *d; d++) {
        if (*d < '0' || *d > '9') return -1;
        v = v * 10 + (*d - '0');
    }
    *step = v;
    return 0;
}

void plait_ckpt_dir_path(char *buf, size_t cap, const char *out_dir, int64_t step) {
    snprintf(buf, cap, "%s/" PLAIT_CKPT_DIR_PREFIX "%08lld", out_dir, (long long)step);
}
