#!/usr/bin/env bash
# The llama arch under every layout its bodies run today, in deterministic
# mode: dp, pp (1f1b, gpipe and interleaved), dp x pp and ZeRO-1/3 give the
# loss curve and final parameters of one process running the same
# micro-batches, bit for bit; a run resumes from another layout's
# checkpoint; and what it does not run yet (tp, zb1) is refused before
# step 1 naming the reason.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
D="run.steps=6 run.deterministic=true run.ckpt_every=3 data.micro_batch=1 data.global_batch=4"
train one $D
train dp2 $D parallel.dp=2
train pp2 $D parallel.plugin=hybrid parallel.pp=2
train gpipe $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=gpipe
train dp2pp2 $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2
train zero1 $D parallel.dp=2 optim.plugin=zero1
train zero3 $D parallel.dp=2 optim.plugin=zero3
for r in dp2 pp2 gpipe dp2pp2 zero1 zero3; do same_losses one "$r" 0; same_params one "$r" bits model; done
# the first run's step-3 checkpoint resumed as dp 2 x pp 2: steps 4-6 as the straight run's
rm -r "$E2E_WORK/one/ckpt-00000006"
train one $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 --resume
same_losses one dp2pp2 0
train_refused tp "arch llama: tensor parallelism" $D parallel.plugin=hybrid parallel.tp=2 "run.out_dir=$E2E_WORK/tp"
train_refused zb1 "arch llama: a split backward" $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1 \
  "run.out_dir=$E2E_WORK/zb1"
echo "llama layouts OK: dp, pp (1f1b, gpipe), dp x pp, ZeRO-1/3 bit-identical to one process; resume across layouts"
