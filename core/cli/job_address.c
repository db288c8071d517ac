/* Where a job on several hosts meets, and its secret (plait_cli_job_address
 * in cli.h): read by the launcher of a fixed job (cli_launch.c) and of an
 * elastic one (cli_elastic.c) alike. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "launch/net.h"
#include "launch/slurm_env.h"
#include "launch/store.h"
#include "runtime/error.h"

plait_status plait_cli_job_address(const char *rendezvous, const char *what, char *host, size_t cap, int *port,
                                   const char **token) {
    plait_status st;
    const char *addr = getenv("MASTER_ADDR");
    if (rendezvous && *rendezvous) {
        st = plait_net_split_hostport(rendezvous, "[comm] rendezvous", host, cap, port);
    } else if (addr && *addr) {
        const char *p = getenv("MASTER_PORT");
        if (!p || plait_cli_parse_int(p, 1, 65535, port) != 0)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "MASTER_ADDR is set but MASTER_PORT is %s%s%s",
                                   p ? "'" : "not set", p ? p : "", p ? "', not a port" : "");
        snprintf(host, cap, "%s", addr);
        st = PLAIT_OK;
    } else if (getenv("SLURM_NODELIST") || getenv("SLURM_STEP_NODELIST")) {
        st = plait_slurm_store_address(NULL, host, cap, port);
    } else {
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: nothing says where the job's store is; set MASTER_ADDR and MASTER_PORT (the "
                               "store's host, a free port) or [comm] rendezvous on every host",
                               what);
    }
    if (st != PLAIT_OK) return st;
    *token = getenv("PLAIT_JOB_TOKEN");
    if (!*token || !**token || strlen(*token) > PLAIT_STORE_MAX_TOKEN)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG,
                               "%s: set the same secret PLAIT_JOB_TOKEN (1..%d bytes) on every host, "
                               "e.g. export PLAIT_JOB_TOKEN=$(head -c 24 /dev/urandom | base64)",
                               what, PLAIT_STORE_MAX_TOKEN);
    return PLAIT_OK;
}
