#!/usr/bin/env bash
# ZeRO-3 under bf16 activations on cuda_emu (the cuda plugin's own source on
# the CPU emulator; label cuda_emu): the weights the products read only
# through their bf16 copy are gathered in bf16 (each rank rounds its float32
# slice, then the bf16 slices are all-gathered: PLAIT_OPTIM_GATHERS_COPIES,
# plugins/optim/common/zero.h) and the model reads them in the gathered
# buffer, keeping no copy of its own. Rounding is elementwise, so that is
# the rounding the model made of a float32 gather, the same bits as the
# whole copy one rank with adam keeps: for gpt and llama (2 blocks, a
# sequence of 32, 2 steps of 2 sequences, deterministic) dp 2 with zero3
# gives every loss and the final parameters of one rank bit for bit, and so
# does dp 2 with zero3 under full recomputation (whose backward reruns the
# block's forward on the values its own call's gather left). What is left of
# the model's copy in memory.csv (its parameters' bytes less a float32 zero3
# run's) is the gpt head's tied copy alone, V x C bf16 elements (the tied
# pair is gathered in float32: the embedding reads it so), and nothing for
# llama, whose head is float32. On the wire each block's copied weights,
# 12C² + 7C elements of gpt's, gathered at its forward and its backward,
# take 2 bytes where float32 takes 4: the optimizer's traffic a step is the
# float32 zero3 run's less 2 blocks x 2 gathers x (12C² + 7C) x 2 bytes x
# (N-1)/N, everything else (the reductions, the norm) being alike. With the
# parameters' slices offloaded (zero3 on one rank, offload = host and nvme
# with offload_params) each gather rounds the slice the store hands over:
# the same bits again.
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
# the parameters' slices in host memory or on disk ([optim] offload_params,
# ZeRO-3 on one rank): each gather rounds the slice the store hands over
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
mkdir -p "$E2E_WORK/disk"
for mode in host nvme; do
  name=gpt_zero3_params_$mode
  train "$name" "${D[@]}" optim.plugin=zero3 "optim.offload=$mode" optim.offload_params=true optim.offload_buffer=64K \
    "optim.offload_path=$E2E_WORK/disk"
  same_losses gpt_one "$name" 0
  same_params gpt_one "$name" bits
  echo "$name: bit-identical to one rank with the whole copy"
done
for arch in gpt llama; do
  export CFG=$PLAIT_SOURCE_DIR/configs/$arch-tiny.ini
  train "${arch}_zero3_fp32" "${D[@]}" parallel.dp=2 optim.plugin=zero3 run.precision=fp32
done
C=128 V=256
block=$((12 * C * C + 7 * C))
for r in 0 1; do
  copy=$(($(mem gpt_zero3_none "$r" param_bytes) - $(mem gpt_zero3_fp32 "$r" param_bytes)))
  [ "$copy" = $((V * C * 2)) ] || fail "rank $r: the gpt zero3 run's own bf16 copy takes $copy bytes, not the head's $((V * C * 2))"
  copy=$(($(mem llama_zero3_none "$r" param_bytes) - $(mem llama_zero3_fp32 "$r" param_bytes)))
  [ "$copy" = 0 ] || fail "rank $r: the llama zero3 run keeps a bf16 copy of $copy bytes, where the gathers are its copy"
done
echo "zero3's own bf16 copy: the gpt head's $((V * C * 2)) bytes a rank, none for llama (a block's copy was $((block * 2)))"
saved=$((2 * 2 * block * 2 / 2))
paste -d' ' <(column gpt_zero3_fp32 optim_bytes) <(column gpt_zero3_none optim_bytes) | awk -v s="$saved" '
  { n++; if ($1 - $2 != s) { printf "step %d: float32 gathers sent %d bytes, bf16 %d: %d fewer, not %d\n", n, $1, $2, $1 - $2, s; bad = 1 } }
  END { exit n == 0 || bad }' || fail "the bf16 gathers do not halve the copied weights' bytes on the wire"
echo "zero3 bf16 gathers: $(column gpt_zero3_none optim_bytes | tail -n 1) bytes a step where float32 gathers send $(column gpt_zero3_fp32 optim_bytes | tail -n 1)"
