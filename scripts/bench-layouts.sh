#!/usr/bin/env bash
# Layout benchmarks (tensor, pipeline and 3-D parallelism) on configs/gpt-small.ini (n_layer 8,
# n_head 8, n_embd 256, block 256, batch 8), through `plait train` so that
# metrics.csv (step time, TP time, per-stage idle) and memory.csv (per-rank
# bytes and peak RSS) are both at hand:
#   tp   — 2 ranks: dp = 2 against tp = 2 (and one process for reference)
#   pp   — 4 ranks, m = 8: gpipe, 1f1b, interleaved (virtual_stages = 2), zb1;
#          BENCH_SLEEP_MS = F adds [run] debug_compute_sleep_ms = F (a forward
#          F ms of sleep, a backward 2F, each half of zb1's F) so that the
#          schedule alone sets the timing on a machine with fewer cores than ranks
#   sweep — 4 ranks, every layout (dp x tp x pp, each pipeline schedule) through
#          `plait bench sweep`, prediction beside measurement, report and plots in
#          $BENCH_OUT/sweep (the acceptance sweep of docs/benchmarks.md; about
#          3 minutes on a quiet 2-core machine). Not part of `all`.
# Usage: [BENCH_REPS=R] scripts/bench-layouts.sh [tp|pp|all|sweep] [BUILD] [STEPS]
# Figures are medians over steps 3..STEPS (the first two warm up). With
# BENCH_REPS = R > 1 the layouts run R times, round-robin, and each layout's
# figures come from its fastest run (the one least disturbed by other work
# on the machine). On a machine with fewer cores than ranks the ranks share
# cores: read step times with that in mind.
set -euo pipefail
what=${1:-all} build=${2:-build} steps=${3:-12}
plait=$build/bin/plait
cfg=configs/gpt-small.ini
out=${BENCH_OUT:-runs/bench-layouts}
mkdir -p "$out"

if [ "$what" = sweep ]; then
  # a fresh sweep each time (the CSV would otherwise resume); the load
  # before and after goes into the report's notes
  rm -rf "${out:?}/sweep"
  echo "load before: $(uptime)"
  "$plait" bench sweep "$cfg" -n 4 --axes dp,tp,pp,schedule --steps "${steps}" --warmup 2 --report "$out/sweep"
  echo "load after: $(uptime)"
  exit 0
fi

reps=${BENCH_REPS:-1}
run1() { # DIR overrides...
  local name=$1; shift
  rm -rf "${out:?}/$name"
  "$plait" train "$cfg" run.out_dir="$out/$name" run.steps="$steps" run.eval_every=0 run.ckpt_every=0 \
    run.eval_batches=1 run.progress=off "$@" >"$out/$name.out" 2>&1 || { tail -n 20 "$out/$name.out"; exit 1; }
}
# runs NAME:overrides... — every layout REPS times, round-robin; $out/NAME
# then points at each layout's fastest run
runs() {
  local spec name args r
  for r in $(seq "$reps"); do
    for spec in "$@"; do
      name=${spec%%:*} args=${spec#*:}
      # shellcheck disable=SC2086
      run1 "$name-r$r" $args
    done
  done
  for spec in "$@"; do
    name=${spec%%:*}
    best=$(for r in $(seq "$reps"); do echo "$(med "$name-r$r" step_ms) $r"; done | sort -g | head -n 1 | cut -d' ' -f2)
    ln -sfn "$name-r$best" "$out/$name"
  done
}
# med NAME COL: median of a metrics.csv column over steps 3..
med() {
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next } NR > 3 { print $c }' \
    "$out/$1/metrics.csv" | sort -g | awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "nan") }'
}
# rss NAME: peak RSS of each rank in MB, "a/b/..."
rss() { awk -F, 'NR > 1 { printf "%s%.0f", (NR > 2 ? "/" : ""), $10 / 1048576 }' "$out/$1/memory.csv"; }
# memcol NAME COL: one memory.csv column per rank in MB, "a/b/..."
memcol() {
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
    { printf "%s%.1f", (NR > 2 ? "/" : ""), $c / 1048576 }' "$out/$1/memory.csv"
}

if [ "$what" = tp ] || [ "$what" = all ]; then
  runs "one:" "dp2:parallel.dp=2 data.micro_batch=4" "tp2:parallel.tp=2"
  printf '\n%-6s %10s %9s %9s %9s %8s %12s %22s %16s\n' layout tokens/s step_ms tp_ms tp_share tp_MB dp_MB \
    "params/grads/state MB" "peak RSS MB/rank"
  for n in one dp2 tp2; do
    s=$(med $n step_ms) t=$(med $n tp_ms)
    printf '%-6s %10.0f %9.1f %9.1f %8.1f%% %8.1f %12.1f %22s %16s\n' $n "$(med $n tokens_per_s)" "$s" "$t" \
      "$(awk -v a="$t" -v b="$s" 'BEGIN { print 100 * a / b }')" "$(awk -v x="$(med $n tp_bytes)" 'BEGIN { print x / 1048576 }')" \
      "$(awk -v x="$(med $n dp_bytes)" 'BEGIN { print x / 1048576 }')" \
      "$(memcol $n param_bytes | cut -d/ -f1)/$(memcol $n grad_bytes | cut -d/ -f1)/$(memcol $n optim_state_bytes | cut -d/ -f1)" \
      "$(rss $n)"
  done
fi

if [ "$what" = pp ] || [ "$what" = all ]; then
  P="parallel.pp=4 data.micro_batch=1 run.debug_compute_sleep_ms=${BENCH_SLEEP_MS:-0}"
  runs "gpipe:$P parallel.pp.schedule=gpipe" "1f1b:$P parallel.pp.schedule=1f1b" \
    "interleaved:$P parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2" "zb1:$P parallel.pp.schedule=zb1"
  printf '\n%-12s %9s %9s %10s %10s %32s %22s %26s\n' schedule tokens/s step_ms "idle meas" formula \
    "idle ms stage 0/1/2/3" "activations MB/rank" "peak RSS MB/rank"
  for n in gpipe 1f1b interleaved zb1; do
    printf '%-12s %9.0f %9.1f %9.1f%% %9.1f%% %32s %22s %26s\n' $n "$(med $n tokens_per_s)" "$(med $n step_ms)" \
      "$(awk -v x="$(med $n bubble_measured)" 'BEGIN { print 100 * x }')" \
      "$(awk -v x="$(med $n bubble_formula)" 'BEGIN { print 100 * x }')" \
      "$(med $n idle_ms_stage0)/$(med $n idle_ms_stage1)/$(med $n idle_ms_stage2)/$(med $n idle_ms_stage3)" \
      "$(memcol $n activation_bytes)" "$(rss $n)"
  done
fi
