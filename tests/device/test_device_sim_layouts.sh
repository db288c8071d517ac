#!/usr/bin/env bash
# Every layout on the sim device (memory the host cannot dereference, staged
# by the collectives for the tcp transport) gives the cpu device's losses
# and checkpoints bit for bit: dp (deterministic, with accumulation), tp,
# pp, ZeRO-2 over dp, and ZeRO-3 in dp x tp x pp.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
S="run.steps=12 run.ckpt_every=12"
pair() { # pair NAME ARGS...: the same run on cpu and on sim, compared bit for bit
  local name=$1; shift
  train "${name}_cpu" $S device.plugin=cpu "$@"
  train "${name}_sim" $S device.plugin=sim "$@"
  same_losses "${name}_cpu" "${name}_sim" 0
  same_params "${name}_cpu" "${name}_sim" bits
}
pair dp2 parallel.dp=2 run.deterministic=true
pair tp2 parallel.plugin=tp parallel.tp=2
pair pp2 parallel.plugin=pp parallel.pp=2
pair zero2 parallel.dp=2 optim.plugin=zero2 run.deterministic=true
pair d3_zero3 parallel.plugin=hybrid parallel.dp=2 parallel.tp=2 parallel.pp=2 data.micro_batch=1 optim.plugin=zero3
echo "sim device: dp, tp, pp, zero2 and 3-D zero3 bit-identical to the cpu device"
