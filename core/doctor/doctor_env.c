/* plait doctor: the job environment seen (doctor.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor/doctor.h"
#include "launch/bootstrap.h"
#include "runtime/error.h"
#include "runtime/process_state.h"

extern char **environ;

/* "NAME=value NAME=value" of the variables starting with one of `prefixes`
 * (or named exactly, with a trailing '='), into buf; 0 when none. */
static int seen(const char *const *prefixes, char *buf, size_t cap) {
    size_t off = 0;
    int n = 0;
    buf[0] = '\0';
    for (char **e = environ; *e; e++)
        for (const char *const *p = prefixes; *p; p++) {
            size_t len = strlen(*p);
            if (strncmp(*e, *p, len) != 0) continue;
            /* a secret (the job token) is named, never shown */
            const char *eq = strchr(*e, '=');
            const int name_len = eq ? (int)(eq - *e) : (int)strlen(*e);
            char hidden[160];
            snprintf(hidden, sizeof hidden, "%.*s=(set)", name_len, *e);
            const char *shown = plait_env_name_secret(*e, (size_t)name_len) ? hidden : *e;
            if (off + strlen(shown) + 2 < cap) off += (size_t)snprintf(buf + off, cap - off, "%s%s", n ? " " : "", shown);
            n++;
            break;
        }
    return n;
}

void plait_doctor_launch(plait_doctor *d) {
    plait_job_env env;
    const char *rdv = d->cfg ? plait_config_str(d->cfg, "comm", "rendezvous") : NULL;
    if (plait_job_env_detect(NULL, rdv, &env) != PLAIT_OK) {
        plait_doctor_problem(d, "launcher", "correct or unset the variable it names", "%s", plait_last_error());
        plait_clear_error();
    } else if (env.launcher == PLAIT_LAUNCHER_NONE) {
        plait_doctor_line(d, "launcher", "none: plait train starts the layout's ranks on this host itself (or -n N, "
                          "or --nnodes with one launcher per host)");
    } else {
        char launcher[96];
        plait_doctor_line(d, "launcher", "%s: this process would be rank %d of %d (local rank %d of %d); the "
                          "rendezvous store from %s", plait_job_env_launcher(&env, launcher, sizeof launcher),
                          env.rank, env.size,
                          env.local_rank, env.local_size, env.store_source ? env.store_source : "?");
    }
    char buf[1024];
    static const char *const slurm[] = {"SLURM_JOB_ID=", "SLURM_STEP_ID=", "SLURM_NNODES=", "SLURM_NTASKS=", "SLURM_PROCID=",
                                        "SLURM_LOCALID=", "SLURM_NODEID=", "SLURM_STEP_NODELIST=", "SLURM_NODELIST=",
                                        NULL};
    static const char *const torchrun[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=",
                                           "MASTER_ADDR=", "MASTER_PORT=", NULL};
    static const char *const mpi[] = {"OMPI_COMM_WORLD_", "PMI_RANK=", "PMI_SIZE=", NULL};
    static const char *const own[] = {"PLAIT_", NULL};
    plait_doctor_line(d, "slurm", "%s", seen(slurm, buf, sizeof buf) ? buf : "no Slurm variables");
    plait_doctor_line(d, "torchrun", "%s", seen(torchrun, buf, sizeof buf) ? buf : "no torchrun-style variables");
    plait_doctor_line(d, "mpi", "%s", seen(mpi, buf, sizeof buf) ? buf : "no Open MPI variables");
    plait_doctor_line(d, "plait env", "%s", seen(own, buf, sizeof buf) ? buf : "no PLAIT_* variables");
}
