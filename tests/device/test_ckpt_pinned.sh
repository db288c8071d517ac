#!/usr/bin/env bash
# A ckpt_async save's host snapshot on a GPU device (docs/checkpoints.md,
# "Asynchronous saves"):
#   test_ckpt_pinned.sh emu   on cuda_emu (the cuda plugin's own source on
#     the CPU emulator, label cuda_emu); test_ckpt_pinned.sh gpu: on cuda
#     (label gpu; exits 77, skipped, without a CUDA device).
# dp 2 with ZeRO-3, deterministic: each rank's snapshot of step 1 is in the
# device's page-locked host memory (its debug line), and the checkpoint of
# step 1 written from it in the background is byte for byte the one a
# synchronous sharded save writes (every shard file, index.json and the
# kept buffers' file).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
MODE=${1:-emu}
case $MODE in
  emu) DEV=cuda_emu ;;
  gpu)
    DEV=cuda
    line=$("$PLAIT_BIN" plugins 2>&1 | grep -A1 -E '^device +cuda ' || true)
    [ -n "$line" ] || { echo "SKIP: the cuda device plugin is not built"; exit 77; }
    case "$line" in *" available "*) ;; *) echo "SKIP: no CUDA device"; exit 77 ;; esac
    ;;
  *) fail "usage: test_ckpt_pinned.sh [emu|gpu]" ;;
esac
D=(run.steps=2 run.ckpt_every=1 run.keep_checkpoints=2 run.eval_every=0 run.deterministic=true data.micro_batch=1
  run.precision=fp32 parallel.plugin=hybrid parallel.dp=2 optim.plugin=zero3 "device.plugin=$DEV"
  run.ckpt_format=sharded)
train sync "${D[@]}"
PLAIT_LOG_LEVEL=debug train async "${D[@]}" run.ckpt_async=true
n=$(grep -c "step 1: the snapshot of this rank's [0-9]* bytes is in page-locked host memory" "$E2E_WORK/async.out" ||
  true)
[ "$n" = 2 ] || fail "$n of 2 ranks put step 1's snapshot in page-locked memory: $(grep -m2 'snapshot of' "$E2E_WORK/async.out")"
c=ckpt-00000001
for f in shard-00000.safetensors shard-00001.safetensors index.json optim.safetensors; do
  [ -f "$E2E_WORK/sync/$c/$f" ] || fail "the synchronous save wrote no $c/$f"
  cmp -s "$E2E_WORK/sync/$c/$f" "$E2E_WORK/async/$c/$f" ||
    fail "$c/$f written from the page-locked snapshot differs from the synchronous save's"
done
echo "ok: step 1's snapshot page-locked on both ranks of $DEV; its checkpoint byte for byte the synchronous one's"
