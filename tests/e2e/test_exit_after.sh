#!/usr/bin/env bash
# [run] exit_after_minutes: a run whose limit has passed (a limit shorter
# than any step here, so the first step passes it) stops after that step on
# every rank together, with a checkpoint of it, exiting 0 and saying how to
# continue; --resume then trains to the end, and the losses equal a run
# that never stopped, bit for bit (dp 2, deterministic). With the key 0 the
# run trains to its end. [run] exit_interval = 2 stops after steps 2 and 4
# (counted across the resume), each with its checkpoint, and the third
# start finishes the run: the same losses again.
source "$(dirname "$0")/lib.sh"
S=(-n 2 parallel.dp=2 run.steps=5 run.deterministic=true run.eval_every=0)
train straight "${S[@]}"
train stopped "${S[@]}" run.exit_after_minutes=1e-9
grep -q "^stopped at step 1 of 5: \[run\] exit_after_minutes = 1e-09 passed; checkpoint: .*/ckpt-00000001 (continue with --resume)" \
  "$E2E_WORK/stopped.out" || fail "the stop was not said: $(tail -n 3 "$E2E_WORK/stopped.out")"
[ "$(ls -d "$E2E_WORK"/stopped/ckpt-* | xargs -n1 basename)" = ckpt-00000001 ] ||
  fail "the stop did not save step 1 alone: $(ls "$E2E_WORK/stopped")"
[ "$(column stopped step | tr '\n' ' ')" = "1 " ] || fail "metrics rows past the stop: $(column stopped step)"
train stopped "${S[@]}" --resume
same_losses straight stopped 0
for at in 2 4; do
  train chunks "${S[@]}" run.exit_interval=2 $([ $at = 2 ] || echo --resume)
  grep -q "^stopped at step $at of 5: \[run\] exit_interval = 2 reached; checkpoint: .*/ckpt-0000000$at (continue with --resume)" \
    "$E2E_WORK/chunks.out" || fail "exit_interval: the stop at step $at was not said: $(tail -n 3 "$E2E_WORK/chunks.out")"
  [ "$(column chunks step | tail -n 1)" = $at ] || fail "exit_interval: metrics rows past step $at"
done
train chunks "${S[@]}" run.exit_interval=2 --resume
grep -q "^done: 5 steps" "$E2E_WORK/chunks.out" || fail "exit_interval: the third start did not finish the run"
same_losses straight chunks 0
train unlimited "${S[@]}" run.exit_after_minutes=0
[ "$(column unlimited step | tail -n 1)" = 5 ] || fail "exit_after_minutes = 0 stopped the run"
echo "exit_after_minutes: stopped at step 1 with its checkpoint; exit_interval: at steps 2 and 4; each resumed to step 5 as a straight run"
