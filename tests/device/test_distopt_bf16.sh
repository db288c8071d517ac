#!/usr/bin/env bash
# ZeRO-1 and ZeRO-2 as a distributed optimizer ([optim.zeroN] master) on a
# bf16 run at dp 2, on cuda_emu (the cuda plugin's own source on the CPU
# emulator: bf16 activations and the weights' bf16 copy), a 1-block tiny
# GPT and a 1-block tiny Llama, deterministic, 3 steps; asserts:
# - master = sharded (the default, auto, here) gives the bits of master =
#   whole with the same param_gather: the products read the same bf16
#   copy, the float32-read weights (norms, embeddings) the same values
#   (zero1 and zero2 both, bf16 and float32 gathers);
# - its param_bytes in memory.csv fall by the float32 weights of the
#   copied tensors (4 bytes each of what the copy holds 2);
# - a run resumed from its checkpoint (which holds the float32 slices)
#   continues bit for bit;
# - master = sharded on a float32 run is refused, naming the key.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
A=(run.steps=3 run.eval_every=0 run.progress=off run.deterministic=true run.precision=bf16 data.global_batch=4
  data.micro_batch=1 model.n_layer=1 model.block_size=32 device.plugin=cuda_emu comm.plugin=tcp parallel.dp=2)
for m in gpt llama; do
  [ $m = llama ] && export CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
  for z in zero1 zero2; do
    for g in bf16 fp32; do
      train ${m}_${z}_${g}_whole "${A[@]}" optim.plugin=$z optim.$z.param_gather=$g optim.$z.master=whole &
      train ${m}_${z}_${g}_sharded "${A[@]}" optim.plugin=$z optim.$z.param_gather=$g &
      joined
      same_params ${m}_${z}_${g}_whole ${m}_${z}_${g}_sharded bits
      same_losses ${m}_${z}_${g}_whole ${m}_${z}_${g}_sharded 0
      w=$(mem ${m}_${z}_${g}_whole 0 param_bytes) s=$(mem ${m}_${z}_${g}_sharded 0 param_bytes)
      [ -n "$w" ] && [ -n "$s" ] && [ "$s" -lt "$w" ] ||
        fail "$m $z ($g gathers): param_bytes $s with sharded masters, $w with whole ones (want fewer)"
      echo "$m $z ($g gathers): the same bits; param_bytes $w whole, $s sharded"
    done
  done
done
# resumed from the float32 slices: the bits of the uninterrupted run
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
B=("${A[@]}" optim.plugin=zero2 optim.zero2.param_gather=bf16 run.ckpt_every=2)
train straight "${B[@]}" run.steps=4
train split "${B[@]}" run.steps=2
train split "${B[@]}" run.steps=4 --resume
same_params straight split bits
train_refused fp32_sharded "[optim.zero1] master = sharded" "${A[@]}" run.precision=fp32 optim.plugin=zero1 \
  optim.zero1.master=sharded "run.out_dir=$E2E_WORK/fp32_sharded"
echo "sharded masters: bits of whole ones (gpt, llama; zero1, zero2), resumed bit for bit, refused on fp32"
