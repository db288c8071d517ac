#!/usr/bin/env bash
# The parallel and optimizer plugins are device-agnostic: every layout
# trains on the sim device (tensors in memory the host cannot dereference,
# so a host loop, memcpy or memset a plugin left on tensor data faults) with
# losses bit-identical to the cpu device's and byte-identical checkpoints
# (parameters and optimizer state). Layouts: dp 2 with adam and zero1/2/3,
# tp 2 (tp plugin), pp 2 (pp plugin, 1F1B), dp 2 x pp 2 with zero3 (the tied
# pair's whole gradient across stages), dp 2 x tp 2 x pp 2 with adam and
# zero1 (hybrid). Multi-rank runs stage device buffers over tcp.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
S="run.steps=3 run.eval_every=0 run.ckpt_every=0 run.progress=off"
H="parallel.plugin=hybrid data.micro_batch=1"
layouts=(
  "dp2_adam|parallel.dp=2"
  "dp2_zero1|parallel.dp=2 optim.plugin=zero1"
  "dp2_zero2|parallel.dp=2 optim.plugin=zero2 data.micro_batch=2"
  "dp2_zero3|parallel.dp=2 optim.plugin=zero3"
  "tp2|parallel.plugin=tp parallel.dp=1 parallel.tp=2"
  "pp2|parallel.plugin=pp parallel.dp=1 parallel.pp=2 data.micro_batch=2"
  "dp2pp2_zero3|$H parallel.dp=2 parallel.pp=2 optim.plugin=zero3"
  "d3_adam|$H parallel.dp=2 parallel.tp=2 parallel.pp=2"
  "d3_zero1|$H parallel.dp=2 parallel.tp=2 parallel.pp=2 optim.plugin=zero1"
)
for l in "${layouts[@]}"; do
  name=${l%%|*} args=${l#*|}
  # shellcheck disable=SC2086 # args are separate overrides
  train "$name-cpu" $S $args device.plugin=cpu
  # shellcheck disable=SC2086
  train "$name-sim" $S $args device.plugin=sim
  same_losses "$name-cpu" "$name-sim" 0
  for f in model.safetensors optim.safetensors; do
    cmp "$(last_ckpt "$name-cpu")/$f" "$(last_ckpt "$name-sim")/$f" || fail "$name: $f differs between the cpu and sim devices"
  done
  echo "$name: sim bit-identical to cpu (final loss $(column "$name-sim" loss | tail -n 1))"
done
