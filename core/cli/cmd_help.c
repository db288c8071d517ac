/* plait help [command] */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "plugin/loader.h"

void plait_cli_print_overview(FILE *out) {
    fprintf(out, "plait %s — distributed deep-learning training (plugin ABI v%d.%d)\n\n"
                 "usage: plait <command> [options]\n\ncommands:\n",
            PLAIT_VERSION, PLAIT_ABI_MAJOR, PLAIT_ABI_MINOR);
    for (int i = 0; plait_commands[i]; i++)
        fprintf(out, "  %-10s %s\n", plait_commands[i]->name, plait_commands[i]->summary);
    fprintf(out, "\n'plait help <command>' shows a command's options. Environment: PLAIT_LOG_LEVEL, "
                 "PLAIT_PLUGIN_PATH,\nPLAIT_<SECTION>_<KEY> for any config key (the file < the environment < the command "
                 "line).\n"
                 "\nAny command takes -n N to run N ranks of itself on this host; started by mpirun, srun "
                 "or a\ntorchrun-style environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), each process "
                 "joins as one rank.\n");
}

const plait_command *plait_cli_find_command(const char *name) {
    for (int i = 0; plait_commands[i]; i++)
        if (strcmp(plait_commands[i]->name, name) == 0) return plait_commands[i];
    return NULL;
}

static int cmd_help(int argc, char **argv, const plait_cli_job_opts *job) {
    (void)job; /* starts no ranks */
    if (argc < 2) {
        plait_cli_print_overview(stdout);
        return 0;
    }
    const plait_command *c = plait_cli_find_command(argv[1]);
    if (!c) {
        fprintf(stderr, "plait: no command '%s'; 'plait help' lists them\n", argv[1]);
        return 2;
    }
    printf("%s", c->usage);
    return 0;
}

const plait_command plait_cmd_help = {"help", "show help for plait or one command",
                                      "usage: plait help [command]\n", cmd_help};

