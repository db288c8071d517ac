#!/usr/bin/env bash
# `plait plan --explain LAYOUT --trace FILE` writes the planner's step of a
# dp 1 x tp 2 x pp 2 layout as a trace: Chrome trace-event JSON, a process
# per rank with its stage (rank r: stage r / (dp x tp)), on each rank's
# main track every micro-batch's forward and backward once, spans nesting
# or apart, one step; its summary has TP and PP time, a bubble (waits on
# neighbours) on the first stage, no DP. Interleaved pp 2 with 2 chunks
# draws each chunk's forward and backward of every micro-batch, zb1 the
# input and weight halves of every backward. `plait trace compare` of the file
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
# rank step compute dp tp pp cp other wait idle
awk '$1 ~ /^[0-9]+$/ && NF == 11 { n++
  if ($5 != 0 || $6 <= 0 || $7 <= 0 || $8 != 0 || ($1 < 2 && $10 <= 0)) { print; bad = 1 } } END { exit bad || n != 4 }' \
  "$E2E_WORK/summary.out" || fail "predicted parts: $(cat "$E2E_WORK/summary.out")"

"$PLAIT_BIN" trace compare "$pred" "$pred" >"$E2E_WORK/same.out" 2>&1 || fail "compare: $(cat "$E2E_WORK/same.out")"
[ "$(grep -cE '^(all|[0-3]) +[-0-9]+ +[a-z]+ ' "$E2E_WORK/same.out")" -eq 33 ] || fail "compare rows: $(cat "$E2E_WORK/same.out")"
grep -E '^(all|[0-3]) ' "$E2E_WORK/same.out" | awk '$6 != "+0.000" && $6 != "-0.000" { bad = 1 } END { exit bad }' ||
  fail "a trace differs from itself: $(cat "$E2E_WORK/same.out")"
grep -Eq "^2 +1 " "$E2E_WORK/same.out" || fail "compare does not name rank 2's stage 1: $(cat "$E2E_WORK/same.out")"
# a prediction of 2 ranks beside one of 4: the ranks in both, said so
"$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp1 tp1 pp2" --trace "$E2E_WORK/two.json" parallel.plugin=hybrid >/dev/null 2>&1 ||
  fail "plan of 2 ranks"
"$PLAIT_BIN" trace compare "$E2E_WORK/two.json" "$pred" >"$E2E_WORK/other.out" 2>&1 || fail "compare 2 vs 4: $(cat "$E2E_WORK/other.out")"
grep -q "has 2 ranks, $pred 4: only the 2 in both are compared" "$E2E_WORK/other.out" || fail "$(cat "$E2E_WORK/other.out")"

# the schedules as the pp plugin runs them: interleaved pp 2 with 2 chunks
# a stage, a forward and a backward of each chunk for every micro-batch on
# every stage; zb1, a forward, an input half and a weight half for every
# micro-batch, the weight halves after their input halves, and no whole
# backward; 1f1b above, none of either
for sched in "interleaved v2" zb1; do
  f=$E2E_WORK/pred-${sched%% *}.json
  "$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp1 tp1 pp2 $sched" --trace "$f" parallel.plugin=hybrid \
    >"$E2E_WORK/plan-${sched%% *}.out" 2>&1 || fail "plan --trace $sched: $(tail -n 5 "$E2E_WORK/plan-${sched%% *}.out")"
done
python3 - "$E2E_WORK/pred-interleaved.json" "$E2E_WORK/pred-zb1.json" "$pred" <<'PY' || fail "the schedules' predicted traces"
import collections, json, sys
def main_spans(path):
    ev = json.load(open(path))["traceEvents"]
    per = collections.defaultdict(list)
    for e in ev:
        if e["ph"] == "X" and e["tid"] == 1 and e["cat"] == "compute":
            per[e["pid"] - 1].append(e)
    return per
inter = main_spans(sys.argv[1])
assert sorted(inter) == [0, 1], sorted(inter)
for r, spans in inter.items():
    got = collections.Counter((e["name"], e["args"]["chunk"], e["args"]["mb"]) for e in spans)
    mbs = sorted({e["args"]["mb"] for e in spans})
    assert len(mbs) >= 2 and mbs == list(range(len(mbs))), (r, mbs)
    want = collections.Counter((n, c, mb) for n in ("forward", "backward") for c in (0, 1) for mb in mbs)
    assert got == want, f"interleaved rank {r}: {sorted(got)} not 2 chunks x forward, backward x {mbs}"
zb = main_spans(sys.argv[2])
for r, spans in zb.items():
    names = collections.Counter(e["name"] for e in spans)
    mbs = {e["args"]["mb"] for e in spans}
    assert names["backward"] == 0 and names["forward"] == names["backward_input"] == names["backward_weight"] == len(mbs), \
        f"zb1 rank {r}: {dict(names)}"
    end_input = {e["args"]["mb"]: e["ts"] + e["dur"] for e in spans if e["name"] == "backward_input"}
    for e in spans:
        if e["name"] == "backward_weight":
            assert e["ts"] >= end_input[e["args"]["mb"]] - 0.0015, f"zb1 rank {r}: a weight half before its input half"
one = main_spans(sys.argv[3])
for r, spans in one.items():
    assert {e["name"] for e in spans} == {"forward", "backward"} and {e["args"]["chunk"] for e in spans} == {0}, r
print("schedules drawn as they run: interleaved v2 and zb1")
PY

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
