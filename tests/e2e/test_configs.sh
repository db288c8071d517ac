#!/usr/bin/env bash
# Every shipped config trains: each configs/*.ini runs 2 steps in its own
# layout (gpt-3d starts 8 ranks) and ends with a complete checkpoint and a
# finite loss on every step.
source "$(dirname "$0")/lib.sh"
n=0
for CFG in "$PLAIT_SOURCE_DIR"/configs/*.ini; do
  name=$(basename "$CFG" .ini)
  train "$name" run.steps=2 run.eval_every=0 run.progress=off
  [ -e "$E2E_WORK/$name/ckpt-00000002/COMPLETE" ] || fail "$name: no complete checkpoint at step 2"
  losses=$(column "$name" loss | tr '\n' ' ')
  column "$name" loss | awk '$1 + 0 == $1 && $1 > 0 && $1 < 1e30 { ok++ } END { exit !(ok == 2 && NR == 2) }' ||
    fail "$name: the losses of its 2 steps are not finite: $losses"
  echo "$name OK: losses $losses"
  n=$((n + 1))
done
[ $n -ge 1 ] || fail "no configs found in $PLAIT_SOURCE_DIR/configs"
echo "configs OK: $n configs trained"
