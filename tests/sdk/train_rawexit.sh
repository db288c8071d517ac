#!/usr/bin/env bash
# usage: train_rawexit.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_rawexit (tests/sdk/broken_uds.c, BREAK_RAWEXIT:
# init calls _exit(0) on world rank 1), [comm] timeout = 3600. No exit handler
# sees _exit, so the rank ends with status 0; plait's launcher counts it as
# failed all the same, since the rank never marked its command finished: the
# job ends non-zero at once, naming rank 1, instead of rank 0 waiting
# out the timeout for a rank that will never arrive.
. "$(dirname "$0")/train_common.sh"
train uds_rawexit comm.timeout=3600 run.steps=2
ended_at_once uds_rawexit "rank 1 failed: exited with status 0 before its command finished"
echo "_exit in init: the job ended in $took s, naming rank 1, no rank timed out"
