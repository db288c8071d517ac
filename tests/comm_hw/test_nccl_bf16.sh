#!/usr/bin/env bash
# What a bf16 run sends between ranks through the real nccl plugin, which
# moves device memory itself (docs/parallelism.md, "What crosses ranks, and
# in which type"), without a GPU: the stand-in CUDA runtime and NCCL
# (libplait_mock_gpu.so, preloaded into every rank, summing bf16 as NCCL's
# ring does: each partial sum rounded to bf16) and the sim test device,
# which takes a bf16 run with PLAIT_SIM_BF16=1 and computes it in float32
# (its table has to_bf16 and from_bf16, no bf16 products). Counted in the
# traces' bytes of one step (`[run] trace`):
#   tp 2, tp 2 with sequence parallelism and pp 2 each once in fp32 and
#   once in bf16: the bf16 run's tp activation collectives (f, g, the
#   sequence all-gathers and reduce-scatters) and pipeline sends and
#   receives carry exactly half the fp32 run's bytes, the cross-entropy's
#   row statistics the same bytes (float32 in both), and no run says it
#   fell back to float32;
#   the bf16 runs of tp 2, tp 2 with sequence parallelism, pp 2 and
#   tp 2 x pp 2 follow one bf16 process's losses within the documented
#   bf16 layout tolerance (1e-3 relative over 3 steps).
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
: "${MOCK_GPU_LIB:?}"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
# a sanitizer build's runtime comes after the preloaded stand-in
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export PLAIT_SIM_BF16=1
D=(run.steps=3 run.trace=2 run.eval_every=0 run.ckpt_every=0 run.progress=off data.micro_batch=1
  data.global_batch=2 model.n_layer=2 model.block_size=64 parallel.plugin=hybrid device.plugin=sim)
F=("${D[@]}" run.precision=fp32)
B=("${D[@]}" run.precision=bf16)
layouts=("tp2|parallel.tp=2" "sp2|parallel.tp=2 parallel.tp.sequence_parallel=true" "pp2|parallel.pp=2")

# The nccl plugin's probe counts GPUs from the NVIDIA driver's files (a
# pretend driver tree, as test_nccl_train.sh makes one).
root=$E2E_WORK/driver
rm -rf "$root"
for g in 0 1 2 3; do mkdir -p "$root/proc/driver/nvidia/gpus/0000:$((16 + g)):00.0"; done
export PLAIT_CUDA_SYSFS_ROOT=$root

# on_nccl NAME RANKS ARGS...: train over the stand-in, one "GPU" per rank
on_nccl() {
  local name=$1 ranks=$2
  shift 2
  PLAIT_SIM_DEVICES=$ranks PLAIT_MOCK_GPUS=$ranks LD_PRELOAD=$MOCK_GPU_LIB train "$name" "$@" comm.plugin=nccl
  grep -q "comm nccl" "$E2E_WORK/$name.out" || fail "$name did not run over nccl: $(head -n 20 "$E2E_WORK/$name.out")"
  if grep -q "travel in float32" "$E2E_WORK/$name.out"; then fail "$name: $(grep "travel in float32" "$E2E_WORK/$name.out")"; fi
}
source "$PLAIT_SOURCE_DIR/tests/device/wire_checks.sh"

train one_bf16 "${B[@]}"
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086 # ${l#*|} may hold several overrides
  on_nccl "${l%%|*}_fp32" 2 "${F[@]}" ${l#*|}
  # shellcheck disable=SC2086
  on_nccl "${l%%|*}_bf16" 2 "${B[@]}" ${l#*|}
done
on_nccl tp2pp2_bf16 4 "${B[@]}" parallel.tp=2 parallel.pp=2
wire_halved " over nccl" tp2 sp2 pp2
near_one_process " over nccl" tp2 sp2 pp2 tp2pp2
