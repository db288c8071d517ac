#!/usr/bin/env bash
# Expert parallelism ([parallel] ep) on the cuda device: the experts' rows
# traded between the ep ranks from the device's memory (over tcp, staged
# through host memory by the comm layer), the row counts by all-to-all.
#   test_moe_ep_device.sh emu   on cuda_emu, the cuda plugin's own source on
#     the CPU emulator (tests/cuda_emu; label cuda_emu): configs/moe-tiny.ini
#     (8 experts, top 2) cut to 2 blocks and a sequence of 32, float32,
#     deterministic, one micro-batch a rank, 2 steps a run (the bits of a
#     step's update and the next step's forward on it; ZeRO-2's runs 4, the
#     resume starting from their step-2 checkpoint). On the device, ep 2 at dp 2 and
#     ep 4 at dp 4 give ep 1's losses, routes per expert and final parameters
#     bit for bit, as does the llama arch with a shared expert at ep 2 (the
#     CPU's rule, docs/parallelism.md "Exactness", on the device); ZeRO-2 and
#     ZeRO-3 at ep 2 give their ep 1's bits, recompute selective and full at
#     ep 2 their ep 1's and recompute none's; bf16 activations (the experts'
#     rows bf16, gpt and llama) at ep 2 their ep 1's, selective and full
#     recompute none's, ZeRO-2's sharded masters adam's losses; and ZeRO-2's sharded checkpoint
#     of ep 2 (each expert slice written by the rank holding it) resumes at
#     ep 1 as the straight ep 1 run, bit for bit.
#   test_moe_ep_device.sh gpu   the same on the cuda device (label gpu), every
#     rank on the one GPU the host has where it has one; exits 77 (skipped)
#     where no CUDA device is found.
# Nothing here measures speed or how much of the trade the compute hides.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
cuda_device "${1:-}" "test_moe_ep_device.sh emu|gpu"
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
S=(run.steps=2 run.eval_every=0 run.ckpt_every=2 run.progress=off run.precision=fp32 run.deterministic=true
  model.n_layer=2 model.block_size=32 data.micro_batch=1 "data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
  comm.plugin=tcp "device.plugin=$DEV")
# routes A B: metrics.csv's moe_tokens_* columns agree, every step
same_routes() {
  local e
  for e in 0 1 2 3 4 5 6 7; do
    [ "$(column "$1" moe_tokens_$e)" = "$(column "$2" moe_tokens_$e)" ] ||
      fail "$2 routed other tokens to expert $e than $1"
  done
}
# ep_case NAME EP ARGS...: NAME_ep1 and NAME_epEP side by side, then bit for bit
ep_case() {
  local name=$1 ep=$2
  shift 2
  train "${name}_ep1" "${S[@]}" "$@" &
  train "${name}_ep$ep" "${S[@]}" "$@" parallel.ep="$ep" &
  joined
  same_losses "${name}_ep1" "${name}_ep$ep" 0
  same_params "${name}_ep1" "${name}_ep$ep" bits
  same_routes "${name}_ep1" "${name}_ep$ep"
  echo "$name: ep $ep on $DEV gives ep 1's losses, routes and parameters bit for bit"
}
ep_case gpt 2 data.global_batch=2 parallel.dp=2
ep_case gpt4 4 data.global_batch=4 parallel.dp=4
ep_case llama 2 data.global_batch=2 parallel.dp=2 model.arch=llama model.ffn_hidden=128 model.moe_shared_experts=1
# recompute at ep 2 on the device: the held rows (full: freed after each
# forward and traded again; selective: the activations' outputs in one
# device buffer the blocks share) give ep 1's bits, and recompute none's
for rc in selective full; do
  ep_case "$rc" 2 data.global_batch=2 parallel.dp=2 model.recompute="$rc"
  same_losses gpt_ep2 "${rc}_ep2" 0
  same_params gpt_ep2 "${rc}_ep2" bits
done
# bf16 activations at ep 2: the experts' rows bf16 on the device and on
# the wire (half the bytes), each source's rows one grouped bf16 product
# of the holder's, so ep 1's bits still; selective and full recomputation's too
ep_case bf16 2 data.global_batch=2 parallel.dp=2 run.precision=bf16
grep -q "plait: activations bf16 (.*the sparse blocks' norms and routers.* float32)" "$E2E_WORK/bf16_ep2.out" ||
  fail "bf16 at ep 2: the run did not say its experts' rows are bf16"
ep_case bf16_llama 2 data.global_batch=2 parallel.dp=2 run.precision=bf16 model.arch=llama model.ffn_hidden=128 \
  model.moe_shared_experts=1
for rc in selective full; do
  train "bf16_${rc}_ep2" "${S[@]}" data.global_batch=2 parallel.dp=2 run.precision=bf16 parallel.ep=2 \
    model.recompute="$rc" &
done
joined
for rc in selective full; do
  same_losses bf16_ep2 "bf16_${rc}_ep2" 0
  same_params bf16_ep2 "bf16_${rc}_ep2" bits
done
echo "bf16 at ep 2 with recompute selective and full on $DEV: recompute none's bits"
# ZeRO-2 as a distributed optimizer: the experts' float32 masters sharded
# over the ranks holding them, their bf16 copies written by its gathers
train bf16_zero2_ep2 "${S[@]}" data.global_batch=2 parallel.dp=2 run.precision=bf16 parallel.ep=2 optim.plugin=zero2
same_losses bf16_ep2 bf16_zero2_ep2 0
echo "bf16 at ep 2 under zero2's sharded masters on $DEV: adam's losses"
ep_case zero2 2 data.global_batch=2 parallel.dp=2 optim.plugin=zero2 run.steps=4
ep_case zero3 2 data.global_batch=2 parallel.dp=2 optim.plugin=zero3
# ZeRO-2 at ep 2 saving sharded checkpoints; its step-2 one resumed at ep 1
# (saving gathered, as the reference): steps 3-4 as ep 1's own
train zs2 "${S[@]}" data.global_batch=2 parallel.dp=2 optim.plugin=zero2 parallel.ep=2 run.ckpt_format=sharded run.steps=4
grep -q "shard-00001" "$E2E_WORK/zs2/ckpt-00000002/index.json" ||
  fail "zero2 at ep 2 saved no sharded checkpoint: $(ls "$E2E_WORK/zs2/ckpt-00000002")"
same_losses zero2_ep1 zs2 0
cp -r "$E2E_WORK/zs2" "$E2E_WORK/to1"
rm -r "$E2E_WORK/to1/ckpt-00000004"
train to1 "${S[@]}" data.global_batch=2 parallel.dp=2 optim.plugin=zero2 run.steps=4 --resume
grep -q "resuming from $E2E_WORK/to1/ckpt-00000002" "$E2E_WORK/to1.out" || fail "to1 did not resume from step 2"
same_losses zero2_ep1 to1 0
same_params zero2_ep1 to1 bits
echo "zero2: ep 2's sharded checkpoint on $DEV resumes at ep 1 as ep 1's own run"
