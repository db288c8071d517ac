/* The rendezvous address of a Slurm job (slurm_env.h). */
#include "launch/slurm_env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "launch/hostlist.h"
#include "runtime/error.h"

extern char **environ;

const char *plait_env_lookup(char *const *envp, const char *name) {
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (strncmp(*envp, name, n) == 0 && (*envp)[n] == '=') return *envp + n + 1;
    return NULL;
}

static int number(const char *v, long long *out) {
    if (!v || !*v) return -1;
    char *end = NULL;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || *end || x < 0) return -1;
    *out = x;
    return 0;
}

plait_status plait_slurm_store_address(char *const *envp, char *host, size_t cap, int *port) {
    if (!envp) envp = environ;
    const char *what = "SLURM_STEP_NODELIST", *list = plait_env_lookup(envp, what);
    if (!list) list = plait_env_lookup(envp, what = "SLURM_NODELIST");
    if (!list)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "neither SLURM_STEP_NODELIST nor SLURM_NODELIST is set: "
                                                         "cannot tell which node runs rank 0; set MASTER_ADDR");
    plait_status st = plait_hostlist_first(list, what, host, cap);
    if (st != PLAIT_OK) return st;
    long long p = 0, job = 0, step = 0;
    const char *mp = plait_env_lookup(envp, "MASTER_PORT");
    if (mp) {
        if (number(mp, &p) != 0 || p < 1 || p > 65535)
            return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "MASTER_PORT='%s' is not a port (1..65535)", mp);
        *port = (int)p;
        return PLAIT_OK;
    }
    if (number(plait_env_lookup(envp, "SLURM_JOB_ID"), &job) != 0)
        return plait_set_error(PLAIT_ERR_INVALID_CONFIG, "SLURM_JOB_ID is not set or not a number: cannot derive "
                                                         "the rendezvous port; set MASTER_PORT");
    if (number(plait_env_lookup(envp, "SLURM_STEP_ID"), &step) != 0) step = 0;
    *port = 20000 + (int)((16 * job + step) % 10000);
    return PLAIT_OK;
}
