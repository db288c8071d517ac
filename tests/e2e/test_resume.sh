#!/usr/bin/env bash
# Resume is bit-identical on the same layout: 20 straight steps equal 10 steps,
# a stop, and 10 resumed steps (loss curve and every tensor). A corrupted
# latest checkpoint is refused and the run resumes from the one before it; a
# fresh run refuses to mix into a directory that holds checkpoints.
source "$(dirname "$0")/lib.sh"
A="run.steps=20 optim.lr_decay_steps=20 run.ckpt_every=10 parallel.dp=2 data.micro_batch=2"
train straight $A
train split $A run.steps=10
train split $A --resume
same_losses straight split 0
same_params straight split bits
[ "$(column split step | tr '\n' ' ')" = "$(column straight step | tr '\n' ' ')" ] || fail "metrics.csv of the resumed run is not continuous"

# corrupt the latest checkpoint: one flipped byte in the middle of the model file
f=$E2E_WORK/split/ckpt-00000020/model.safetensors
size=$(stat -c %s "$f")
printf '\x5a' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc status=none
train split $A run.steps=25 --resume
grep -q "resuming from $E2E_WORK/split/ckpt-00000010" "$E2E_WORK/split.out" ||
  fail "a corrupted checkpoint was not skipped: $(grep -i resum "$E2E_WORK/split.out")"
grep -qi "ckpt-00000020" "$E2E_WORK/split.out" || fail "the skipped checkpoint was not named"

# a fresh run into a directory with checkpoints is refused, nothing touched
if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/straight" $A >"$E2E_WORK/fresh.out" 2>&1; then
  fail "a fresh run mixed into a directory with checkpoints"
fi
grep -q "already holds a checkpoint" "$E2E_WORK/fresh.out" || fail "unclear refusal: $(cat "$E2E_WORK/fresh.out")"
echo "resume OK"
