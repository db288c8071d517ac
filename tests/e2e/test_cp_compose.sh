#!/usr/bin/env bash
# Context parallelism ([parallel] cp = 2) composed with what
# test_context_parallel.sh leaves out, on a 4-block tiny GPT (and Llama) in
# float32, 4 steps (Adam's eps 1e-4, below): each run's losses and final parameters follow cp 1's
# within 1e-5 (relative; parameters 1e-5 of each tensor's largest value):
# - ZeRO-2 over the dp x cp group (dp 2 x cp 2), and in deterministic mode
#   its losses and final parameters are those of dp 2 x cp 2 with adam, bit
#   for bit (ZeRO gives its layout's bits);
# - the interleaved pipeline schedule (pp 2, 2 virtual stages) x cp 2;
# - selective recomputation x cp 2 (GPT), and under the zb1 schedule x pp 2
#   (Llama: grouped-query attention, rotary positions).
source "$(dirname "$0")/lib.sh"
LLAMA=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
# optim.eps = 1e-4: Adam's first steps move a weight whose gradient is near
# zero by lr·g/(|g| + eps), about lr whatever g's rounding; at the default
# 1e-8 such elements leave dp 2 x cp 2 with adam 3e-4 from cp 1 in their
# tensor after 4 steps, while the losses agree within 1e-5
A="run.steps=4 run.ckpt_every=4 optim.lr_decay_steps=4 model.n_layer=4 optim.eps=1e-4"
train one $A
train zero2 $A parallel.dp=2 parallel.cp=2 optim.plugin=zero2
train inter $A parallel.plugin=hybrid parallel.pp=2 parallel.cp=2 parallel.pp.schedule=interleaved \
  parallel.pp.virtual_stages=2
train sel $A parallel.cp=2 model.recompute=selective
CFG=$LLAMA train llama_one $A
CFG=$LLAMA train llama_selzb1 $A parallel.plugin=hybrid parallel.pp=2 parallel.cp=2 parallel.pp.schedule=zb1 \
  model.recompute=selective
for r in zero2 inter sel; do
  same_losses one $r 1e-5
  same_params one $r 1e-5
done
same_losses llama_one llama_selzb1 1e-5
same_params llama_one llama_selzb1 1e-5

train det_adam $A parallel.dp=2 parallel.cp=2 run.deterministic=true
train det_zero2 $A parallel.dp=2 parallel.cp=2 optim.plugin=zero2 run.deterministic=true
same_losses det_adam det_zero2 0
same_params det_adam det_zero2 0
echo "cp 2 composes: ZeRO-2 (bit-identical to adam in deterministic mode), interleaved, selective recomputation (gpt; llama under zb1), within 1e-5 of cp 1"
