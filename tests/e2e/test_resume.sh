#!/usr/bin/env bash
# Resume is bit-identical on the same layout: 20 straight steps equal 10 steps,
# a stop, and 10 resumed steps (loss curve and every tensor), on dp = 2 with
# --resume and on one process with [run] resume = auto, which starts fresh
# in an empty directory; resuming a finished run says there is nothing to
# do and changes nothing. state.json records the seed, the data position and
# the training data; a resume with another seed or other data continues with
# a warning naming both, one with the same data elsewhere says nothing. A
# corrupted latest checkpoint is refused and the run resumes from the one
# before it; a fresh run refuses to mix into a directory that holds
# checkpoints.
source "$(dirname "$0")/lib.sh"

# one process, [run] resume = auto (no --resume): 10 steps = 5 + 5
S="run.steps=10 optim.lr_decay_steps=10 run.ckpt_every=5"
train one_straight $S
rm -rf "$E2E_WORK/one_split" && mkdir -p "$E2E_WORK/one_split"
train one_split $S run.steps=5 run.resume=auto
! grep -qi "resuming" "$E2E_WORK/one_split.out" || fail "resume = auto in an empty directory did not start fresh"
[ "$(column one_split step | tr '\n' ' ')" = "1 2 3 4 5 " ] || fail "the fresh resume = auto run did not train steps 1-5"
train one_split $S run.resume=auto
grep -q "resuming from $E2E_WORK/one_split/ckpt-00000005" "$E2E_WORK/one_split.out" ||
  fail "resume = auto did not continue from ckpt-00000005: $(grep -i resum "$E2E_WORK/one_split.out")"
same_losses one_straight one_split 0
same_params one_straight one_split bits
[ "$(column one_split step | tr '\n' ' ')" = "$(column one_straight step | tr '\n' ' ')" ] ||
  fail "metrics.csv of the run resumed by resume = auto is not continuous"
! grep -q "warn" "$E2E_WORK/one_split.out" || fail "the same run resumed with a warning: $(grep warn "$E2E_WORK/one_split.out")"

# the run state says what it is: seed (tiny.ini: 7), data position, the data's token counts
state=$E2E_WORK/one_split/ckpt-00000010/state.json
corpus=$PLAIT_SOURCE_DIR/data/corpus.txt
tokens=$(stat -c %s "$corpus")
train_tokens=$(awk -v n="$tokens" 'BEGIN { printf "%d", n - int(n * 0.1) }')  # [data] val_fraction 0.1: the tail
grep -q '"seed": 7,' "$state" || fail "state.json does not hold the seed: $(cat "$state")"
grep -q '"data_step": 10,' "$state" || fail "state.json does not hold the data position"
grep -Eq "\"data\": \{\"path\": \"[^\"]*corpus.txt\", \"tokens\": $tokens, \"train_tokens\": $train_tokens, \"train_crc32c\": \"[0-9a-f]{8}\"\}" "$state" ||
  fail "state.json does not identify the data: $(grep '"data"' "$state")"
! grep -q rng_state "$state" || fail "state.json still has the rng_state placeholder"

# resuming a finished run says so and changes nothing
rm -rf "${E2E_WORK:?}/finished" && cp -r "$E2E_WORK/one_split" "$E2E_WORK/finished"
train finished $S run.resume=auto
grep -q "^nothing to do: the run is already at step 10 of \[run\] steps = 10" "$E2E_WORK/finished.out" ||
  fail "resuming a finished run did not say so: $(tail -n 3 "$E2E_WORK/finished.out")"
! grep -q "^done:" "$E2E_WORK/finished.out" || fail "a run with nothing to do claimed to be done"
[ "$(cat "$E2E_WORK/finished/metrics.csv"; ls "$E2E_WORK/finished" | grep -v '^memory.csv$\|^rank-0.log$')" = \
  "$(cat "$E2E_WORK/one_split/metrics.csv"; ls "$E2E_WORK/one_split" | grep -v '^memory.csv$\|^rank-0.log$')" ] ||
  fail "resuming a finished run changed its metrics or checkpoints"

# resume_as NAME OVERRIDES...: continue a copy of one_split for 2 more steps
resume_as() {
  local name=$1; shift
  rm -rf "${E2E_WORK:?}/$name" && cp -r "$E2E_WORK/one_split" "$E2E_WORK/$name"
  train "$name" $S run.steps=12 run.resume=auto "$@"
  grep -q "resuming from $E2E_WORK/$name/ckpt-00000010" "$E2E_WORK/$name.out" || fail "$name did not resume"
}
resume_as other_seed run.seed=8
grep -q "ckpt-00000010 was trained with \[run\] seed = 7; this run has seed = 8: .* from step 11 on are drawn with the new seed" \
  "$E2E_WORK/other_seed.out" || fail "no clear warning about the other seed: $(grep -i seed "$E2E_WORK/other_seed.out")"
cp "$corpus" "$E2E_WORK/moved.txt"
resume_as moved_data data.path="$E2E_WORK/moved.txt"
! grep -q "warn" "$E2E_WORK/moved_data.out" || fail "the same data at another path was taken for other data"
printf 'X' | dd of="$E2E_WORK/moved.txt" bs=1 seek=1000 conv=notrunc status=none # inside the training split
resume_as other_data data.path="$E2E_WORK/moved.txt"
grep -q "ckpt-00000010 was trained on other data (.*corpus.txt: $tokens tokens, training split $train_tokens tokens with CRC32C [0-9a-f]*); this run reads .*moved.txt" \
  "$E2E_WORK/other_data.out" || fail "no clear warning about other data: $(grep -i data "$E2E_WORK/other_data.out")"

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
