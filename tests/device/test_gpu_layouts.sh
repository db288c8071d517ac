#!/usr/bin/env bash
# The layouts on one GPU (label gpu):
#   test_gpu_layouts.sh            ranks sharing one GPU over tcp staging reproduce one
#     rank on it, in deterministic mode with one sequence per micro-batch
#     (gpt-tiny, fp32, 5 steps): dp 2, dp 4, pp 2 and pp 2 under the
#     zero-bubble schedule (its backward in halves) bit-identical (every loss,
#     model and optimizer checkpoints byte for byte), tp 2 within 1e-5 relative
#     (losses; each final parameter tensor 1e-4 of its largest value); one rank over [comm] plugin = nccl trains
#     and matches one rank over tcp bit for bit. Exits 77 (skipped, never
#     passed) where no CUDA device is found.
#   test_gpu_layouts.sh selfcheck  the same comparisons with the sim test device
#     posing as the GPU on 2 steps (dp 2, pp 2, tp 2; no nccl: there is none
#     here, test_nccl_train covers it with the stand-in), and a checkpoint
#     differing in one byte rejected.
#   test_gpu_layouts.sh emu        the GPU's layouts (no nccl) on cuda_emu, the
#     cuda plugin's own source on the CPU emulator (tests/cuda_emu; label
#     cuda_emu), 2 steps of 4 sequences, every rank with its own emulated
#     GPU 0; plus dp 2 with zero3 (sharded optimizer, gathered parameters,
#     the exact norm's accumulators merged across ranks) bit-identical to
#     one rank with adam, and pp 2 under zero-bubble.
#   On the emulator make test runs two layouts of each list (sample_cases in
#     tests/e2e/lib.sh: the commit chooses which), make test-all every one.
#   On the GPU and the emulator also bf16 (bf16 activations): dp 2, dp 2
#     with zero3 and one rank with full recomputation (its bf16
#     activations rebuilt in the backward) bit-identical to one rank; pp 2
#     and pp 2 under the zero-bubble schedule (each backward in an input
#     and a weight half, the weight halves reading bf16 gradients the input
#     halves kept), whose stage boundaries travel in bf16, and tp 2 with
#     and without sequence parallelism (bf16 blocks, tp's collectives bf16
#     on the wire), within 1e-3 of its losses (docs/parallelism.md).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
MODE=${1:-gpu}
if [ "$MODE" = selfcheck ]; then
  DEV=sim STEPS=2 layouts=("dp2|parallel.dp=2" "pp2|parallel.pp=2" "tp2|parallel.tp=2")
elif [ "$MODE" = emu ]; then
  DEV=cuda_emu STEPS=2 layouts=("dp2|parallel.dp=2" "pp2|parallel.pp=2" "tp2|parallel.tp=2"
    "dp2_zero3|parallel.dp=2 optim.plugin=zero3" "pp2_zb1|parallel.pp=2 parallel.pp.schedule=zb1")
  sample_cases layouts 2 # the emulator runs a GPU thread per element: make test-all runs them all
else
  [ "$MODE" = gpu ] || fail "usage: test_gpu_layouts.sh [selfcheck|emu]"
  line=$("$PLAIT_BIN" plugins 2>&1 | grep -A1 -E '^device +cuda ' || true)
  [ -n "$line" ] || { echo "SKIP: the cuda device plugin is not built"; exit 77; }
  case "$line" in *" available "*) ;; *) echo "SKIP: no CUDA device: $(sed -n 2p <<<"$line" | sed 's/^ *-> *//')"; exit 77 ;; esac
  DEV=cuda STEPS=5 layouts=("dp2|parallel.dp=2" "dp4|parallel.dp=4" "pp2|parallel.pp=2" "tp2|parallel.tp=2"
    "pp2_zb1|parallel.pp=2 parallel.pp.schedule=zb1")
fi
D=("run.steps=$STEPS" run.eval_every=0 "run.ckpt_every=$STEPS" run.progress=off run.deterministic=true
  data.micro_batch=1 run.precision=fp32 parallel.plugin=hybrid "device.plugin=$DEV")
