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
# The snapshot's copies run on the communication stream while step 2
# computes, and step 2's optimizer waits for them before it writes what they
# read. run.debug_ckpt_copy_late has the writer thread wait for the copies
# only once step 2 has ended, so nothing else runs them first (cuda_emu
# runs queued work only when a thread waits for it): step 1's checkpoint
# still holds step 1's values, byte for byte the synchronous save's.
PLAIT_LOG_LEVEL=debug train late "${D[@]}" run.ckpt_async=true run.debug_ckpt_copy_late=true
n=$(grep -c "step 1: the snapshot's copies run on the device's communication stream" "$E2E_WORK/late.out" || true)
[ "$n" = 2 ] || fail "$n of 2 ranks copied step 1's snapshot on the communication stream"
for f in shard-00000.safetensors shard-00001.safetensors index.json optim.safetensors; do
  cmp -s "$E2E_WORK/sync/$c/$f" "$E2E_WORK/late/$c/$f" ||
    fail "$c/$f, its snapshot copied while step 2 ran, differs from the synchronous save's (step 2's values?)"
done
echo "ok: step 1's snapshot page-locked on both ranks of $DEV; its checkpoint byte for byte the synchronous one's, also with its copies overlapping step 2"
