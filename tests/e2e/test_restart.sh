#!/usr/bin/env bash
# Automatic restart (--max-restarts, launch/restart.h): a rank SIGKILLed
# mid-run after a checkpoint makes the launcher stop the job and relaunch it
# from that checkpoint once; the finished model is bit-identical to an
# uninterrupted run (deterministic mode), the restart is in the launcher's
# output, rank 0's log and metrics.csv (restarts column), and every step is
# in metrics.csv once. With --max-restarts 0 the same kill ends the job as
# without the option: non-zero exit naming the rank, no restart.
# A crash during the job's first save leaves only incomplete checkpoints:
# the restart starts over from step 0 and says so, where the directory held
# no checkpoint before the job; one that held another run's incomplete
# checkpoints is still refused, its metrics.csv untouched. A binary
# replaced on disk while the job runs does not stop its restart.
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
# --- a crash during the job's first checkpoint
rm -rf "${E2E_WORK:?}/first_save"
"$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/first_save" parallel.dp=2 run.steps=4 run.ckpt_every=2 \
  run.debug_die_in_save=2 --max-restarts 1 >"$E2E_WORK/first_save.out" 2>&1 ||
  { tail -n 8 "$E2E_WORK/first_save.out" >&2; fail "a crash during the first save was not recovered by a restart"; }
grep -q "^plait: rank 0 was killed by SIGKILL" "$E2E_WORK/first_save.out" || fail "the first attempt did not die in its save"
grep -q "every checkpoint in $E2E_WORK/first_save is incomplete (1 directory, the first: ckpt-00000002: this job's first save was interrupted), so the restart starts over from step 0" \
  "$E2E_WORK/first_save/rank-0.log" || fail "the restart from scratch was not explained: $(grep -i "incomplete\|restart" "$E2E_WORK/first_save/rank-0.log")"
[ "$(column first_save step | tr '\n' ' ')" = "1 2 3 4 " ] || fail "metrics.csv steps after the restart from scratch: $(column first_save step | tr '\n' ' ')"
[ -f "$E2E_WORK/first_save/ckpt-00000004/COMPLETE" ] || fail "the restarted job saved no final checkpoint"
# another run's incomplete checkpoints are not this job's to overwrite
rm -f "$E2E_WORK"/first_save/ckpt-*/COMPLETE
cp "$E2E_WORK/first_save/metrics.csv" "$E2E_WORK/first_save-metrics.csv"
if "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/first_save" parallel.dp=2 run.steps=4 --max-restarts 1 \
  >"$E2E_WORK/first_save-again.out" 2>&1; then fail "a job over another run's incomplete checkpoints started"; fi
grep -q "none is complete" "$E2E_WORK/first_save-again.out" || fail "unclear refusal: $(tail -n 2 "$E2E_WORK/first_save-again.out")"
cmp -s "$E2E_WORK/first_save/metrics.csv" "$E2E_WORK/first_save-metrics.csv" || fail "another run's metrics.csv was rewritten"

# --- the binary replaced on disk while the job runs (a reinstall, a rebuild):
# the restart runs the binary the job started with
mkdir -p "$E2E_WORK/bin"
cp "$PLAIT_BIN" "$E2E_WORK/bin/plait"
rm -rf "${E2E_WORK:?}/replaced"
"$E2E_WORK/bin/plait" train "$CFG" "run.out_dir=$E2E_WORK/replaced" parallel.dp=2 run.steps=6 run.ckpt_every=2 \
  run.debug_die_in_save=4 $PACE --max-restarts 1 >"$E2E_WORK/replaced.out" 2>&1 &
launcher=$!
for _ in $(seq 600); do
  [ "$(wc -l <"$E2E_WORK/replaced/metrics.csv" 2>/dev/null || echo 0)" -gt 1 ] && break
  sleep 0.05
done
cp "$PLAIT_BIN" "$E2E_WORK/bin/plait.new" && mv "$E2E_WORK/bin/plait.new" "$E2E_WORK/bin/plait"
RC=0
wait $launcher || RC=$?
[ $RC -eq 0 ] || { tail -n 8 "$E2E_WORK/replaced.out" >&2; fail "replaced: with the binary replaced on disk the restarted job exited $RC"; }
grep -q "^plait: restart 1 of 1" "$E2E_WORK/replaced.out" || fail "replaced: no restart: $(tail -n 4 "$E2E_WORK/replaced.out")"
[ -f "$E2E_WORK/replaced/ckpt-00000006/COMPLETE" ] || fail "replaced: the restarted job saved no final checkpoint"

echo "restart OK: killed rank 1 after $((KILLED_AT_ROWS - 1)) steps; one restart from step $K's checkpoint, bit-identical to an uninterrupted run; with 0 restarts the job ended (exit $RC); a crash in the first save restarted from step 0; a restart after the binary was replaced on disk ran"
