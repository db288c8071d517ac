#!/usr/bin/env bash
# [run] trace: a dp 2 x pp 2 run tracing steps 2 and 3 (the last, with its
# checkpoint and evaluation) writes trace.json, Chrome trace-event JSON
# (trace_check.py: every rank a process, exactly the traced steps, each
# collective on every member of its group with the same bytes, each send's
# flow ending at its receive); `plait trace summary` prints a row per rank
# whose columns add up to its steps' time (the work after a step is not
# counted in it); `plait trace merge` rewrites the same file, and
# merges what is left when rank 0's file is missing; a trace or a rank's
# file with what plait never writes (a pid of 1e300, a span before the
# clock's 0) is refused naming its line; a range outside the
# run's steps, a value that is not one, and a trace directory that cannot
# be written are refused before step 1 (and by plait config check). A rank killed inside the traced
# steps leaves the others' files, which plait trace merge joins.
source "$(dirname "$0")/lib.sh"
H="run.steps=3 parallel.plugin=hybrid parallel.dp=2 parallel.pp=2"
train traced $H run.trace=2:3
out=$E2E_WORK/traced
grep -q "^trace of steps 2 to 3: $out/trace.json (4 ranks" "$E2E_WORK/traced.out" ||
  fail "rank 0 did not say where the trace is: $(grep trace "$E2E_WORK/traced.out")"
ls "$out"/trace/rank-0000{0,1,2,3}.trace >/dev/null || fail "a rank's file is missing: $(ls "$out/trace")"
python3 "$PLAIT_SOURCE_DIR/tests/e2e/trace_check.py" "$out/trace.json" 4 2 3 || fail "trace.json"

"$PLAIT_BIN" trace summary "$out/trace.json" >"$E2E_WORK/summary.out" 2>&1 || fail "summary: $(cat "$E2E_WORK/summary.out")"
for r in 0 1 2 3; do
  grep -Eq "^ +$r +2 +[0-9.]+ +[0-9.]+ " "$E2E_WORK/summary.out" || fail "summary has no row for rank $r: $(cat "$E2E_WORK/summary.out")"
done
# step = compute + dp + tp + pp + cp + other + wait + idle, idle never below 0
awk '$1 ~ /^[0-9]+$/ && $2 == 2 && NF == 11 { s = 0; for (i = 4; i <= 11; i++) s += $i
  if (s - $3 > 0.01 || $3 - s > 0.01 || $11 < -0.01) { print; bad = 1 } } END { exit bad }' "$E2E_WORK/summary.out" ||
  fail "summary rows that do not add up: $(cat "$E2E_WORK/summary.out")"
grep -q "^largest exposed transfers:" "$E2E_WORK/summary.out" || fail "summary names no transfer"

cp "$out/trace.json" "$E2E_WORK/first.json"
rm "$out/trace.json"
"$PLAIT_BIN" trace merge "$out" >"$E2E_WORK/merge.out" 2>&1 || fail "merge: $(cat "$E2E_WORK/merge.out")"
cmp -s "$out/trace.json" "$E2E_WORK/first.json" || fail "plait trace merge wrote another file than the run's rank 0"
# a run whose rank 0 died before writing its file: the others still merge
rm "$out/trace/rank-00000.trace"
"$PLAIT_BIN" trace merge "$out" >"$E2E_WORK/merge3.out" 2>&1 || fail "merge without rank 0: $(cat "$E2E_WORK/merge3.out")"
grep -q "merged 3 rank traces" "$E2E_WORK/merge3.out" || fail "merge without rank 0: $(cat "$E2E_WORK/merge3.out")"
grep -q "missing ranks wrote none" "$E2E_WORK/merge3.out" || fail "the missing rank was not said: $(cat "$E2E_WORK/merge3.out")"

train_refused range "key 'trace' in [run]: '5:9' lies outside the steps this run trains; this run trains steps 1 to 3" \
  "run.out_dir=$E2E_WORK/range" $H run.trace=5:9
