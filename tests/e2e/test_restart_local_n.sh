#!/usr/bin/env bash
# Automatic restart of a job started with an explicit rank count: `plait
# train CONFIG -n 2 --max-restarts 1` (or [run] max_restarts = 1) restarts
# the job as the layout's own launcher does. Before, -n took the generic
# launcher of every command: --max-restarts was refused as "for `plait
# train`" (which it was) and [run] max_restarts was ignored, the job ending
# at the first failure. A rank killed in the job's first save
# (run.debug_die_in_save, only in the first attempt) is restarted from step
# 0 and the job finishes with every step once.
source "$(dirname "$0")/lib.sh"
J="parallel.dp=2 run.steps=4 run.ckpt_every=2 run.debug_die_in_save=2"
for how in flag config; do
  out=$E2E_WORK/$how
  rm -rf "$out"
  case $how in
    flag) restarts="--max-restarts 1" ;;
    config) restarts="run.max_restarts=1" ;;
  esac
  # shellcheck disable=SC2086
  "$PLAIT_BIN" train "$CFG" -n 2 "run.out_dir=$out" $J $restarts >"$out.out" 2>&1 ||
    { tail -n 8 "$out.out" >&2; fail "-n 2 with $restarts: the job was not restarted after its first attempt failed"; }
  grep -q "^plait: rank 0 was killed by SIGKILL" "$out.out" || fail "-n 2 with $restarts: the first attempt did not die in its save"
  grep -q "^plait: restart 1 of 1: relaunching 2 ranks from the latest complete checkpoint" "$out.out" ||
    fail "-n 2 with $restarts: the launcher did not announce the restart: $(tail -n 5 "$out.out")"
  [ "$(column "$how" step | tr '\n' ' ')" = "1 2 3 4 " ] ||
    fail "-n 2 with $restarts: metrics.csv steps are not 1..4 once each: $(column "$how" step | tr '\n' ' ')"
  [ -f "$out/ckpt-00000004/COMPLETE" ] || fail "-n 2 with $restarts: no final checkpoint"
done
# --max-restarts stays refused for the commands that have no checkpoint to resume from
if "$PLAIT_BIN" bench comm -n 2 --op allreduce --min 4K --max 4K --max-restarts 1 >"$E2E_WORK/bench.out" 2>&1; then
  fail "bench comm -n 2 --max-restarts 1 was accepted"
fi
grep -q "is for \`plait train\`" "$E2E_WORK/bench.out" || fail "bench comm --max-restarts: $(cat "$E2E_WORK/bench.out")"
echo "ok"
