#!/usr/bin/env bash
# [run] exit_signal: the signal, sent to plait's launcher or to one rank
# alone, stops every rank after the same step with a checkpoint of it,
# exiting 0 and saying how to continue; --resume then trains on, and the
# losses equal a run that never stopped, bit for bit (dp 2, deterministic,
# a constant rate so that the run's length does not change it). Without
# the key the same signal interrupts the job as any other does.
source "$(dirname "$0")/lib.sh"
S=(-n 2 parallel.dp=2 run.deterministic=true run.eval_every=0 optim.lr_schedule=constant optim.warmup_steps=0)
# far more steps than run before the signal: the run stops because of it
LONG=run.steps=100000

# start NAME ARGS...: plait train in the background into $E2E_WORK/NAME;
# its pid in $pid once it has written 2 rows of metrics
start() {
  local name=$1 i; shift
  rm -rf "${E2E_WORK:?}/$name"
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$E2E_WORK/$name.out" 2>&1 &
  pid=$!
  at_exit "kill -9 -- $pid 2>/dev/null"
  for ((i = 0; i < 600; i++)); do
    [ "$(column "$name" step 2>/dev/null | wc -l)" -ge 2 ] && return 0
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$E2E_WORK/$name.out" >&2; fail "run $name ended before the signal"; }
    sleep 0.1
  done
  fail "run $name wrote no 2 steps within a minute"
}

# stopped_at NAME SIGNAL: the run stopped with its checkpoint and said so;
# prints the step
stopped_at() {
  local line step
  line=$(grep "^stopped at step [0-9]* of 100000: $2 received (\[run\] exit_signal); checkpoint: .*/ckpt-[0-9]* (continue with --resume)" \
    "$E2E_WORK/$1.out") || fail "$1: the stop was not said: $(tail -n 3 "$E2E_WORK/$1.out")"
  step=$(sed 's/^stopped at step \([0-9]*\) .*/\1/' <<<"$line")
  [ "$(ls -d "$E2E_WORK/$1"/ckpt-* | xargs -n1 basename)" = "$(printf 'ckpt-%08d' "$step")" ] ||
    fail "$1: the stop did not save step $step alone: $(ls "$E2E_WORK/$1")"
  [ "$(column "$1" step | tail -n 1)" = "$step" ] || fail "$1: metrics rows past step $step"
  echo "$step"
}

# To the launcher, which passes it on.
start launcher "${S[@]}" "$LONG" run.exit_signal=SIGUSR1
kill -USR1 "$pid"
wait "$pid" || fail "the launcher's run exited $? after SIGUSR1"
grep -q "SIGUSR1 passed on to the ranks" "$E2E_WORK/launcher.out" || fail "the launcher did not say it passed SIGUSR1 on"
k=$(stopped_at launcher SIGUSR1)
train launcher "${S[@]}" "run.steps=$((k + 2))" run.exit_signal=SIGUSR1 --resume
train straight "${S[@]}" "run.steps=$((k + 2))"
same_losses straight launcher 0

# To rank 1 alone: rank 0 stops after the same step.
start rank1 "${S[@]}" "$LONG" run.exit_signal=SIGTERM
r1=$(for p in $(pgrep -P "$pid"); do tr '\0' '\n' <"/proc/$p/environ" | grep -qx PLAIT_RANK=1 && echo "$p"; done)
[ -n "$r1" ] || fail "rank 1 of the launcher $pid not found"
kill -TERM "$r1"
wait "$pid" || fail "the run exited $? after SIGTERM to rank 1"
# (exit 0 says rank 0 stopped with it: else rank 1 would have waited
# for it in the next step until [comm] timeout)
k=$(stopped_at rank1 SIGTERM)

# One process, no launcher: the signal reaches the run itself.
start single run.steps=100000 run.exit_signal=SIGHUP optim.lr_schedule=constant
kill -HUP "$pid"
wait "$pid" || fail "the one-process run exited $? after SIGHUP"
stopped_at single SIGHUP >/dev/null

# Without the key: an interruption, as any other signal is.
start plain "${S[@]}" "$LONG"
kill -USR1 "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = $((128 + 10)) ] || fail "SIGUSR1 without [run] exit_signal: exit $rc, not 138"
grep -q "interrupted by SIGUSR1" "$E2E_WORK/plain.out" || fail "the interruption was not said: $(tail -n 3 "$E2E_WORK/plain.out")"
! ls -d "$E2E_WORK"/plain/ckpt-* 2>/dev/null || fail "an interrupted run saved a checkpoint"
echo "exit_signal: stopped at step $k with its checkpoint, from the launcher and from one rank; resumed as a straight run"
