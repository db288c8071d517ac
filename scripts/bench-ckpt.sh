#!/usr/bin/env bash
# What a checkpoint costs a run, gathered against sharded, with and without
# [run] ckpt_async (docs/checkpoints.md, "Measured"). A benchmark, not a
# test: it prints a table to quote.
#
#   scripts/bench-ckpt.sh [N_LAYER] [N_EMBD] [VOCAB]
#     A GPT (default 8 layers, n_embd 768, 50304 tokens: 96 M parameters,
#     a 1.16 GB checkpoint with Adam's moments) at dp 4 with ZeRO-3 on this
#     host, one run per format (gathered; sharded; sharded with ckpt_async)
#     of 4 steps saving at steps 2 and 4, then a resume of each for one step.
#     Per format:
#       save      the checkpoint span of step 2 on rank 0 (run.trace): the
#                 time the save held training (ckpt_async: the snapshot)
#       lost      the training time the save at step 2 cost: metrics.csv's
#                 time_s from step 2 to 3 less that from step 1 to 2 (the
#                 background write's competition for the cores included)
#       load      the resume's start-up less the first run's: the wall time
#                 of each less its steps (time_s) and its last save's span
#       peak      rank 0's resident-set peak in the rows before and after the
#                 save at step 2 (metrics.csv peak_rss_mb), and the run's
#     The machine's load average is printed beside it: on a busy machine
#     every figure is noisy.
#
# Environment: PLAIT_BIN (build/bin/plait), BENCH_OUT (runs/bench-ckpt),
# BENCH_ARGS (more key=value overrides for every run, after the defaults:
# model.n_head=16 there wins), BENCH_FORMATS (the formats measured, of
# "gathered sharded async", in that order by default), BENCH_DROP_CKPT=1
# (each format's checkpoints removed once measured: a 1B-parameter model's
# two formats' would fill a small disk).
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIT_BIN=${PLAIT_BIN:-build/bin/plait}
OUT=${BENCH_OUT:-runs/bench-ckpt}
L=${1:-8} E=${2:-768} V=${3:-50304}
mkdir -p "$OUT"
# shellcheck disable=SC2206
A=(tests/e2e/tiny.ini model.n_layer="$L" model.n_embd="$E" model.n_head=12 model.vocab_size="$V"
  model.block_size=32 data.global_batch=4 data.micro_batch=1 parallel.plugin=hybrid parallel.dp=4
  optim.plugin=zero3 run.steps=4 run.ckpt_every=2 run.keep_checkpoints=2 comm.timeout=600 ${BENCH_ARGS:-})

wall() { # NAME ARGS...: run plait train, print its wall seconds
  local name=$1 t0 t1; shift
  t0=$(date +%s.%N)
  "$PLAIT_BIN" train "${A[@]}" run.out_dir="$OUT/$name" "$@" >"$OUT/$name.out" 2>&1 ||
    { tail -n 20 "$OUT/$name.out" >&2; echo "bench-ckpt: run $name failed" >&2; exit 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
rows=()
for f in ${BENCH_FORMATS:-gathered sharded async}; do
  case $f in
    gathered) K=(run.ckpt_format=gathered) ;;
    sharded) K=(run.ckpt_format=sharded) ;;
    async) K=(run.ckpt_format=sharded run.ckpt_async=true) ;;
    *) echo "bench-ckpt: BENCH_FORMATS names '$f'; allowed: gathered sharded async" >&2; exit 1 ;;
  esac
  rm -rf "${OUT:?}/$f"
  w1=$(wall "$f" "${K[@]}" run.trace=2:4)
  cp "$OUT/$f/trace.json" "$OUT/$f.trace.json"
  cp "$OUT/$f/memory.csv" "$OUT/$f.memory.csv"
  w2=$(wall "$f" "${K[@]}" run.steps=5 run.trace=5 --resume)
  rows+=("$f $w1 $w2 $(cut -d' ' -f1 /proc/loadavg)")
  [ "${BENCH_DROP_CKPT:-0}" = 1 ] && find "$OUT/$f" -mindepth 1 -maxdepth 1 -type d -name 'ckpt-*' -exec rm -rf {} +
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$OUT" "${rows[@]}" <<'PY'
import csv, json, sys
out = sys.argv[1]
def spans(path):
    d = json.load(open(path))
    ev = d["traceEvents"] if isinstance(d, dict) else d
    ck = [e for e in ev if e.get("name") == "checkpoint" and e.get("pid") == 1]
    return [e["dur"] / 1e6 for e in sorted(ck, key=lambda e: e["ts"])]
print("| ckpt_format | save (rank 0's span) | lost to the save | load | rank 0 peak RSS before / after the save / run | load avg |")
print("|---|---|---|---|---|---|")
for row in sys.argv[2:]:
    f, w1, w2, load = row.split()
    m = list(csv.DictReader(open(f"{out}/{f}/metrics.csv")))
    first = [r for r in m if int(r["step"]) <= 4][-4:]
    t = {int(r["step"]): float(r["time_s"]) for r in first}
    peak = {int(r["step"]): float(r["peak_rss_mb"]) for r in first}
    resumed = [r for r in m if int(r["step"]) == 5][-1]
    s1, s2 = spans(f"{out}/{f}.trace.json"), spans(f"{out}/{f}/trace.json")
    lost = (t[3] - t[2]) - (t[2] - t[1])
    load_s = (float(w2) - float(resumed["time_s"]) - s2[-1]) - (float(w1) - t[4] - s1[-1])
    mem = list(csv.DictReader(open(f"{out}/{f}.memory.csv")))
    run_peak = float(mem[0]["peak_rss_bytes"]) / 1e6  # the first run's (copied before the resume)
    name = {"async": "sharded, ckpt_async"}.get(f, f)
    print(f"| {name} | {s1[0]:.2f} s | {lost:.2f} s | {load_s:.2f} s | {peak[2]:.0f} / {peak[3]:.0f} / {run_peak:.0f} MB | {load} |")
PY
