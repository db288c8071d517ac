#!/usr/bin/env bash
# usage: train_silent.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_silent (tests/sdk/broken_uds.c, BREAK_SILENT:
# isend returns PLAIT_ERR_SYSTEM without host->set_error after 60 sends):
# the job fails within the timeout, and its message names the plugin's
# isend() and the missing message, not a stale one left by an earlier call.
. "$(dirname "$0")/train_common.sh"
rc=0
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 comm.plugin=uds_silent \
  comm.timeout=20 run.steps=20 run.eval_every=0 run.progress=off "run.out_dir=$work/run" >"$work/out" 2>&1 || rc=$?
cat "$work/out" | tail -n 6
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "the run over uds_silent exited $rc (0: the failure was lost; 124: it hung)"
grep -q "the comm plugin's isend() returned 'system error' without a message" "$work/out" ||
  fail "the silent isend failure is not named"
echo "silent failure: named as the plugin's isend() without a message"
