#!/usr/bin/env bash
# The bounded form of scripts/chaos.sh for CI (label `chaos`, so a run can
# pick it or leave it: ctest -L chaos / -LE chaos): an elastic job on
# network-namespace hosts takes faults drawn at random (the seed printed)
# for about a minute (a fault every 3 to 6 s), then every step is checked committed once, its loss
# bit-identical to one process, every checkpoint verified. Needs root
# (skipped, exit 77, saying why, otherwise).
source "$(dirname "$0")/lib.sh"
# not exec: lib.sh's EXIT trap removes $E2E_WORK when the run passes
CHAOS_WORK=$E2E_WORK/chaos PLAIT_BIN=$PLAIT_BIN CKPT_DIFF=$CKPT_DIFF \
  timeout 400 "$PLAIT_SOURCE_DIR/scripts/chaos.sh" --minutes 1 --steps 600 --gap 3:6
