#!/usr/bin/env bash
# How well `plait plan` predicts this machine: `plait bench sweep` of three
# variants of configs/gpt-small.ini chosen so that their layouts really differ
# here (on gpt-small itself they lie within the run-to-run noise), each layout
# run --repeat times, and per variant the model's agreement with the
# measurement against the goals of docs/plan.md ("How well it predicts this
# machine"):
#   dpcomm — a small batch (4 sequences of 16 tokens) on 4 blocks of width 256:
#            the data-parallel gradient all-reduce dominates a step, so dp
#            loses to tp and pp;
#   wide   — width 512, 2 blocks, 8 sequences of 32 tokens: large weights
#            against few tokens, tp's activation all-reduces against dp's
#            weight all-reduce;
#   deep   — 16 blocks of width 128, 8 sequences of 64 tokens, micro-batches
#            varied: the pipeline's bubble and the micro-batch count show;
#   two    — 2 ranks (a core each, no oversubscription), 4 blocks of width
#            256, 4 sequences of 32 tokens, every optimizer and micro-batch:
#            ZeRO's collectives, the micro-batch's rows and a 2-stage bubble.
# Usage: [BENCH_REPEAT=R] [BENCH_STEPS=S] [BENCH_CASES="dpcomm wide deep two"]
#        [BENCH_OUT=DIR] scripts/bench-plan-accuracy.sh [BUILD]
# Run it on a quiet machine (nothing else running): the measurement is the
# point. About 7 minutes with the defaults (R = 5, S = 12) on a 2-core machine:
# 4 ranks on 2 cores measure each layout within about 10%, so fewer runs or
# steps let the noise reorder the layouts that lie close together.
# Each variant's sweep, its CSV and its plots are in $BENCH_OUT/<variant>; the
# same command again continues an interrupted sweep (delete the directory for
# a fresh one).
set -euo pipefail
build=${1:-build}
plait=$build/bin/plait
cfg=configs/gpt-small.ini
out=${BENCH_OUT:-runs/bench-plan-accuracy}
repeat=${BENCH_REPEAT:-5}
steps=${BENCH_STEPS:-12}
cases=${BENCH_CASES:-dpcomm wide deep two}

# case NAME: its ranks, axes and overrides of configs/gpt-small.ini
case_args() {
  local common="run.eval_every=0 run.ckpt_every=0"
  case $1 in
    dpcomm) echo "-n 4 --axes dp,tp,pp,schedule $common model.n_layer=4 model.n_embd=256 model.block_size=16 data.global_batch=4" ;;
    wide) echo "-n 4 --axes dp,tp,pp,schedule $common model.n_layer=2 model.n_embd=512 model.block_size=32 data.global_batch=8" ;;
    deep) echo "-n 4 --axes dp,tp,pp,schedule,micro_batch --micro_batch 1,2 $common model.n_layer=16 model.n_embd=128 model.block_size=64 data.global_batch=8" ;;
    two) echo "-n 2 --axes dp,tp,pp,schedule,optim,micro_batch $common model.n_layer=4 model.n_embd=256 model.block_size=32 data.global_batch=4" ;;
    *) echo "bench-plan-accuracy: unknown case '$1' (dpcomm, wide, deep, two)" >&2; return 1 ;;
  esac
}

[ -x "$plait" ] || { echo "bench-plan-accuracy: $plait not built" >&2; exit 1; }
mkdir -p "$out"
echo "load before: $(uptime)"
summary=""
for c in $cases; do
  args=$(case_args "$c")
  mkdir -p "$out/$c"
  echo "== $c: plait bench sweep $cfg $args --repeat $repeat --steps $steps"
  # shellcheck disable=SC2086
  "$plait" bench sweep "$cfg" $args --repeat "$repeat" --steps "$steps" --warmup 2 \
    --csv "$out/$c/sweep.csv" >"$out/$c/table.txt" 2>"$out/$c/progress.txt" || {
    tail -n 20 "$out/$c/progress.txt" "$out/$c/table.txt"
    exit 1
  }
  cat "$out/$c/table.txt"
  # the sweep's own verdict lines, read back into the goals
  t=$out/$c/table.txt
  layouts=$(awk '/^  [0-9]+ /' "$t" | wc -l)
  span=$(sed -n 's/^# measured throughputs span \([0-9.]*\)x.*/\1/p' "$t")
  choice=$(sed -n 's/^# the model.s first choice, \(.*\), measured .* tokens\/s: \([0-9.]*\)% below.*/\1|\2/p' "$t")
  fit=$(sed -n 's/^# model vs measurement over .*Spearman rho of tokens\/s \([-0-9.]*\); largest step-time error \([-+0-9.]*\)%; largest peak-memory error \([-+0-9.]*\)%.*/\1 \2 \3/p' "$t")
  read -r rho terr merr <<<"${fit:-nan nan nan}"
  below=${choice#*|}
  ok() { awk -v v="$1" -v op="$2" -v g="$3" 'BEGIN { if (v == "" || v == "nan") exit 1;
    v = v < 0 ? -v : v; exit !(op == ">=" ? v >= g : v <= g) }' && echo met || echo MISSED; }
  summary+=$(printf '\n%-7s %2d layouts, span %sx (goal >= 8 layouts over >= 1.5x: %s)' "$c" "$layouts" "${span:-?}" \
    "$([ "$layouts" -ge 8 ] && ok "${span:-}" ">=" 1.5)")
  summary+=$(printf '\n        first choice %s: %s%% below the measured best (goal <= 5%%: %s)' "${choice%|*}" "${below:-?}" "$(ok "${below:-}" "<=" 5)")
  summary+=$(printf '\n        Spearman %s (goal >= 0.8: %s); worst step time %s%% (goal within 25%%: %s); worst memory %s%% (goal within 10%%: %s)' \
    "$rho" "$(ok "$rho" ">=" 0.8)" "$terr" "$(ok "$terr" "<=" 25)" "$merr" "$(ok "$merr" "<=" 10)")
done
echo "load after: $(uptime)"
echo
echo "== the planner against this machine ($repeat runs a layout, $steps timed steps)$summary"
