#!/usr/bin/env bash
# What a bf16 run sends between ranks, on cuda_emu (the cuda plugin's own
# source on the CPU emulator; label cuda_emu), counted in the traces'
# bytes per collective and transfer of one step (docs/parallelism.md,
# "What crosses ranks, and in which type"):
#   tp 2, tp 2 with sequence parallelism and pp 2 each once in fp32 and
#   once in bf16: the bf16 run's tp activation collectives (f, g, the
#   sequence all-gathers and reduce-scatters) and pipeline sends and
#   receives carry exactly half the fp32 run's bytes, and the
#   cross-entropy's row statistics the same bytes (they stay float32);
#   the bf16 runs of tp 2, tp 2 with sequence parallelism, pp 2 and
#   tp 2 x pp 2 follow one bf16 process's losses within 1e-3 relative over
#   3 steps (deterministic mode, one sequence per micro-batch, a 2-block
#   gpt-tiny of context 64).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
D=(run.steps=3 run.trace=2 run.eval_every=0 run.ckpt_every=0 run.progress=off run.deterministic=true data.micro_batch=1 data.global_batch=2
  model.n_layer=2 model.block_size=64 parallel.plugin=hybrid device.plugin=cuda_emu comm.plugin=tcp)
F=("${D[@]}" run.precision=fp32)
B=("${D[@]}" run.precision=bf16)
layouts=("tp2|parallel.tp=2" "sp2|parallel.tp=2 parallel.tp.sequence_parallel=true" "pp2|parallel.pp=2")

source "$PLAIT_SOURCE_DIR/tests/device/wire_checks.sh"

train one_bf16 "${B[@]}"
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086 # ${l#*|} may hold several overrides
  train "${l%%|*}_fp32" "${F[@]}" ${l#*|}
  # shellcheck disable=SC2086
  train "${l%%|*}_bf16" "${B[@]}" ${l#*|}
done
train tp2pp2_bf16 "${B[@]}" parallel.tp=2 parallel.pp=2
wire_halved "" tp2 sp2 pp2
near_one_process "" tp2 sp2 pp2 tp2pp2
