#!/usr/bin/env bash
# [data] skip_batches: a run skipping the batches of steps 2-3 says so,
# trains step 1 on step 1's batch (the straight run's loss) and then on
# later ones (another loss); the same run resumed from a checkpoint at
# step 1 with the range added trains as the one that skipped from the
# start, bit for bit (deterministic), and so does dp 2; a bad range is
# refused by config check naming the key.
source "$(dirname "$0")/lib.sh"
S=(run.steps=5 run.deterministic=true optim.lr_schedule=constant optim.warmup_steps=0)

train straight "${S[@]}"
train skip "${S[@]}" data.skip_batches=2-3
grep -q "\[data\] skip_batches = 2-3: 2 batches never read; from step 2 on each step reads a later batch (step 2 reads step 4's)" \
  "$E2E_WORK/skip.out" || fail "the run did not say what it skips: $(grep -i skip "$E2E_WORK/skip.out")"
[ "$(column skip loss | sed -n 1p)" = "$(column straight loss | sed -n 1p)" ] || fail "step 1 did not read its own batch"
[ "$(column skip loss | sed -n 2p)" != "$(column straight loss | sed -n 2p)" ] || fail "step 2 read its own batch"

train resumed "${S[@]}" run.steps=1
train resumed "${S[@]}" data.skip_batches=2-3 --resume
same_losses skip resumed 0
train skip_dp2 -n 2 parallel.dp=2 "${S[@]}" data.skip_batches=2-3
same_losses skip skip_dp2 0

out=$("$PLAIT_BIN" config check "$CFG" data.skip_batches=3-2 2>&1) && fail "config check accepted skip_batches=3-2: $out"
grep -q "\[data\] skip_batches = 3-2: '3-2' is not a step N or a range A-B" <<<"$out" || fail "the refusal: $out"
echo "skip_batches: said, step 1 its own batch, later ones after; a resume adding it and dp 2 as a run skipping from the start"
