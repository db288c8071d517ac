#!/usr/bin/env bash
# The sim device stands in for a GPU: tensors in memory the host cannot
# dereference (any host load or store of it faults), kernels and copies
# through the device's table. 12 steps of gpt-tiny on it (every kernel of a
# step and of the optimizer, two evaluations, the optimizer's moments
# carried from step to step: what more steps would repeat) give losses
# bit-identical to the cpu device's and byte-identical checkpoints; the
# evaluation runs on it too, and `plait sample` reads its checkpoint on it.
# Deterministic mode's accumulation over micro-batches (the summation tree
# on device memory) matches too.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
S="run.steps=12 run.eval_every=6 run.ckpt_every=12 run.progress=off"
train cpu $S device.plugin=cpu &
train sim $S device.plugin=sim &
joined
same_losses cpu sim 0
paste -d' ' <(column cpu val_loss) <(column sim val_loss) | awk '$1 != $2 { bad = 1 } END { exit bad }' ||
  fail "validation losses differ between cpu and sim"
[ "$(column sim val_loss | grep -c .)" -ge 2 ] || fail "the sim run did not evaluate"
for f in model.safetensors optim.safetensors; do
  cmp "$(last_ckpt cpu)/$f" "$(last_ckpt sim)/$f" || fail "$f differs between the cpu and sim devices"
done
for dev in cpu sim; do
  PLAIT_DEVICE_PLUGIN=$dev "$PLAIT_BIN" sample "$(last_ckpt cpu)" --prompt "The " --tokens 40 --seed 3 \
    >"$E2E_WORK/sample-$dev.txt" 2>"$E2E_WORK/sample-$dev.err" || fail "plait sample on $dev: $(cat "$E2E_WORK/sample-$dev.err")"
done
cmp "$E2E_WORK/sample-cpu.txt" "$E2E_WORK/sample-sim.txt" || fail "plait sample differs between cpu and sim"
D="run.steps=6 run.eval_every=0 run.ckpt_every=6 run.progress=off run.deterministic=true data.micro_batch=2"
train det_cpu $D device.plugin=cpu &
train det_sim $D device.plugin=sim &
joined
same_losses det_cpu det_sim 0
same_params det_cpu det_sim bits
echo "sim device: 50 steps bit-identical to cpu (final loss $(column sim loss | tail -n 1)), checkpoints identical, sampling identical"
