#!/usr/bin/env bash
# A mixture of experts on the cuda device: the router, the rows permuted
# by expert and back, and the experts' grouped products on the device
# (the kernel table's MoE entries), the counts read back once per block.
#   test_moe_device.sh emu   on cuda_emu, the cuda plugin's own source on the
#     CPU emulator (tests/cuda_emu; label cuda_emu): configs/moe-tiny.ini (8
#     experts, top 2, the auxiliary and z losses) cut to 2 blocks and a
#     sequence of 32, float32, 3 steps of 2 sequences, for the gpt arch and
#     the llama arch (SwiGLU experts, one shared expert, a capacity that drops
#     routes): the device's losses within 1e-4 (relative) of the cpu
#     device's at every step (docs/gpu.md's bound between the devices), and
#     the same routes counted (metrics.csv's moe_tokens_* and moe_dropped).
#     The gpt arch at tp 2 (the experts' width split, two processes) the
#     same, on the emulator only. Both archs with bf16 activations (the
#     sparse MLP halves float32): within 1e-2 of the cpu device's float32
#     losses, recompute full the bits of none (deterministic mode); the gpt arch at tp 2 and pp 2
#     within 1e-3 of one bf16 process (emulator only).
#     A device whose kernel table lacks the MoE entries (the sim test device)
#     is refused naming the keys. (Expert parallelism on the device:
#     test_moe_ep_device.sh.)
#   test_moe_device.sh gpu   the same on the cuda device (label gpu); exits 77
#     (skipped) where no CUDA device is found.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
cuda_device "${1:-}" "test_moe_device.sh emu|gpu"
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
S=(run.steps=3 run.eval_every=0 run.ckpt_every=3 run.progress=off run.precision=fp32 model.n_layer=2
  model.block_size=32 data.global_batch=2 data.micro_batch=1 "data.path=$PLAIT_SOURCE_DIR/data/corpus.txt")
L=(model.arch=llama model.ffn_hidden=128 model.moe_shared_experts=1 model.moe_capacity=1.0)
# routes NAME: metrics.csv's moe_tokens_* and moe_dropped columns, each step
routes() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^moe_tokens_/ || $i == "moe_dropped") c[i] = 1; next }
    { s = ""; for (i = 1; i <= NF; i++) if (i in c) s = s " " $i; print s }' "$E2E_WORK/$1/metrics.csv"
}
train gpt_dev "${S[@]}" "device.plugin=$DEV" &
train gpt_cpu "${S[@]}" device.plugin=cpu &
joined
train llama_dev "${S[@]}" "${L[@]}" "device.plugin=$DEV" &
train llama_cpu "${S[@]}" "${L[@]}" device.plugin=cpu &
joined
for m in gpt llama; do
  same_losses ${m}_dev ${m}_cpu 1e-4
  [ "$(routes ${m}_dev)" = "$(routes ${m}_cpu)" ] || fail "$m: the routes counted on $DEV differ from the cpu device's"
  echo "$m: $DEV follows the cpu device's losses within 1e-4 with the same routes"
done
# bf16 activations with experts: the dense halves bf16, the sparse MLP
# halves' norms and routers float32 between the residual stream's rows
# (core/model/moe_bf16.c), their experts' rows bf16 where the device has
# the experts' bf16 entries (ABI 1.29; the cuda device does): granted,
# within 1e-2 of the cpu device's float32 losses (the dense bf16 models'
# bound), full recomputation the bits of none in deterministic mode (else
# the cuda device times cuBLASLt's candidates and keeps the fastest, which
# may differ between two runs and with them the last bits, docs/gpu.md)
for m in gpt llama; do
  A=()
  [ "$m" = llama ] && A=("${L[@]}")
  train ${m}_bf16 "${S[@]}" "${A[@]}" run.precision=bf16 run.deterministic=true "device.plugin=$DEV" &
  train ${m}_bf16_full "${S[@]}" "${A[@]}" run.precision=bf16 run.deterministic=true model.recompute=full \
    "device.plugin=$DEV" &
  joined
  grep -q "plait: activations bf16 (.*the sparse blocks' norms and routers.* float32)" "$E2E_WORK/${m}_bf16.out" ||
    fail "$m: a bf16 run with experts did not say it keeps bf16 activations, its experts' rows too"
  same_losses ${m}_bf16 ${m}_cpu 1e-2
  same_losses ${m}_bf16_full ${m}_bf16 0
  echo "$m with experts in bf16: $DEV within 1e-2 of the cpu device's float32 losses, recompute full the bits of none"
done
# experts under tensor parallelism on the device (each expert's width over
# tp 2, the tp sums on the device's memory): two processes on the emulator;
# a GPU run would need a second GPU
if [ "$DEV" = cuda_emu ]; then
  train gpt_tp2 "${S[@]}" "device.plugin=$DEV" parallel.plugin=hybrid parallel.tp=2
  same_losses gpt_tp2 gpt_cpu 1e-4
  [ "$(routes gpt_tp2)" = "$(routes gpt_cpu)" ] || fail "gpt at tp 2: the routes counted on $DEV differ from the cpu device's"
  echo "gpt at tp 2: $DEV follows the cpu device's losses within 1e-4 with the same routes"
  # bf16 with experts at tp 2 and pp 2 (their messages bf16 on the wire):
  # within 1e-3 of one bf16 process, the dense bf16 layouts' bound
  # (test_llama_bf16_wire.sh)
  train gpt_bf16_tp2 "${S[@]}" run.precision=bf16 "device.plugin=$DEV" parallel.plugin=hybrid parallel.tp=2 &
  train gpt_bf16_pp2 "${S[@]}" run.precision=bf16 "device.plugin=$DEV" parallel.plugin=hybrid parallel.pp=2 &
  joined
  same_losses gpt_bf16_tp2 gpt_bf16 1e-3
  same_losses gpt_bf16_pp2 gpt_bf16 1e-3
  echo "gpt with experts in bf16 at tp 2 and pp 2: within 1e-3 of one process"
fi
dropped=$(column llama_dev moe_dropped | awk '{ s += $1 } END { print s + 0 }')
[ "$dropped" -gt 0 ] || fail "llama: moe_capacity = 1.0 dropped no route in 3 steps; the capacity path went untested"
train_refused sim "the device's kernel table has no mixture-of-experts entries" "${S[@]}" \
  "run.out_dir=$E2E_WORK/sim" device.plugin=sim
echo "a device without the MoE entries: refused"
