#!/usr/bin/env bash
# Automatic restart (--max-restarts, launch/restart.h): a rank SIGKILLed
# mid-run after a checkpoint makes the launcher stop the job and relaunch it
# from that checkpoint once; the finished model is bit-identical to an
# uninterrupted run (deterministic mode), the restart is in the launcher's
# output, rank 0's log and metrics.csv (restarts column), and every step is
# in metrics.csv once. With --max-restarts 0 the same kill ends the job as
# without the option: non-zero exit naming the rank, no restart.
source "$(dirname "$0")/lib.sh"
N=12 K=4
# the sleep paces the steps (about 0.15 s each) so the kill lands mid-run; it changes no number
D="run.deterministic=true parallel.dp=2 data.micro_batch=2 run.steps=$N run.ckpt_every=$K optim.lr_decay_steps=$N"
PACE="run.debug_compute_sleep_ms=25"

# start_and_kill NAME MAX: launch with --max-restarts MAX, SIGKILL rank 1 once
# the checkpoint of step K is complete and training went on past it; the
# launcher's exit status in RC.
start_and_kill() {
  local name=$1 max=$2 out=$E2E_WORK/$1
  rm -rf "$out"
  # shellcheck disable=SC2086
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$out" $D $PACE --max-restarts "$max" >"$E2E_WORK/$name.out" 2>&1 &
  local launcher=$! rows=0 victim=""
  for _ in $(seq 600); do
    rows=0
    [ -f "$out/metrics.csv" ] && rows=$(wc -l <"$out/metrics.csv")
    [ -e "$out/ckpt-$(printf %08d $K)/COMPLETE" ] && [ "$rows" -gt $((K + 2)) ] && break
    kill -0 $launcher 2>/dev/null || break
    sleep 0.05
  done
  local pid
  for pid in $(pgrep -P $launcher); do
    grep -zqx "PLAIT_RANK=1" /proc/$pid/environ 2>/dev/null && victim=$pid
  done
  [ -n "$victim" ] || { kill $launcher; wait $launcher || true; cat "$E2E_WORK/$name.out" >&2; fail "$name: rank 1 not found running after step $K"; }
  kill -9 "$victim"
  RC=0
  wait $launcher || RC=$?
  KILLED_AT_ROWS=$rows
}

start_and_kill restarted 1
[ $RC -eq 0 ] || { tail -n 20 "$E2E_WORK/restarted.out" >&2; fail "with --max-restarts 1 the job exited $RC"; }
grep -q "^plait: restart 1 of 1: relaunching 2 ranks from the latest complete checkpoint" "$E2E_WORK/restarted.out" ||
  fail "the launcher did not announce the restart: $(tail -n 5 "$E2E_WORK/restarted.out")"
grep -q "restart 1 of at most 1 after: rank 1 was killed by SIGKILL; resuming at step [1-9][0-9]* from .*ckpt-" \
  "$E2E_WORK/restarted/rank-0.log" || fail "rank 0's log does not record the restart: $(grep -i restart "$E2E_WORK/restarted/rank-0.log")"
[ "$(column restarted step | tr '\n' ' ')" = "$(seq 1 $N | tr '\n' ' ')" ] ||
  fail "metrics.csv steps are not 1..$N once each: $(column restarted step | tr '\n' ' ')"
[ "$(column restarted restarts | sort -u | tr '\n' ' ')" = "0 1 " ] ||
  fail "metrics.csv restarts column is not 0 then 1: $(column restarted restarts | tr '\n' ' ')"
train straight $D
same_params restarted straight bits
same_losses restarted straight 0

start_and_kill no_restart 0
[ $RC -ne 0 ] || fail "with --max-restarts 0 the killed job exited 0"
grep -q "^plait: rank 1 was killed by SIGKILL" "$E2E_WORK/no_restart.out" || fail "the launcher did not name rank 1"
! grep -Eq "restart [0-9]+ of" "$E2E_WORK/no_restart.out" || fail "--max-restarts 0 restarted: $(grep -E "restart [0-9]+ of" "$E2E_WORK/no_restart.out")"
[ ! -e "$E2E_WORK/no_restart/ckpt-$(printf %08d $N)" ] || fail "--max-restarts 0 finished training anyway"
echo "restart OK: killed rank 1 after $((KILLED_AT_ROWS - 1)) steps; one restart from step $K's checkpoint, bit-identical to an uninterrupted run; with 0 restarts the job ended (exit $RC)"
