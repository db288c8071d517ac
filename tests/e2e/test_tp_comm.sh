#!/usr/bin/env bash
# TP accounting (issue 7): the bytes each rank all-reduces for TP per step
# (metrics.csv tp_bytes, the TP plugin's payload count) equal Megatron's
# count exactly — per micro-batch, each of the L blocks all-reduces b*s*h
# floats twice in forward and twice in backward; the vocab-parallel
# embedding once in forward and the head's input gradient once in backward
# (b*s*h each); the vocab-parallel cross-entropy three times b*s (max, sum of
# exponentials, target logit) — and the parameter bytes of every rank
# (memory.csv, and the start-up table) equal the Megatron split of the
# model, the vocabulary padded to a multiple of tp. tp_ms (time blocked in
# TP all-reduces) is reported every step. With dp 2 x tp 2 the DP traffic is
# exactly one all-reduce of the rank's TP slice over its DP group.
source "$(dirname "$0")/lib.sh"
L=2 H=64 S=32 V=257 N=8            # tiny.ini's n_layer, n_embd, block_size; vocab; global batch
# expected tp_bytes per step: m local micro-batches of b sequences
tp_bytes() { local b=$1 m=$2; echo $(( m * 4 * ((4 * L + 2) * b * S * H + 3 * b * S) )); }
# expected parameter bytes per rank at tensor-parallel size tp (lm_head is
# tied to wte and holds no storage of its own)
param_bytes() {
  local tp=$1 vp=$(( (V + $1 - 1) / $1 * $1 ))
  local block=$(( 4 * H + (3 * H * H + 3 * H) / tp + H * H / tp + H + (4 * H * H + 4 * H) / tp + 4 * H * H / tp + H ))
  echo $(( 4 * (vp / tp * H + S * H + L * block + 2 * H) ))
}
check() { # NAME b m tp
  local name=$1 want got r
  want=$(tp_bytes "$2" "$3")
  for got in $(column "$name" tp_bytes); do
    [ "$got" = "$want" ] || fail "$name: tp_bytes $got per step, Megatron's count is $want"
  done
  want=$(param_bytes "$4")
  for r in $(awk -F, 'NR > 1 { print $1 }' "$E2E_WORK/$name/memory.csv"); do
    got=$(mem "$name" "$r" param_bytes)
    [ "$got" = "$want" ] || fail "$name: rank $r holds $got parameter bytes, the TP split gives $want"
  done
  column "$name" tp_ms | awk '!($1 > 0) { bad = 1 } END { exit bad }' || fail "$name: tp_ms not reported"
  grep -q "memory per rank (MB)" "$E2E_WORK/$name.out" || fail "$name: no per-rank memory table"
}
T="run.steps=5 model.vocab_size=$V parallel.plugin=hybrid"
train tp2 $T parallel.tp=2 data.micro_batch=2;                check tp2 2 4 2
train tp4 $T parallel.tp=4 data.micro_batch=4;                check tp4 4 2 4
train dp2tp2 $T parallel.dp=2 parallel.tp=2 data.micro_batch=1; check dp2tp2 1 4 2
# with dp 2 x tp 2 the DP axis all-reduces each rank's TP slice of the
# gradients (the tied head copy's slice included) over its 2-rank DP group
# only: 2(N-1)/N x S = S bytes (over the world, or of the whole model, it
# would differ)
vp2=$(( (V + 1) / 2 * 2 ))
want=$(( $(param_bytes 2) + 4 * vp2 / 2 * H ))
for got in $(column dp2tp2 dp_bytes); do
  [ "$got" = "$want" ] || fail "dp2tp2: dp_bytes $got, the TP slice's gradients are $want B"
done
train one $T
[ "$(column one tp_bytes | sort -u)" = 0 ] || fail "one process reported TP traffic"
[ "$(mem one 0 param_bytes)" = "$(param_bytes 1)" ] || fail "one process: $(mem one 0 param_bytes) parameter bytes"
echo "tp communication OK: tp2 $(tp_bytes 2 4) B/step, tp4 $(tp_bytes 4 2) B/step, params/rank at tp2 $(param_bytes 2) B"
