#!/usr/bin/env bash
# usage: train_hang.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_hang (tests/sdk/broken_uds.c, BREAK_HANG: wait()
# ignores its timeout), [comm] timeout = 2. Rank 1 is stopped (SIGSTOP)
# mid-run, so rank 0's wait on it never returns by itself: the watchdog
# (core/commstate/comm_watchdog.h) ends rank 0 after the timeout and its
# grace, naming the plugin, wait() and the peer; the launcher ends the job
# (a job that hung instead meets `timeout 100`).
. "$(dirname "$0")/train_common.sh"
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 comm.plugin=uds_hang \
  comm.timeout=2 run.steps=1000000 run.eval_every=0 run.progress=off "run.out_dir=$work/run" >"$work/out" 2>&1 &
job=$!
# a few steps in, stop rank 1
for _ in $(seq 1 300); do
  [ "$(wc -l 2>/dev/null <"$work/run/metrics.csv" || echo 0)" -ge 4 ] && break
  kill -0 $job 2>/dev/null || break
  sleep 0.2
done
stopped=
for p in $(pgrep -f -- "$work/run" || true); do
  if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "PLAIT_RANK=1"; then kill -STOP "$p"; stopped=$p; fi
done
[ -n "$stopped" ] || { cat "$work/out"; fail "rank 1 was not found running"; }
t0=$SECONDS
rc=0
wait $job || rc=$?
took=$((SECONDS - t0))
tail -n 4 "$work/out"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "the run over uds_hang exited $rc (0: the stop was missed; 124: it hung)"
grep -q "rank 0 failed: the comm plugin 'uds_hang' has been inside wait() for [0-9.]* s, though it was given 2 s (communicator '[a-z]*', waiting on world rank 1); plait/comm.h \[timeout\]" "$work/out" ||
  fail "the job's end does not name uds_hang's wait() on rank 1 and the [timeout] rule"
echo "hang: the watchdog ended the job $took s after rank 1 stopped, naming uds_hang's wait()"
