#!/usr/bin/env bash
# Gradient compression ([parallel.dp] and [optim.zeroN] grad_compression,
# [optim.zero3] param_gather) through `plait train` on 2 ranks, 12 steps:
#   dp_bytes (optim_bytes under ZeRO) shrink by each scheme's ratio: bf16
#     half, int8 about a quarter, onebit about 1/21 of float32's;
#   deterministic mode: a compressed run repeats bit for bit (every scheme);
#     bf16 gives dp 2 the same bits as dp 2 x pp 2 (1f1b and zb1: the
#     pipeline changes the buckets, bf16 is per element), and zero1, zero2
#     and zero3 the same bits as each other (the same reduce-scatters),
#     also with bf16 parameter gathers ([optim.zeroN] param_gather), which
#     send fewer bytes and whose checkpoints keep the float32 slices, from
#     which a resumed run continues bit for bit;
#   the training still learns: each scheme's loss after 12 steps within 5%
#     of float32's (the long comparison is scripts/bench-compression.sh);
#   [parallel.dp] grad_compression under a ZeRO optimizer is refused,
#     naming the key to use.
source "$(dirname "$0")/lib.sh"
S="run.steps=12 parallel.plugin=hybrid parallel.dp=2"
D="$S run.deterministic=true data.micro_batch=2"
for z in none bf16 int8 onebit; do train "dp_$z" $S parallel.dp.grad_compression=$z; done
total() { column "$1" "$2" | awk '{ s += $1 } END { print s }'; }
ref=$(total dp_none dp_bytes)
for z in bf16:0.49:0.51 int8:0.25:0.27 onebit:0.045:0.050; do
  IFS=: read -r name lo hi <<<"$z"
  got=$(total "dp_$name" dp_bytes)
  awk -v g="$got" -v r="$ref" -v lo="$lo" -v hi="$hi" 'BEGIN { x = g / r; exit !(x >= lo && x <= hi) }' ||
    fail "$name: dp_bytes $got against float32's $ref (want a ratio in [$lo, $hi])"
  awk -v a="$(column "dp_$name" loss | tail -n 1)" -v b="$(column dp_none loss | tail -n 1)" \
    'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * b) }' ||
    fail "$name: final loss $(column "dp_$name" loss | tail -n 1), float32 $(column dp_none loss | tail -n 1)"
  echo "$name: dp_bytes $got of $ref, final loss $(column "dp_$name" loss | tail -n 1) (float32 $(column dp_none loss | tail -n 1))"
done

# deterministic: repeatable, and the same bits across layouts where the scheme allows
for z in int8 onebit; do
  train "det_$z" $D parallel.dp.grad_compression=$z
  train "det_${z}_again" $D parallel.dp.grad_compression=$z
  same_params "det_$z" "det_${z}_again" bits
done
train det_bf16 $D parallel.dp.grad_compression=bf16
for s in 1f1b zb1; do
  train "det_bf16_pp2_$s" $D parallel.dp.grad_compression=bf16 parallel.pp=2 parallel.pp.schedule=$s
  same_losses det_bf16 "det_bf16_pp2_$s" 0; same_params det_bf16 "det_bf16_pp2_$s" bits
done
for o in zero1 zero2 zero3; do
  train "det_$o" $D optim.plugin=$o optim.$o.grad_compression=bf16 optim.zero3.param_gather=fp32
done
same_params det_zero1 det_zero2 bits; same_params det_zero1 det_zero3 bits
ref=$(total det_zero1 optim_bytes)
train det_zero2_none $D optim.plugin=zero2
awk -v g="$ref" -v r="$(total det_zero2_none optim_bytes)" 'BEGIN { exit !(g < 0.8 * r) }' ||
  fail "zero1 with bf16 gradients sent $ref optim bytes, zero2 without $(total det_zero2_none optim_bytes)"
