#!/usr/bin/env bash
# usage: train_optim_silent.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny in one process with zero_silentcreate and zero_silentstep
# (tests/sdk/broken_optim.c: create(), or the 3rd step(), returns an error
# without host->set_error): each run fails, and its message names the
# plugin's function and the missing message, not a stale one left by an
# earlier call (materialize's read of a fresh run's absent optimizer state).
# And zero_probe, whose probe says it cannot run here: not selected, its
# reason said.
. "$(dirname "$0")/train_common.sh"
# run PLUGIN: gpt-tiny with optimizer PLUGIN; its output in $work/out-PLUGIN
run() {
  rc=0
  PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini optim.plugin="$1" run.steps=5 \
    run.eval_every=0 run.ckpt_every=0 run.progress=off "run.out_dir=$work/run-$1" >"$work/out-$1" 2>&1 || rc=$?
  tail -n 3 "$work/out-$1"
  failed "$1"
}
run zero_silentcreate
grep -qF "the optim plugin 'zero_silentcreate''s create() returned 'system error' without a message" \
  "$work/out-zero_silentcreate" || fail "the silent create() failure is not named"
run zero_silentstep
grep -qF "the optim plugin 'zero_silentstep''s step() returned 'internal error' without a message" \
  "$work/out-zero_silentstep" || fail "the silent step() failure is not named"
! grep -q "no optimizer state" "$work/out-zero_silentstep" || fail "the silent step() failure got a stale message"
# an optimizer whose probe says it cannot run here is not selected
run zero_probe
grep -qF "the optim plugin zero_probe cannot run here: no widget found" "$work/out-zero_probe" ||
  fail "an optimizer that cannot run here was used"
! grep -q "^step " "$work/out-zero_probe" || fail "an optimizer that cannot run here trained"
echo "silent optimizer failures: named as the plugin's create() and step() without a message; a probe's no heard"
