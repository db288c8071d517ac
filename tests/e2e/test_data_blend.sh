#!/usr/bin/env bash
# A weighted blend of datasets ([data] weights): the run names each
# dataset's share and training tokens once; the blend's batches are the
# layout's no more than plain data's (dp 2 in deterministic mode equals
# one process, bit for bit); a dataset of weight 0 is never read (a blend
# of weights 1 and 0 trains as the first dataset, and the data record
# differs from that dataset's alone only by the blend); a resume with other
# weights warns that the stream changed; a weight for each pattern or a
# clear refusal.
source "$(dirname "$0")/lib.sh"

letters=$E2E_WORK/letters.txt digits=$E2E_WORK/digits.txt
awk 'BEGIN { for (i = 0; i < 400; i++) print "the quick brown fox jumps over the lazy dog" }' >"$letters"
awk 'BEGIN { for (i = 0; i < 800; i++) printf "%d ", (i * 7919) % 10007 }' >"$digits"
S=(run.steps=6 run.deterministic=true run.ckpt_every=3 "data.path=$letters $digits")

train blend "${S[@]}" "data.weights=3 1"
grep -q "blend: dataset 1 of 2: 75.0% of the sequences, [0-9]* training tokens" "$E2E_WORK/blend.out" ||
  fail "the run did not name the blend's shares: $(grep -i blend "$E2E_WORK/blend.out")"
[ "$(grep -c 'blend: dataset' "$E2E_WORK/blend.out")" -eq 2 ] || fail "the blend was not named once a dataset"
train blend_dp2 -n 2 parallel.dp=2 "${S[@]}" "data.weights=3 1"
same_losses blend blend_dp2 0
[ "$(grep -c 'blend: dataset' "$E2E_WORK/blend_dp2.out")" -eq 2 ] || fail "two ranks named the blend twice"

# weight 0 on the digits: the letters' batches, as a run of the letters alone
# with the same validation tail (val_path keeps the split out of the blend)
V=(run.steps=4 run.deterministic=true "data.val_path=$letters")
train only "${V[@]}" "data.path=$letters"
train blend_only "${V[@]}" "data.path=$letters $digits" "data.weights=1, 0"
same_losses only blend_only 0

# other weights on resume: the stream changed, said with the step it takes over
train blend "${S[@]}" run.steps=8 "data.weights=1 1" --resume
grep -q "was trained on other data" "$E2E_WORK/blend.out" ||
  fail "a resume with other weights did not warn: $(tail -n 5 "$E2E_WORK/blend.out")"

refused() {
  local want=$1 out
  shift
  out=$("$PLAIT_BIN" config check "$CFG" "$@" 2>&1) && fail "config check accepted $*: $out"
  grep -qF -- "$want" <<<"$out" || fail "unclear refusal of $*: $out"
}
refused "command line 'data.weights=1': [data] weights = 1 gives 1 weight for 2 patterns of [data] path" \
  "data.path=$letters $digits" data.weights=1
refused "[data] weights = 1 half: 'half' is not a number >= 0" "data.path=$letters $digits" "data.weights=1 half"
refused "every weight is 0" "data.path=$letters $digits" "data.weights=0 0"
echo "blend: shares named, dp 2 = one process, weight 0 unread, other weights on resume warned, mistakes refused"
