#!/usr/bin/env bash
# The zero-bubble schedule (zb1: each backward in an input half and a
# weight half run later) with a mixture of experts under bf16 activations
# on the cuda device: the sparse halves' float32 norm output rebuilt in
# each half, its gradient and the experts' bf16 output gradients kept in
# the slot between them (core/model/moe_bf16.c, moe.c, moe_ep.c).
#   test_moe_zb1_bf16.sh emu   on cuda_emu, the cuda plugin's own source on
#     the CPU emulator (tests/cuda_emu; label cuda_emu): configs/moe-tiny.ini
#     (8 experts, top 2) cut to 2 blocks and a sequence of 32, bf16,
#     deterministic, pp 2 with four micro-batches a rank so that weight
#     halves wait behind later input halves: zb1 gives 1f1b's losses and
#     final parameters bit for bit for the gpt arch (recompute none and
#     full), the llama arch with a shared expert, and the gpt arch at ep 2
#     (dp 2 x pp 2, the holders keeping the rows' bf16 output gradients).
#   test_moe_zb1_bf16.sh gpu   the same on the cuda device (label gpu),
#     every rank on the one GPU; exits 77 (skipped) where no CUDA device is
#     found.
#   test_moe_zb1_bf16.sh cpu   the same on the cpu device (core/kernels'
#     bf16 entries, the experts' included), its products emulated so that
#     any CPU runs them.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
X=()
if [ "${1:-}" = cpu ]; then
  DEV=cpu X=(run.debug_bf16_emulate=true)
else
  cuda_device "${1:-}" "test_moe_zb1_bf16.sh emu|gpu|cpu"
fi
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
S=(run.steps=3 run.eval_every=0 run.ckpt_every=3 run.progress=off run.precision=bf16 run.deterministic=true
  model.n_layer=2 model.block_size=32 data.micro_batch=1 data.global_batch=4
  "data.path=$PLAIT_SOURCE_DIR/data/corpus.txt" parallel.plugin=hybrid parallel.pp=2 comm.plugin=tcp
  "device.plugin=$DEV" "${X[@]}")
# zb1_case NAME ARGS...: NAME_1f1b and NAME_zb1 side by side, then bit for bit
zb1_case() {
  local name=$1
  shift
  train "${name}_1f1b" "${S[@]}" "$@" parallel.pp.schedule=1f1b &
  train "${name}_zb1" "${S[@]}" "$@" parallel.pp.schedule=zb1 &
  joined
  grep -q "plait: activations bf16 (.*the sparse blocks' norms and routers.* float32)" "$E2E_WORK/${name}_zb1.out" ||
    fail "$name: the zb1 run did not keep bf16 activations with its experts' rows bf16"
  same_losses "${name}_1f1b" "${name}_zb1" 0
  same_params "${name}_1f1b" "${name}_zb1" bits
  echo "$name: zb1 with experts in bf16 on $DEV gives 1f1b's losses and parameters bit for bit"
}
zb1_case gpt
zb1_case gpt_full model.recompute=full
zb1_case llama model.arch=llama model.ffn_hidden=128 model.moe_shared_experts=1
zb1_case gpt_ep2 parallel.dp=2 parallel.ep=2 data.global_batch=8
