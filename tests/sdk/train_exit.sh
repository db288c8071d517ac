#!/usr/bin/env bash
# usage: train_exit.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_exit (tests/sdk/broken_uds.c, BREAK_EXIT: init
# calls exit(0) on world rank 1), [comm] timeout = 3600. An exit with status
# 0 before the run has finished is a failure: the job ends non-zero at once,
# its message naming rank 1 and the plugin's init(), instead of
# rank 0 waiting out the timeout for a rank that will never arrive.
. "$(dirname "$0")/train_common.sh"
train uds_exit comm.timeout=3600 run.steps=2
ended_at_once uds_exit "rank 1 failed: plait train: exited with status 0 inside the comm plugin 'uds_exit''s init()"
echo "exit in init: the job ended in $took s, naming rank 1 and uds_exit's init(), no rank timed out"
