#!/usr/bin/env bash
# The memory report at start-up (ZeRO issue: "at start and in metrics.csv,
# bytes per rank held for parameters, gradients and optimizer state, and the
# peak RSS"): with ZeRO-2 on dp = 2, rank 0 prints one row per rank whose
# parameter, gradient and optimizer-state MB are memory.csv's bytes (written
# at the end: they do not change while training), and each rank's peak RSS so
# far, at most its peak at the end; rank 0's summary line has its RSS too.
source "$(dirname "$0")/lib.sh"
train zero2 run.steps=3 parallel.dp=2 optim.plugin=zero2 model.n_embd=128
out=$E2E_WORK/zero2.out
grep -Eq "^plait: memory on rank 0: .*; peak RSS so far [0-9]+\.[0-9] MB$" "$out" ||
  fail "the summary line has no peak RSS: $(grep 'memory on rank 0' "$out")"
grep -q "^plait: memory per rank (MB):  rank  dp tp pp  parameters  gradients  optimizer  buffers  peak RSS$" "$out" ||
  fail "no per-rank memory table with a peak RSS column: $(grep -A3 'memory per rank' "$out")"
for r in 0 1; do
  row=$(grep -A2 "memory per rank" "$out" | awk -v r="$r" '$1 == "plait:" && $2 == r && NF == 10')
  [ -n "$row" ] || fail "no start-up row for rank $r"
  read -r _ rank dp tp pp param grad state buffers rss <<<"$row"
  [ "$dp $tp $pp" = "$r 0 0" ] || fail "rank $r: mesh coordinates $dp $tp $pp"
  for what in param grad state; do
    printed=${!what}
    case $what in param) col=param_bytes ;; grad) col=grad_bytes ;; state) col=optim_state_bytes ;; esac
    want=$(awk -v b="$(mem zero2 "$r" "$col")" 'BEGIN { printf "%.2f", b / 1048576 }')
    [ "$printed" = "$want" ] || fail "rank $r: start-up $what $printed MB, memory.csv $col = $want MB"
  done
  end_rss=$(mem zero2 "$r" peak_rss_bytes)
  awk -v s="$rss" -v e="$end_rss" 'BEGIN { exit !(s > 0 && s <= e / 1048576 + 0.05) }' ||
    fail "rank $r: start-up peak RSS $rss MB against $end_rss bytes at the end"
done
# ZeRO-2 shards gradients and state over the 2 ranks but not parameters
[ "$(mem zero2 0 grad_bytes)" -lt "$(mem zero2 0 param_bytes)" ] || fail "ZeRO-2 gradients are not sharded"
echo "memory report OK"
