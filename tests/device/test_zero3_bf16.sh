#!/usr/bin/env bash
# ZeRO-3 under bf16 activations on cuda_emu (the cuda plugin's own source on
# the CPU emulator; label cuda_emu): the model keeps the bf16 copy of a
# layer's weights only while the layer runs, made again from the gathered
# float32 parameters at each forward and backward call (core/model/model.h,
# params_gathered). It is the same rounding of the same values as the whole
# copy one rank with adam keeps, so for gpt and llama (2 blocks, a sequence
# of 32, 2 steps of 2 sequences, deterministic) dp 2 with zero3 gives every
# loss and the final parameters of one rank bit for bit, and so does dp 2
# with zero3 under full recomputation (whose backward reruns the block's
# forward on the copy its own call made). The gpt run's copy in memory.csv
# (its parameters' bytes less a float32 zero3 run's) is one block's, 12C² +
# 7C bf16 elements, not the whole copy of 2 blocks and the head.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
grep -qE '^device +cuda_emu ' <<<"$("$PLAIT_BIN" plugins 2>&1)" || {
  echo "SKIP: the cuda_emu device plugin is not built (no CUDA toolkit, or a sanitizer build)"
  exit 77
}
D=(run.steps=2 run.eval_every=0 run.ckpt_every=2 run.progress=off run.deterministic=true run.precision=bf16
  data.micro_batch=1 data.global_batch=2 model.n_layer=2 model.block_size=32 parallel.plugin=hybrid
  device.plugin=cuda_emu comm.plugin=tcp)
for arch in gpt llama; do
  export CFG=$PLAIT_SOURCE_DIR/configs/$arch-tiny.ini
  train "${arch}_one" "${D[@]}"
  grep -q '^plait: activations bf16' "$E2E_WORK/${arch}_one.out" || fail "$arch: the bf16 run kept float32 activations"
  for rc in none full; do
    name=${arch}_zero3_$rc
    train "$name" "${D[@]}" parallel.dp=2 optim.plugin=zero3 model.recompute=$rc
    grep -q '^plait: activations bf16' "$E2E_WORK/$name.out" || fail "$name: the run kept float32 activations"
    same_losses "${arch}_one" "$name" 0
    same_params "${arch}_one" "$name" bits
    echo "$name: bit-identical to one rank with the whole copy (final loss $(column "$name" loss | tail -n 1))"
  done
done
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
train gpt_zero3_fp32 "${D[@]}" parallel.dp=2 optim.plugin=zero3 run.precision=fp32
C=128 V=256
block=$(((12 * C * C + 7 * C) * 2)) whole=$((2 * (12 * C * C + 7 * C) * 2 + V * C * 2))
for r in 0 1; do
  copy=$(($(mem gpt_zero3_none $r param_bytes) - $(mem gpt_zero3_fp32 $r param_bytes)))
  [ "$copy" = "$block" ] || fail "rank $r: the zero3 run's bf16 copy takes $copy bytes, not one block's $block"
done
echo "zero3's bf16 weight copy: $block bytes a rank (one block's), where the whole copy takes $whole"