grep -q "ckpt\|trace" < <(ls "$E2E_WORK/range" 2>/dev/null) && fail "a refused range trained: $(ls "$E2E_WORK/range")"
train_refused syntax "'2-3' is not a step number or range" "run.out_dir=$E2E_WORK/syntax" $H run.trace=2-3
# one process (no launcher's check): the range refused before the start's
# memory table; plait config check refuses both as train would
train_refused range1 "'5:9' lies outside the steps this run trains; this run trains steps 1 to 3" \
  "run.out_dir=$E2E_WORK/range1" run.steps=3 run.trace=5:9
grep -q "memory on rank 0" "$E2E_WORK/range1.out" && fail "the refused range came after the memory table"
for v in 2-3 5:9; do
  "$PLAIT_BIN" config check "$CFG" run.steps=3 "run.trace=$v" >"$E2E_WORK/check-$v.out" 2>&1 &&
    fail "config check accepted run.trace=$v"
  grep -q "key 'trace' in \[run\]: '$v' " "$E2E_WORK/check-$v.out" ||
    fail "config check's refusal of run.trace=$v: $(tail -n 2 "$E2E_WORK/check-$v.out")"
done
mkdir -p "$E2E_WORK/blocked"
echo "not a directory" >"$E2E_WORK/blocked/trace"
# files plait did not write as it writes them are refused, naming the line:
# a rank beyond any job's (pid 1e300), a span's time before the clock's 0
printf '{"traceEvents":[\n{"ph":"X","pid":1e300,"tid":1,"ts":0,"dur":5,"cat":"step","name":"step 1"},\n' \
  >"$E2E_WORK/hostile.json"
"$PLAIT_BIN" trace summary "$E2E_WORK/hostile.json" >"$E2E_WORK/hostile.out" 2>&1 && fail "a pid of 1e300 was summarised"
grep -q "hostile.json:2: an \"X\" event with pid 1e+300" "$E2E_WORK/hostile.out" ||
  fail "the hostile pid: $(cat "$E2E_WORK/hostile.out")"
mkdir -p "$E2E_WORK/hostile/trace"
printf 'plait-trace 1\nrank 0\nspan\t1\tstep\t-5\t9\t-1\t-1\t1\t-1\t-1\t-1\t-1\t-1\tstep 1\t\t\n' \
  >"$E2E_WORK/hostile/trace/rank-00000.trace"
"$PLAIT_BIN" trace merge "$E2E_WORK/hostile" >"$E2E_WORK/hostile-merge.out" 2>&1 && fail "a span before the clock's 0 was merged"
grep -q "rank-00000.trace:3: not a plait rank trace line (a span's thread" "$E2E_WORK/hostile-merge.out" ||
  fail "the hostile span: $(cat "$E2E_WORK/hostile-merge.out")"
train_refused blocked "$E2E_WORK/blocked/trace is in the way of the ranks' traces (not a directory)" \
  "run.out_dir=$E2E_WORK/blocked" $H run.trace=2

# a rank killed inside the traced steps: the others write what they
# recorded from their failure path, each saying where, rank 0 merges
# nothing (the range did not end), and plait trace merge joins the
# survivors' files
kill_midstep killed 4 1 5 10 parallel.plugin=hybrid parallel.pp=4 data.micro_batch=1 run.steps=100000 \
  run.ckpt_every=0 run.trace=1:100000 >/dev/null
out=$E2E_WORK/killed
for r in 0 2 3; do
  grep -q "^span" "$out/trace/rank-0000$r.trace" || fail "rank $r left no spans after rank 1 was killed: $(ls "$out/trace")"
  grep -q "spans it recorded up to the failure are in $out/trace/rank-0000$r.trace; \`plait trace merge $out\`" \
    "$out/rank-$r.log" || fail "rank $r did not say where its spans are: $(grep -i trace "$out/rank-$r.log" | tail -n 3)"
done
[ ! -e "$out/trace/rank-00001.trace" ] && [ ! -e "$out/trace.json" ] || fail "files of a range that did not end: $(ls "$out" "$out/trace")"
"$PLAIT_BIN" trace merge "$out" >"$E2E_WORK/merge_killed.out" 2>&1 || fail "merge after the kill: $(cat "$E2E_WORK/merge_killed.out")"
python3 -c 'import json, sys
ranks = {e["pid"] - 1 for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"}
assert ranks == {0, 2, 3}, ranks' "$out/trace.json" || fail "the merged survivors' trace"
echo "trace OK"
