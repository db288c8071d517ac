#!/usr/bin/env bash
# `plait plan --explain LAYOUT --trace FILE` writes the planner's step of a
# dp 1 x tp 2 x pp 2 layout as a trace: Chrome trace-event JSON, a process
# per rank with its stage (rank r: stage r / (dp x tp)), on each rank's
# main track every micro-batch's forward and backward once, spans nesting
# or apart, one step; its summary has TP and PP time, a bubble (waits on
# neighbours) on the first stage, no DP. `plait trace compare` of the file
# with itself differs nowhere; with a trace of other ranks it says so.
# --trace without --explain, into a missing folder or over a file plait
# did not write is refused.
source "$(dirname "$0")/lib.sh"
pred=$E2E_WORK/pred.json
"$PLAIT_BIN" plan "$CFG" --ranks 4 --explain "dp1 tp2 pp2" --trace "$pred" parallel.plugin=hybrid \
  >"$E2E_WORK/plan.out" 2>&1 || fail "plan --trace: $(tail -n 5 "$E2E_WORK/plan.out")"
grep -q "^predicted step written to $pred" "$E2E_WORK/plan.out" || fail "plan did not say where: $(tail -n 3 "$E2E_WORK/plan.out")"
python3 - "$pred" <<'PY' || fail "the predicted trace: $(head -c 2000 "$pred")"
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
for e in ev:
    assert e["ph"] in ("M", "X") and isinstance(e["pid"], int) and isinstance(e["tid"], int), e
    if e["ph"] == "X":
        assert all(k in e for k in ("ts", "dur", "cat", "name", "args")) and e["dur"] >= 0, e
stage = {e["args"]["rank"]: e["args"]["stage"] for e in ev if e["ph"] == "M" and e["name"] == "plait_rank"}
assert stage == {0: 0, 1: 0, 2: 1, 3: 1}, stage
per = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        per[(e["pid"], e["tid"])].append(e)
for r in range(4):
    main = per[(r + 1, 1)]
    fwd = sorted(e["args"]["mb"] for e in main if e["name"] == "forward")
    bwd = sorted(e["args"]["mb"] for e in main if e["name"] == "backward")
    assert fwd and fwd == bwd == list(range(len(fwd))), (r, fwd, bwd)
    assert [e["name"] for e in main if e["cat"] == "step"] == ["step 1"], r
for key, track in per.items():
    track.sort(key=lambda e: (e["ts"], -e["dur"]))
    ends = []
    for e in track:
        while ends and ends[-1] <= e["ts"] + 0.0015:
            ends.pop()
        assert not ends or e["ts"] + e["dur"] <= ends[-1] + 0.0015, (key, e)
        ends.append(e["ts"] + e["dur"])
PY
"$PLAIT_BIN" trace summary "$pred" >"$E2E_WORK/summary.out" 2>&1 || fail "summary: $(cat "$E2E_WORK/summary.out")"
# rank step compute dp tp pp other wait idle
awk '$1 ~ /^[0-9]+$/ && NF == 10 { n++
  if ($5 != 0 || $6 <= 0 || $7 <= 0 || ($1 < 2 && $9 <= 0)) { print; bad = 1 } } END { exit bad || n != 4 }' \
  "$E2E_WORK/summary.out" || fail "predicted parts: $(cat "$E2E_WORK/summary.out")"

"$PLAIT_BIN" trace compare "$pred" "$pred" >"$E2E_WORK/same.out" 2>&1 || fail "compare: $(cat "$E2E_WORK/same.out")"
[ "$(grep -cE '^(all|[0-3]) +[-0-9]+ +[a-z]+ ' "$E2E_WORK/same.out")" -eq 32 ] || fail "compare rows: $(cat "$E2E_WORK/same.out")"
grep -E '^(all|[0-3]) ' "$E2E_WORK/same.out" | awk '$6 != "+0.000" && $6 != "-0.000" { bad = 1 } END { exit bad }' ||
  fail "a trace differs from itself: $(cat "$E2E_WORK/same.out")"
grep -Eq "^2 +1 " "$E2E_WORK/same.out" || fail "compare does not name rank 2's stage 1: $(cat "$E2E_WORK/same.out")"
# a prediction of 2 ranks beside one of 4: the ranks in both, said so
"$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp1 tp1 pp2" --trace "$E2E_WORK/two.json" parallel.plugin=hybrid >/dev/null 2>&1 ||
  fail "plan of 2 ranks"
"$PLAIT_BIN" trace compare "$E2E_WORK/two.json" "$pred" >"$E2E_WORK/other.out" 2>&1 || fail "compare 2 vs 4: $(cat "$E2E_WORK/other.out")"
grep -q "has 2 ranks, $pred 4: only the 2 in both are compared" "$E2E_WORK/other.out" || fail "$(cat "$E2E_WORK/other.out")"

out=$("$PLAIT_BIN" plan "$CFG" --ranks 4 --trace "$E2E_WORK/x.json" 2>&1) && fail "--trace without --explain ran"
grep -q "give it with --explain LAYOUT" <<<"$out" || fail "--trace without --explain: $out"
out=$("$PLAIT_BIN" plan "$CFG" --ranks 4 --explain "dp1 tp2 pp2" --trace "$E2E_WORK/no/such/p.json" parallel.plugin=hybrid 2>&1) &&
  fail "--trace into a missing folder succeeded"
grep -q "no/such/p.json" <<<"$out" || fail "--trace into a missing folder: $(tail -n 2 <<<"$out")"
echo "my notes" >"$E2E_WORK/notes.json"
out=$("$PLAIT_BIN" plan "$CFG" --ranks 4 --explain "dp1 tp2 pp2" --trace "$E2E_WORK/notes.json" parallel.plugin=hybrid 2>&1) &&
  fail "--trace over another file succeeded"
grep -q "notes.json" <<<"$out" && grep -qx "my notes" "$E2E_WORK/notes.json" || fail "--trace over another file: $(tail -n 2 <<<"$out")"
echo "trace plan OK"