# ZeRO-3's bf16 parameter gather: fewer bytes again, and it trains
train z3_gather $S optim.plugin=zero3 optim.zero3.grad_compression=bf16 optim.zero3.param_gather=bf16
awk -v g="$(total z3_gather optim_bytes)" -v r="$(total det_zero3 optim_bytes)" 'BEGIN { exit !(g < 0.8 * r) }' ||
  fail "zero3 with bf16 gathers sent $(total z3_gather optim_bytes) optim bytes, with float32 gathers $(total det_zero3 optim_bytes)"
# bf16 parameter gathers under every stage: the layers compute with the
# same rounded parameters from the first step on, and the float32 slices
# take the update and go into the checkpoint (zero3's shards always do),
# so zero1, zero2 and zero3 give the same bits; stages 1/2 send fewer
# bytes than with float32 gathers
for o in zero1 zero2 zero3; do
  train "det_${o}_pg" $D optim.plugin=$o optim.$o.grad_compression=bf16 optim.$o.param_gather=bf16
done
same_params det_zero1_pg det_zero2_pg bits; same_params det_zero1_pg det_zero3_pg bits
awk -v g="$(total det_zero2_pg optim_bytes)" -v r="$(total det_zero2 optim_bytes)" 'BEGIN { exit !(g < 0.8 * r) }' ||
  fail "zero2 with bf16 gathers sent $(total det_zero2_pg optim_bytes) optim bytes, with float32 gathers $(total det_zero2 optim_bytes)"
# a resumed run computes with what the uninterrupted one had: the gathered rounding
train z2_pg_straight $D optim.plugin=zero2 optim.zero2.param_gather=bf16 run.ckpt_every=6
train z2_pg_split $D optim.plugin=zero2 optim.zero2.param_gather=bf16 run.ckpt_every=6 run.steps=6
train z2_pg_split $D optim.plugin=zero2 optim.zero2.param_gather=bf16 run.ckpt_every=6 --resume
same_losses z2_pg_straight z2_pg_split 0; same_params z2_pg_straight z2_pg_split bits

# the DP plugin's key under an optimizer that reduces: refused, naming the right key
if "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/bad" $S optim.plugin=zero2 parallel.dp.grad_compression=bf16 \
  >"$E2E_WORK/bad.out" 2>&1; then fail "grad_compression on dp under zero2 was accepted"; fi
grep -q "grad_compression = bf16 does nothing here.*\[optim.zero2\] grad_compression" "$E2E_WORK/bad.out" ||
  fail "no clear error: $(tail -n 3 "$E2E_WORK/bad.out")"
# the planner weighs each optimizer of one layout by its own rule: with the
# DP plugin's key plain DP stays, and the ZeRO stages are set aside (a plan
# the search keeps for one optimizer is not another's verdict)
"$PLAIT_BIN" plan "$CFG" --ranks 2 --axes optim --top all parallel.dp=2 parallel.dp.grad_compression=int8 \
  >"$E2E_WORK/plan.out" 2>&1 || fail "plan with dp compression: $(tail -n 5 "$E2E_WORK/plan.out")"
grep -Eq '^ +1 +dp2 tp1 pp1 .* adam ' "$E2E_WORK/plan.out" || fail "plan did not keep adam: $(cat "$E2E_WORK/plan.out")"
grep -Eq '^ +[0-9]+ +dp2 .* zero[123] .* yes$' "$E2E_WORK/plan.out" &&
  fail "plan kept a ZeRO stage beside dp compression: $(cat "$E2E_WORK/plan.out")"
# --explain refuses it in the dp plugin's own words, the plugin told at
# create that zero1 reduces the gradients
if "$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp2 tp1 pp1 mb4 zero1 none" parallel.dp=2 \
  parallel.dp.grad_compression=int8 >"$E2E_WORK/explain.out" 2>&1; then
  fail "--explain accepted zero1 beside dp compression: $(cat "$E2E_WORK/explain.out")"
fi
grep -qF -- "[parallel.dp] grad_compression = int8 does nothing here: the optimizer (zero1) reduces the gradients itself" \
  "$E2E_WORK/explain.out" || fail "--explain does not say why zero1 is set aside: $(cat "$E2E_WORK/explain.out")"
echo "grad compression OK"