# the emulator's steps of 4 sequences, not gpt-tiny's 8: still 2 micro-batches
# accumulated on a rank of dp 2 and 4 in flight at pp 2
[ "$MODE" = emu ] && D+=(data.global_batch=4)
# the one-rank references side by side (one process each)
train one "${D[@]}" comm.plugin=tcp &
B=("${D[@]}" run.precision=bf16)
[ "$MODE" = selfcheck ] || train one_bf16 "${B[@]}" comm.plugin=tcp &
joined
for l in "${layouts[@]}"; do
  name=${l%%|*} arg=${l#*|}
  # shellcheck disable=SC2086 # $arg may hold several overrides
  train "$name" "${D[@]}" $arg comm.plugin=tcp
  if [ "$name" = tp2 ]; then
    same_losses one tp2 1e-5
    same_params one tp2 1e-4 # as test_3d_equivalence: the losses are the 1e-5 bound
    echo "tp2: losses within 1e-5 of one rank on $DEV, parameters 1e-4 (final loss $(column tp2 loss | tail -n 1))"
  else
    same_losses one "$name" 0
    same_params one "$name" bits
    echo "$name: bit-identical to one rank on $DEV (final loss $(column "$name" loss | tail -n 1))"
  fi
done
# bf16 activations (the model's bf16 path: bf16 buffers, the weights' bf16
# copy made again after each optimizer step, ZeRO-3's from its gathered
# parameters) give dp and zero3 the bits of one rank too (pp, whose
# boundaries travel in bf16, its losses within 1e-3), and so does full recomputation (each block's
# bf16 activations rebuilt in its backward by the same kernels on the same
# weight copy)
if [ "$MODE" != selfcheck ]; then
  grep -q '^plait: activations bf16' "$E2E_WORK/one_bf16.out" || fail "the bf16 run kept float32 activations"
  bf16_layouts=("dp2|parallel.dp=2" "pp2|parallel.pp=2" "dp2_zero3|parallel.dp=2 optim.plugin=zero3"
    "rcfull|model.recompute=full" "pp2_zb1|parallel.pp=2 parallel.pp.schedule=zb1" "tp2|parallel.tp=2"
    "tp2_sp|parallel.tp=2 parallel.tp.sequence_parallel=true")
  [ "$MODE" = gpu ] || sample_cases bf16_layouts 2
  for l in "${bf16_layouts[@]}"; do
    name=${l%%|*}_bf16 arg=${l#*|}
    # shellcheck disable=SC2086 # $arg may hold several overrides
    train "$name" "${B[@]}" $arg comm.plugin=tcp
    grep -q '^plait: activations bf16' "$E2E_WORK/$name.out" || fail "the $name run kept float32 activations"
    case $name in
    pp2*) # the stage boundaries round to bf16 on the wire
      same_losses one_bf16 "$name" 1e-3
      echo "$name: bf16 activations and boundaries, losses within 1e-3 of one rank on $DEV" ;;
    tp2*) # tp's collectives round to bf16 on the wire, the products' partial sums apart
      same_losses one_bf16 "$name" 1e-3
      echo "$name: bf16 activations under tp, losses within 1e-3 of one rank on $DEV" ;;
    *)
      same_losses one_bf16 "$name" 0
      same_params one_bf16 "$name" bits
      echo "$name: bf16 activations, bit-identical to one rank on $DEV (final loss $(column "$name" loss | tail -n 1))" ;;
    esac
  done
fi
if [ "$MODE" = gpu ]; then
  train nccl1 "${D[@]}" comm.plugin=nccl
  same_losses one nccl1 0
  same_params one nccl1 bits
  echo "nccl, 1 rank: trains, bit-identical to one rank over tcp"
elif [ "$MODE" = selfcheck ]; then
  rm -rf "${E2E_WORK:?}/byte" && cp -r "$E2E_WORK/dp2" "$E2E_WORK/byte"
  f=$(last_ckpt byte)/model.safetensors
  size=$(stat -c %s "$f")
  byte=$(od -An -tu1 -j $((size - 5)) -N1 "$f")
  printf '%b' "\\x$(printf %02x $(((byte + 1) % 256)))" | dd of="$f" bs=1 seek=$((size - 5)) conv=notrunc status=none
  if (same_params one byte bits) >/dev/null 2>&1; then fail "self-check: a model checkpoint differing in one byte was not caught"; fi
  echo "self-check: the layout comparisons pass on sim and a checkpoint differing in one byte is caught"
fi
