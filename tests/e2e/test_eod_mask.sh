#!/usr/bin/env bash
# [data] eod_mask_loss: masking after a token the data never holds (0 in
# text) trains bit for bit as without the key (the same normalisation);
# masking after each newline (10) trains otherwise, the same on dp 2 and
# pp 2 as on one process, bit for bit (deterministic), and beside a
# mixture of experts; without a real eod_token it is refused, naming both
# keys.
source "$(dirname "$0")/lib.sh"
S=(run.steps=4 run.deterministic=true)

train plain "${S[@]}"
train never "${S[@]}" data.eod_mask_loss=true data.eod_token=0
same_losses plain never 0
train lines "${S[@]}" data.eod_mask_loss=true data.eod_token=10
[ "$(column lines loss | sed -n 1p)" != "$(column plain loss | sed -n 1p)" ] || fail "masking after newlines changed no loss"
train lines_dp2 -n 2 parallel.dp=2 "${S[@]}" data.eod_mask_loss=true data.eod_token=10
same_losses lines lines_dp2 0
train lines_pp2 -n 2 parallel.pp=2 parallel.plugin=hybrid "${S[@]}" data.eod_mask_loss=true data.eod_token=10
same_losses lines lines_pp2 0
train moe "${S[@]}" model.moe_experts=4 model.moe_top_k=2 data.eod_mask_loss=true data.eod_token=10

out=$("$PLAIT_BIN" config check "$CFG" data.eod_mask_loss=true 2>&1) && fail "config check accepted eod_mask_loss without eod_token: $out"
grep -q "\[data\] eod_mask_loss = true leaves out the target after each \[data\] eod_token, but .*eod_token = -1 is no token" \
  <<<"$out" || fail "the refusal: $out"
echo "eod_mask_loss: a token never seen changes nothing; newlines masked, the same on dp 2 and pp 2; refused without a token"
