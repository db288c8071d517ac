#!/usr/bin/env bash
# A rank of a middle pipeline stage killed with SIGKILL mid-step:
# pp = 4, world rank 1 is stage 1. Every other rank exits 1 by itself
# with an error naming world rank 1 (its own neighbours
# directly, the rest through the failure cascade, which passes on the root
# cause) and the operation it was in; the launcher exits non-zero naming the
# killed rank (kill_midstep in lib.sh checks all of it). No checkpoint is
# written, so the kill lands in a step: a pipeline transfer or the step's
# collectives.
source "$(dirname "$0")/lib.sh"
kill_midstep run 4 1 20 10 parallel.plugin=hybrid parallel.pp=4 data.micro_batch=1 run.steps=100000 \
  run.ckpt_every=0
echo "pp fault OK: survivors ended ${KILL_ELAPSED}s after stage 1 was killed"
