/*
 * The elastic launcher behind `plait train CONFIG --nnodes MIN:MAX` (one per
 * host; docs/multi-node.md "Elastic jobs"). Not thread-safe: the main thread
 * runs it (it starts ranks and handles their signals).
 */
#ifndef PLAIT_CLI_CLI_ELASTIC_H
#define PLAIT_CLI_CLI_ELASTIC_H

#include "config/config.h"

/* Run this host's part of the elastic job whose full layout (MAX hosts) is
 * `cfg` (finalized, preflighted), for the command line argv (argv[0]
 * "plait", argv[1] "train"); min..max hosts (max 0: Slurm's SLURM_NNODES);
 * at most `max_restarts` relaunches after failures. Returns the exit code. */
int plait_cli_launch_elastic(plait_config *cfg, int min, int max, int max_restarts, int argc, char **argv);

#endif
