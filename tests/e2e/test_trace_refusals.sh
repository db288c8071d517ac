#!/usr/bin/env bash
# [run] trace's refusals before step 1 beside test_trace.sh's, on one
# process: a resumed run (its checkpoint at step 2) refuses a range that
# starts before the steps it trains, naming them (3 to 4), and trains
# nothing; a merged trace.json or a rank's file in the trace folder that
# plait did not write is refused and left as it was; a trace folder the
# rank cannot write into is refused (not as root, whom permissions do not
# stop: said, and skipped). The same resumed run with a range inside its
# steps traces them.
source "$(dirname "$0")/lib.sh"
S=(run.eval_every=0 run.ckpt_every=2)
train first run.steps=2 "${S[@]}"
rows=$(wc -l <"$E2E_WORK/first/metrics.csv")
train_refused resumed "key 'trace' in [run]: '1:3' lies outside the steps this run trains; this run trains steps 3 to 4" \
  "run.out_dir=$E2E_WORK/first" run.steps=4 run.resume=auto "${S[@]}" run.trace=1:3
[ "$(wc -l <"$E2E_WORK/first/metrics.csv")" = "$rows" ] || fail "a refused range trained: $(cat "$E2E_WORK/first/metrics.csv")"
train first run.steps=4 run.resume=auto "${S[@]}" run.trace=3:4
grep -q "^trace of steps 3 to 4: $E2E_WORK/first/trace.json (1 rank" "$E2E_WORK/first.out" ||
  fail "the resumed run's trace: $(grep -i trace "$E2E_WORK/first.out")"

# files in the way that plait did not write: refused, left as they were
mkdir -p "$E2E_WORK/foreign/trace" "$E2E_WORK/foreign-rank/trace"
echo "my notes" >"$E2E_WORK/foreign/trace.json"
train_refused foreign "$E2E_WORK/foreign/trace.json: a file, which plait did not write" \
  "run.out_dir=$E2E_WORK/foreign" run.steps=2 "${S[@]}" run.trace=1
grep -qx "my notes" "$E2E_WORK/foreign/trace.json" || fail "the foreign trace.json was changed"
echo "my notes" >"$E2E_WORK/foreign-rank/trace/rank-00000.trace"
train_refused foreign-rank "$E2E_WORK/foreign-rank/trace/rank-00000.trace: a file, which plait did not write" \
  "run.out_dir=$E2E_WORK/foreign-rank" run.steps=2 "${S[@]}" run.trace=1
grep -qx "my notes" "$E2E_WORK/foreign-rank/trace/rank-00000.trace" || fail "the foreign rank file was changed"
! grep -qs '^[0-9]' "$E2E_WORK/foreign/metrics.csv" "$E2E_WORK/foreign-rank/metrics.csv" || fail "a refused run trained"

# a trace folder that cannot be written into
if [ "$(id -u)" = 0 ]; then
  echo "note: running as root, whom a folder's permissions do not stop: the unwritable trace folder is not tried"
else
  mkdir -p "$E2E_WORK/readonly/trace"
  chmod 555 "$E2E_WORK/readonly/trace"
  at_exit "chmod 755 '$E2E_WORK/readonly/trace'"
  train_refused readonly "[run] trace: cannot write the ranks' traces in $E2E_WORK/readonly/trace" \
    "run.out_dir=$E2E_WORK/readonly" run.steps=2 "${S[@]}" run.trace=1
fi
echo "trace refusals OK"
