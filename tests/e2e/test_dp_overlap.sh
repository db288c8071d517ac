#!/usr/bin/env bash
# Overlap is real, and measured honestly (metrics.csv early_buckets counts the
# buckets whose all-reduce started while some backward was still to run):
# - small buckets: the upper layers' buckets start during the backward, every step;
# - the default bucket size holds the tiny model in one bucket, which can only
#   start once the last layer's backward is done: nothing overlaps, 0;
# - overlap switched off: 0;
# - ZeRO-1 under a pipeline: a reduce-scatter starts before the backward ends;
# - ZeRO-1's overlap_param_gather: the weights' all-gathers start in the
#   next step's forward, and change no bit.
source "$(dirname "$0")/lib.sh"
each_step() { # NAME AWK-CONDITION MESSAGE: the condition holds for every step
  column "$1" early_buckets | awk "$2 { ok++ } END { exit !(ok == NR && NR > 0) }" || fail "$3: $(column "$1" early_buckets | tr '\n' ' ')"
}
train overlap run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K
each_step overlap '$1 >= 1' "a step had no bucket started before the backward pass ended"
train one_bucket run.steps=5 parallel.dp=2
each_step one_bucket '$1 == 0' "a single bucket, started after the whole backward, was counted as overlapped"
train serial run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K parallel.dp.overlap=false
each_step serial '$1 == 0' "overlap=false still overlapped"
same_losses overlap serial 1e-6
same_losses overlap one_bucket 1e-6
# ZeRO-1 under a pipeline starts a unit's reduce-scatter at its layers'
# last backward, as without one: on every rank one begins before the rank's
# last backward span of the step ends (the order of the trace's spans)
train zero1_pp run.steps=2 run.trace=2 parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 optim.plugin=zero1 \
  optim.zero1.bucket_size=4K data.micro_batch=1
python3 - "$E2E_WORK/zero1_pp/trace.json" <<'PY' || fail "ZeRO-1 under pp 2 started no reduce-scatter during the backward"
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in ev if e.get("ph") == "X"]
ranks = sorted({e["pid"] for e in spans})
bad = []
for r in ranks:
    end = max(e["ts"] + e["dur"] for e in spans if e["pid"] == r and e["name"] == "backward")
    starts = [e["ts"] - end for e in spans if e["pid"] == r and e["name"].startswith("reduce_scatter zero")]
    if not starts or min(starts) >= 0:
        bad.append(f"rank pid {r}: reduce-scatters start {starts} us after the last backward")
print("\n".join(bad))
sys.exit(1 if bad or len(ranks) != 4 else 0)
PY
# ZeRO-1's overlap_param_gather: the updated weights' all-gathers leave
# step() travelling and each layer's forward waits for its own, so on every
# rank all-gathers start inside the forward hooks (none without it), and the
# losses are the waiting run's, bit for bit
for ag in true false; do
  train "zero1_ag_$ag" run.steps=3 run.trace=3 parallel.dp=2 optim.plugin=zero1 optim.zero1.bucket_size=4K \
    optim.zero1.overlap_param_gather=$ag
done
same_losses zero1_ag_true zero1_ag_false 0
for ag in true false; do
  python3 - "$E2E_WORK/zero1_ag_$ag/trace.json" "$ag" <<'PY' || fail "overlap_param_gather=$ag: the all-gathers started where they should not"
import json, sys
spans = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
overlap = sys.argv[2] == "true"
ranks = sorted({e["pid"] for e in spans})
bad = []
for r in ranks:
    hooks = [(e["ts"], e["ts"] + e["dur"]) for e in spans if e["pid"] == r and e["name"] == "before_forward"]
    ag = [e["ts"] for e in spans if e["pid"] == r and e["name"].startswith("allgather zero")]
    inside = sum(any(a <= t <= b for a, b in hooks) for t in ag)
    if not ag or (inside == 0) == overlap:
        bad.append(f"rank pid {r}: {inside} of {len(ag)} all-gathers started inside a forward hook")
print("\n".join(bad))
sys.exit(1 if bad or len(ranks) != 2 else 0)
PY
done
echo "overlap OK: $(column overlap early_buckets | sed -n 1p) buckets started early per step"
