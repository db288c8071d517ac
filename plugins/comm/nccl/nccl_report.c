/* What `plait doctor` shows of the nccl transport
 * (plait_plugin_desc.report): the NCCL it runs (the library loaded) beside
 * the one it was built against; an older library than the headers is a
 * problem. ncclGetVersion touches no GPU. */
#include <stdio.h>

#include "pnccl.h"

void nccl_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx) {
    (void)h, (void)cfg;
    int v = 0;
    char text[256];
    if (ncclGetVersion(&v) != ncclSuccess) v = 0;
    /* NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9 */
    snprintf(text, sizeof text, "NCCL %d.%d.%d loaded; built against %d.%d.%d", v / 10000, v / 100 % 100, v % 100,
             NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    if (v && v < NCCL_VERSION_CODE)
        line(ctx, text, "put the NCCL plait was built against (or newer) first on the library path");
    else
        line(ctx, text, NULL);
}
