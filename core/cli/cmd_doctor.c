/* plait doctor [CONFIG] [section.key=value ...] [--peak], plait doctor --topology */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "doctor/doctor.h"
#include "runtime/error.h"
#include "runtime/log.h"

static int cmd_doctor(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    plait_doctor d = {.out = stdout};
    int topology = 0;
    const char *path = NULL;
    char **over = calloc((size_t)argc + 1, sizeof *over);
    int n_over = 0;
    if (!over) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--peak")) {
            d.measure_peak = 1;
        } else if (!strcmp(argv[i], "--topology")) {
            topology = 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "plait doctor: unknown option '%s'; 'plait help doctor' lists them\n", argv[i]);
            free(over);
            return 2;
        } else {
            plait_cli_take_positional(argv[i], &path, over, &n_over);
        }
    }
    if (topology && (path || n_over || d.measure_peak)) {
        fprintf(stderr,
                "plait doctor: --topology reads the node alone, without '%s': give a CONFIG, overrides or --peak "
                "without it; 'plait help doctor' lists them\n",
                path     ? path
                : n_over ? over[0]
                         : "--peak");
        free(over);
        return 2;
    }
    if (topology) {
        /* the node alone: what placement sees and what is lopsided */
        printf("plait doctor --topology: this node's hardware as plait places ranks on it\n\n");
        plait_doctor_topology(&d);
        free(over);
        return plait_doctor_summary(&d) ? 1 : 0;
    }
    printf("plait doctor: what plait will use on this machine, and why\n\n");
    plait_config *cfg = NULL;
    if (plait_cli_load_config(path, n_over, over, &cfg) != PLAIT_OK) {
        plait_doctor_problem(&d, "config", "fix what it names (plait config check says the same)", "%s",
                             plait_last_error());
        plait_clear_error();
    } else if (path) {
        plait_doctor_line(&d, "config", "%s: the machine as it would run it", path);
    }
    d.cfg = cfg;
    /* the plugins' info lines (a device opened and closed to ask what it
     * is) would interleave with the report: warnings only, unless the user
     * chose a level */
    if (!getenv("PLAIT_LOG_LEVEL")) (void)plait_log_configure("warn");
    plait_doctor_host(&d);
    plait_doctor_plugins(&d);
    plait_doctor_launch(&d);
    int problems = plait_doctor_summary(&d);
    plait_config_free(cfg);
    free(over);
    return problems ? 1 : 0;
}

const plait_command plait_cmd_doctor = {
    "doctor", "what plait will use on this machine and why, and what to fix",
    "usage: plait doctor [CONFIG] [section.key=value ...] [--peak]\n"
    "       plait doctor --topology\n\n"
    "Prints what plait finds and would use here: itself, the CPU and its features, the BLAS and its\n"
    "kernels (and whether they are the right ones for the CPU), math threads, precision, memory (and\n"
    "its limits), the MFU peak and where it came from, every plugin (available or why not) with what\n"
    "it reports: the devices (GPUs with driver and CUDA versions), NCCL, RDMA devices and their ports,\n"
    "the network interfaces a job would use; then the job environment seen (Slurm, torchrun, mpirun,\n"
    "PLAIT_* variables). It ends with the problems found and their fixes; exit 1 when there is one.\n"
    "  CONFIG, overrides   judge the machine for this configuration (its plugins, threads, keys)\n"
    "  --peak              measure the MFU peak again (5 tries, the best kept) and cache it\n"
    "  --topology          only the node's sockets, NUMA nodes, cores, GPUs and network cards (hwloc; the\n"
    "                      XML file PLAIT_TOPOLOGY names in place of this machine), each device's NUMA node\n"
    "                      and PCIe switch, and what is lopsided: a GPU with no NIC on its socket, NICs of\n"
    "                      different speeds, MTU 1500 on a fast link, SMT siblings counted as cores\n",
    cmd_doctor};
