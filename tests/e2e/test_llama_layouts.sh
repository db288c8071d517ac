#!/usr/bin/env bash
# The llama arch under every layout its bodies run today, in deterministic
# mode: dp, pp (1f1b, gpipe, zb1), dp x pp, ZeRO-1/3 and recomputation
# (full; selective under zb1) give the loss curve and final parameters of
# one process running the same micro-batches, bit for bit; tp and dp x tp
# within tensor parallelism's tolerance; a run resumes from another
# layout's checkpoint; sequence parallelism within 1e-6 of tp without it,
# with dp, pp, ZeRO-3 and recomputation; q, k and v biases ([model]
# qkv_bias) with heads of their own size ([model] head_dim) and q and k
# norms ([model] qk_norm) under ZeRO-3, pp and tp with sequence
# parallelism; and a tp
# that does not divide n_kv_head is refused before step 1 naming it.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
D="run.steps=6 run.deterministic=true run.ckpt_every=3 data.micro_batch=1 data.global_batch=4"
train one $D
train dp2 $D parallel.dp=2
train pp2 $D parallel.plugin=hybrid parallel.pp=2
train gpipe $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=gpipe
train zb1 $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1
train full $D model.recompute=full
train selzb1 $D model.recompute=selective parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1
train dp2pp2 $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2
train zero1 $D parallel.dp=2 optim.plugin=zero1
train zero3 $D parallel.dp=2 optim.plugin=zero3
for r in dp2 pp2 gpipe zb1 full selzb1 dp2pp2 zero1 zero3; do same_losses one "$r" 0; same_params one "$r" bits model; done
# the first run's step-3 checkpoint resumed as dp 2 x pp 2: steps 4-6 as the straight run's
rm -r "$E2E_WORK/one/ckpt-00000006"
train one $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 --resume
same_losses one dp2pp2 0
# tensor parallelism: within its tolerance (as for gpt: the all-reduces
# sum partial products in another order)
train tp2 $D parallel.plugin=hybrid parallel.tp=2
train dp2tp2 $D parallel.plugin=hybrid parallel.dp=2 parallel.tp=2
for r in tp2 dp2tp2; do same_losses one "$r" 1e-5; same_params one "$r" 1e-4; done
# sequence parallelism against tp without it (deterministic): within 1e-6
# (the norms' gradients are summed in two parts, docs/parallelism.md), with
# dp, pp (1f1b; zb1 with selective recomputation), ZeRO-3 and full
# recomputation
SP="parallel.tp.sequence_parallel=true"
train sp2 $D parallel.plugin=hybrid parallel.tp=2 $SP
train tp2pp2 $D parallel.plugin=hybrid parallel.tp=2 parallel.pp=2
train sp2pp2 $D parallel.plugin=hybrid parallel.tp=2 parallel.pp=2 $SP
train tp2zb1 $D parallel.plugin=hybrid parallel.tp=2 parallel.pp=2 parallel.pp.schedule=zb1 model.recompute=selective
train sp2zb1 $D parallel.plugin=hybrid parallel.tp=2 parallel.pp=2 parallel.pp.schedule=zb1 model.recompute=selective $SP
train tp2z3 $D parallel.plugin=hybrid parallel.dp=2 parallel.tp=2 optim.plugin=zero3 model.recompute=full
train sp2z3 $D parallel.plugin=hybrid parallel.dp=2 parallel.tp=2 optim.plugin=zero3 model.recompute=full $SP
for p in "tp2 sp2" "tp2pp2 sp2pp2" "tp2zb1 sp2zb1" "tp2z3 sp2z3"; do
  set -- $p
  same_losses "$1" "$2" 1e-6
  same_params "$1" "$2" 1e-6
done
# q, k and v biases (Qwen2's), heads of their own size (head_dim 32 where
# n_embd / n_head is 16: q_proj 128 rows for a width of 64) and q and k
# norms (Qwen3's, whose weights' gradients tp sums over its ranks' heads):
# ZeRO-3 and pp (zb1) bit-identical to one process, tp with sequence
# parallelism within tensor parallelism's tolerance
QB="model.qkv_bias=true model.head_dim=32 model.qk_norm=true"
# shellcheck disable=SC2086
train oneqb $D $QB
# shellcheck disable=SC2086
train zero3qb $D $QB parallel.dp=2 optim.plugin=zero3
# shellcheck disable=SC2086
train zb1qb $D $QB parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1
for r in zero3qb zb1qb; do same_losses oneqb "$r" 0; same_params oneqb "$r" bits model; done
# shellcheck disable=SC2086
train sp2qb $D $QB parallel.plugin=hybrid parallel.tp=2 $SP
same_losses oneqb sp2qb 1e-5
same_params oneqb sp2qb 1e-4
train_refused tp4 "[parallel] tp = 4 does not divide [model] n_kv_head = 2" $D parallel.plugin=hybrid \
  parallel.tp=4 "run.out_dir=$E2E_WORK/tp4"
echo "llama layouts OK: dp, pp (1f1b, gpipe, zb1), dp x pp, ZeRO-1/3, recompute bit-identical to one process; tp, dp x tp within 1e-5; sequence parallelism within 1e-6 of tp; resume across layouts; qkv_bias, head_dim and qk_norm under ZeRO-3, zb1 and tp with sequence parallelism"
