#!/usr/bin/env bash
# [model] recompute: selective and full give losses, gradient
# norms and final parameters and optimizer state bit-identical to none over
# 20 steps in fp32, in one process, in dp 2 x tp 2 x pp 2 (1f1b, 4
# micro-batches per replica in flight) and in dp 2 x pp 2 with ZeRO-3 and
# the interleaved schedule (4 blocks, 2 chunks per stage); memory.csv's activation bytes
# shrink from none to selective to full on every rank holding blocks (never
# grow on the others); a bad value is a
# config error naming the allowed ones.
source "$(dirname "$0")/lib.sh"
S="run.steps=20 run.ckpt_every=0"
D3="$S parallel.plugin=hybrid parallel.dp=2 parallel.tp=2 parallel.pp=2 data.micro_batch=1"
Z3="$S model.n_layer=4 parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 parallel.pp.schedule=interleaved
    parallel.pp.virtual_stages=2 data.micro_batch=1 optim.plugin=zero3"
for mode in none selective full; do
  train "one_$mode" $S model.recompute=$mode
  train "d3_$mode" $D3 model.recompute=$mode
  train "z3_$mode" $Z3 model.recompute=$mode
done
for mode in selective full; do
  for lay in one d3 z3; do
    same_losses "${lay}_none" "${lay}_$mode" 0
    [ "$(column "${lay}_none" grad_norm)" = "$(column "${lay}_$mode" grad_norm)" ] ||
      fail "$lay: gradient norms of recompute=$mode differ from none"
    same_params "${lay}_none" "${lay}_$mode" bits
  done
done
for lay in one d3 z3; do
  case $lay in one) ranks=1 ;; d3) ranks=8 ;; z3) ranks=4 ;; esac
  for ((r = 0; r < ranks; r++)); do
    n=$(mem ${lay}_none $r activation_bytes); s=$(mem ${lay}_selective $r activation_bytes)
    f=$(mem ${lay}_full $r activation_bytes)
    awk -v n="$n" -v s="$s" -v f="$f" 'BEGIN { exit !(n >= s && s >= f) }' ||
      fail "$lay rank $r: activation bytes none $n, selective $s, full $f (want decreasing)"
    [ "$(mem ${lay}_none $r pp)" != 0 ] || awk -v n="$n" -v s="$s" -v f="$f" 'BEGIN { exit !(n > s && s > f) }' ||
      fail "$lay rank $r (first stage, holds blocks): activation bytes none $n, selective $s, full $f"
  done
done
echo "one process activation bytes: none $(mem one_none 0 activation_bytes) selective $(mem one_selective 0 activation_bytes) full $(mem one_full 0 activation_bytes)"
out=$("$PLAIT_BIN" config check "$CFG" model.recompute=some 2>&1) && fail "model.recompute=some was accepted"
grep -q "recompute" <<<"$out" && grep -q "none" <<<"$out" && grep -q "selective" <<<"$out" ||
  fail "model.recompute=some: unclear error: $out"
echo "recompute OK"
