#!/usr/bin/env bash
# [data] sampling = epochs: the run says how long an epoch is; its batches
# are the layout's no more than random sampling's (dp 2 in deterministic
# mode equals one process, bit for bit) and differ from random sampling's;
# a resume with random sampling warns that the stream changed; beside a
# blend it is refused before anything runs, naming both keys.
source "$(dirname "$0")/lib.sh"
S=(run.steps=6 run.deterministic=true run.ckpt_every=3 data.sampling=epochs)

train epochs "${S[@]}"
grep -q "epochs of [0-9]* sequences of [0-9]* tokens: [0-9.e+]* steps an epoch" "$E2E_WORK/epochs.out" ||
  fail "the run did not say how long an epoch is: $(grep -i epoch "$E2E_WORK/epochs.out")"
train epochs_dp2 -n 2 parallel.dp=2 "${S[@]}"
same_losses epochs epochs_dp2 0
train random "${S[@]}" data.sampling=random
[ "$(column epochs loss | sed -n 1p)" != "$(column random loss | sed -n 1p)" ] ||
  fail "epoch sampling trained on random sampling's batches"

train epochs "${S[@]}" run.steps=8 data.sampling=random --resume
grep -q "was trained on other data" "$E2E_WORK/epochs.out" ||
  fail "a resume with random sampling did not warn: $(tail -n 5 "$E2E_WORK/epochs.out")"

out=$("$PLAIT_BIN" config check "$CFG" data.sampling=epochs "data.path=data/corpus.txt data/corpus.txt" \
  "data.weights=1 1" 2>&1) && fail "config check accepted epochs beside a blend: $out"
grep -q "\[data\] sampling = epochs (command line 'data.sampling=epochs') beside a blend" <<<"$out" || fail "the refusal: $out"
echo "epochs: named, the layout's no more, not random sampling's; a resume with random warned; a blend refused"
