#!/usr/bin/env bash
# usage: train_fork.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_fork (tests/sdk/broken_uds.c, BREAK_FORK: init
# forks a helper that sleeps 600 s with copies of the rank's sockets): the
# job ends as soon as its ranks do, not when the helpers let go of the
# store's connections (a job that waited for them would meet `timeout 100`
# and exit 124).
. "$(dirname "$0")/train_common.sh"
start=$SECONDS
rc=0
# output to a file: a pipe would stay open as long as the helpers hold it
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 comm.plugin=uds_fork \
  run.steps=2 run.eval_every=0 run.progress=off "run.out_dir=$work/run" >"$work/out" 2>&1 || rc=$?
took=$((SECONDS - start))
[ $rc -ne 124 ] || fail "the job was still running after 100 s: it waited for the plugin's helpers (600 s)"
[ $rc -eq 0 ] || fail "the run exited $rc: $(tail -n 3 "$work/out")"
grep -q "^done: 2 steps" "$work/out" || fail "no done line: $(tail -n 2 "$work/out")"
echo "forked helpers: the job ended in $took s"
