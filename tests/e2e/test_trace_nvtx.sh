#!/usr/bin/env bash
# With libnvToolsExt on the library path (a stand-in that logs its calls,
# tests/e2e/fake_nvtx.c), a traced dp 2 x pp 2 run opens an NVTX range for
# each traced step, pipeline instruction, layer forward and backward,
# optimizer step, collective and checkpoint: on every rank the ranges'
# names are exactly the names of those spans in trace.json, and on every
# thread each range is closed, in order (pushes and pops balance, never
# below zero). Steps outside the trace open none; PLAIT_NVTX=0 opens none.
source "$(dirname "$0")/lib.sh"
lib=${FAKE_NVTX_DIR:-}/libnvToolsExt.so.1
[ -e "$lib" ] || { echo "SKIP: the stand-in NVTX library ($lib) is not built"; exit 77; }
export LD_LIBRARY_PATH=$FAKE_NVTX_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
H="run.steps=3 parallel.plugin=hybrid parallel.dp=2 parallel.pp=2"
PLAIT_TEST_NVTX_LOG=$E2E_WORK/nvtx.log train nvtx $H run.trace=2:3
python3 - "$E2E_WORK/nvtx.log" "$E2E_WORK/nvtx/trace.json" <<'PY' || fail "NVTX ranges against the trace"
import collections, json, sys
pushed = collections.defaultdict(collections.Counter)
depth = collections.Counter()
for line in open(sys.argv[1]):
    rank, tid, what, name = line.rstrip("\n").split(" ", 3)
    if what == "push":
        pushed[int(rank)][name] += 1
        depth[(rank, tid)] += 1
    else:
        depth[(rank, tid)] -= 1
        assert depth[(rank, tid)] >= 0, f"rank {rank} thread {tid}: a pop without its push"
assert all(d == 0 for d in depth.values()), f"ranges left open: {dict(depth)}"
ev = json.load(open(sys.argv[2]))["traceEvents"]
spans = collections.defaultdict(collections.Counter)
for e in ev:
    if e["ph"] == "X" and e["cat"] in ("step", "instr", "compute", "optim", "ckpt", "coll"):
        spans[e["pid"] - 1][e["name"]] += 1
assert sorted(pushed) == sorted(spans) == [0, 1, 2, 3], (sorted(pushed), sorted(spans))
for r in spans:
    assert pushed[r] == spans[r], f"rank {r}: ranges {pushed[r] - spans[r]} not spans, spans {spans[r] - pushed[r]} not ranges"
print("NVTX OK:", {r: sum(c.values()) for r, c in pushed.items()})
PY
rm -f "$E2E_WORK/off.log"
PLAIT_NVTX=0 PLAIT_TEST_NVTX_LOG=$E2E_WORK/off.log train off $H run.trace=2:3
[ ! -e "$E2E_WORK/off.log" ] || fail "PLAIT_NVTX=0 opened ranges: $(head -n 3 "$E2E_WORK/off.log")"
echo "trace nvtx OK"
