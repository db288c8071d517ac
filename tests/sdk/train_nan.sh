#!/usr/bin/env bash
# usage: train_nan.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 with optim zero_nan (tests/sdk/broken_optim.c,
# BREAK_NAN: zero1 that writes NaN into a parameter after each update): the
# checkpoint of step 1 is refused (it would hold the NaN) naming the
# parameter and the plugin, the run exits non-zero, no checkpoint is left;
# without checkpoints on the way, step 2 stops on its non-finite gradient.
. "$(dirname "$0")/train_common.sh"
rc=0
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 optim.plugin=zero_nan \
  run.steps=4 run.ckpt_every=1 run.eval_every=0 run.progress=off "run.out_dir=$work/run" >"$work/out" 2>&1 || rc=$?
tail -n 3 "$work/out"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a run whose loss became NaN exited $rc"
grep -q "checkpoint at step 1: parameter [a-z_.0-9]* holds NaN at element 0: not saved (no run could start from it); the last update of \[optim\] plugin zero_nan" \
  "$work/out" || fail "the NaN parameter is not named with the plugin"
! grep -q "^done:" "$work/out" || fail "the run said it was done"
! ls -d "$work"/run/ckpt-* >/dev/null 2>&1 || fail "a checkpoint was saved: $(ls "$work/run")"
rc=0
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 optim.plugin=zero_nan \
  run.steps=4 run.ckpt_every=0 run.eval_every=0 run.progress=off "run.out_dir=$work/run2" >"$work/out2" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "without checkpoints on the way, the run exited $rc"
grep -q "step 2: .*not finite" "$work/out2" || fail "step 2 did not stop: $(tail -n 2 "$work/out2")"
! ls -d "$work"/run2/ckpt-* >/dev/null 2>&1 || fail "a checkpoint was saved: $(ls "$work/run2")"
echo "NaN parameters: never saved, the run stops naming the plugin"
