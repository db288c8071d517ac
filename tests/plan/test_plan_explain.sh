#!/usr/bin/env bash
# Every row of `plait plan`'s table, passed back as `--explain "LAYOUT"`
# (the layout as the row names it), gives the row's figures: the same
# tokens/s (the step time, to the token) and the same memory of the rank
# needing the most (to the table's 0.1 MiB). The config asks for selective
# recomputation, so a row that left out "none" would be explained with the
# config's mode instead and differ. A GPU cluster file keeps the figures
# independent of this machine; bf16 and fp32, with and without a pipeline,
# every optimizer. [parallel] order moves the tp group onto the network.
# [model] recompute_offload = host: the rows' figures too, and --explain's
# line for the copies to host memory and back, in the step time.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
W=$E2E_WORK
CFG=$PLAIT_SOURCE_DIR/configs/gpt-small.ini
CL=$PLAIT_SOURCE_DIR/configs/clusters/dgx-a100.ini

check() { # NAME RANKS OVERRIDES...
  local name=$1 ranks=$2; shift 2
  "$PLAIT_BIN" plan "$CFG" --ranks "$ranks" --cluster "$CL" --top all "$@" >"$W/$name.out" \
    2>"$W/$name.err" || fail "plan $name: $(cat "$W/$name.out" "$W/$name.err")"
  local rows=0 layout tokens mem got
  # a row: rank, the layout's words, tokens/s, 7 columns, mem_MiB, fits
  while IFS=$'\t' read -r layout tokens mem; do
    rows=$((rows + 1))
    "$PLAIT_BIN" plan "$CFG" --ranks "$ranks" --cluster "$CL" --explain "$layout" "$@" >"$W/explain.out" \
      2>"$W/explain.err" || fail "$name: --explain '$layout': $(cat "$W/explain.out" "$W/explain.err")"
    got=$(sed -nE 's/^step .*: ([0-9]+) tokens\/s .*/\1/p' "$W/explain.out")
    [ "$got" = "$tokens" ] || fail "$name: '$layout': the table says $tokens tokens/s, --explain $got"
    got=$(sed -nE 's/^memory of the rank needing the most: .* GiB \(([0-9.]+) MiB\).*/\1/p' "$W/explain.out")
    [ "$got" = "$mem" ] || fail "$name: '$layout': the table says $mem MiB, --explain $got"
  done < <(awk '/^  [0-9]+ / { l = $2; for (i = 3; i <= NF - 10; i++) l = l " " $i; print l "\t" $(NF - 9) "\t" $(NF - 1) }' \
             "$W/$name.out")
  [ "$rows" -ge 20 ] || fail "$name: only $rows rows in the table: $(cat "$W/$name.out")"
  echo "$name: $rows rows, each explained with the table's figures"
}

check bf16 4 --micro_batch 2 --optim adam,zero1 model.recompute=selective run.precision=bf16
check fp32 2 --micro_batch 1 model.recompute=full run.precision=fp32
# full recomputation's kept inputs in host memory: every row explained
# with its figures, and a layout's step longer by the copies --explain
# names: 2 x 4 micro-batches x 9 boundaries of 256 x 256 floats a step,
# 18,874,368 bytes at dgx-a100's host_bandwidth (25 GB/s): 0.0008 s
check offload 4 --micro_batch 1,2 model.recompute=full model.recompute_offload=host
OFF=(--explain "dp2 tp1 pp1 mb1 adam full" model.recompute=full)
"$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$CL" "${OFF[@]}" model.recompute_offload=host >"$W/off.out" 2>&1 ||
  fail "explain with offload: $(cat "$W/off.out")"
"$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$CL" "${OFF[@]}" >"$W/on.out" 2>&1 || fail "explain: $(cat "$W/on.out")"
grep -q "^  OFF the blocks' kept inputs to host memory and back (\[model\] recompute_offload): 0.02 GiB a step .*, 0.0008 s on the critical path" \
  "$W/off.out" || fail "no OFF line of 0.0008 s: $(cat "$W/off.out")"
grep -q "^  offloaded .* GiB of host memory, the blocks' kept inputs" "$W/off.out" || fail "no host memory line: $(cat "$W/off.out")"
! grep -q "OFF\|blocks' kept inputs" "$W/on.out" || fail "offload lines without the key: $(cat "$W/on.out")"
t_off=$(sed -nE 's/^step .*: ([0-9]+) tokens\/s .*/\1/p' "$W/off.out") t_on=$(sed -nE 's/^step .*: ([0-9]+) tokens\/s .*/\1/p' "$W/on.out")
[ "$t_off" -lt "$t_on" ] || fail "offloaded $t_off tokens/s, not below $t_on"
echo "offload: the copies 0.0008 s a step on the critical path, $t_off tokens/s against $t_on"
# an explicit partition ([parallel.pp] stages): the pipelines of its 8
# chunks predicted with it, as the pp plugin runs them (the others set aside)
check stages 8 --micro_batch 1 --pp 2,4 parallel.pp.stages=0-2,3,4,5,6,7,8,9
grep -q 'pp4 interleaved v2' "$W/stages.out" || fail "stages: no pp 4 x 2 chunks row: $(cat "$W/stages.out")"
if grep -E '^  [0-9]+ ' "$W/stages.out" | grep -qE ' pp4 (1f1b|gpipe|zb1|interleaved v4)'; then
  fail "stages: a pipeline of other than 8 chunks is in the table: $(cat "$W/stages.out")"
fi

# The stage table's layers are the plan's: stage s of p holds chunks s,
# s + p, ... of the partition the pp plugin logs (`plait config check`),
# the balanced one and an explicit [parallel.pp] stages alike, so the
# column can be pasted back as that key's ranges.
layers() { # NAME OVERRIDES...
  local name=$1; shift
  "$PLAIT_BIN" config check "$CFG" parallel.plugin=hybrid parallel.dp=1 parallel.tp=2 parallel.pp=4 \
    parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2 data.micro_batch=1 data.global_batch=8 "$@" >"$W/$name.check" 2>&1 || fail "config check $name: $(cat "$W/$name.check")"
  local part
  part=$(sed -nE 's/.*partition of layers ([0-9,-]+);.*/\1/p' "$W/$name.check" | head -n 1)
  [ -n "$part" ] || fail "$name: no partition in: $(cat "$W/$name.check")"
  "$PLAIT_BIN" plan "$CFG" --ranks 8 --cluster "$CL" --explain "dp1 tp2 pp4 interleaved v2 mb1 adam none" \
    data.global_batch=8 "$@" >"$W/$name.out" 2>&1 || fail "explain $name: $(cat "$W/$name.out")"
  local chunks s want got
  IFS=, read -r -a chunks <<<"$part"
  [ "${#chunks[@]}" = 8 ] || fail "$name: partition '$part' is not 8 chunks"
  for s in 0 1 2 3; do
    want="${chunks[$s]},${chunks[$((s + 4))]}"
    got=$(awk -v s="$s" '/^  stage +params/ { t = 1; next } t && $1 == s { print $7; exit }' "$W/$name.out")
    [ "$got" = "$want" ] || fail "$name: stage $s holds '$got' by --explain, '$want' by the plugin ($part): $(cat "$W/$name.out")"
  done
  echo "$name: --explain's stages hold the plugin's partition $part"
}
layers balanced
layers explicit parallel.pp.stages=0-2,3,4,5,6,7,8,9

# [parallel] order places the groups: on two DGX A100s, tp 8 fills a node
# (NVLink) by default, and order dp,tp,pp spreads it over both (the
# network) while dp 2 sits on one node
CL2=$PLAIT_SOURCE_DIR/configs/clusters/dgx-a100-2node.ini
for order in tp,dp,pp dp,tp,pp; do
  "$PLAIT_BIN" plan "$CFG" --ranks 16 --cluster "$CL2" --explain "dp2 tp8 pp1 mb1 adam none" data.global_batch=16 \
    parallel.order=$order >"$W/order-$order.out" 2>&1 || fail "explain order $order: $(cat "$W/order-$order.out")"
done
grep -q '^  TP  8 ranks on nvlink' "$W/order-tp,dp,pp.out" || fail "order tp,dp,pp: $(grep '  TP' "$W/order-tp,dp,pp.out")"
grep -q '^  TP  8 ranks on infiniband' "$W/order-dp,tp,pp.out" || fail "order dp,tp,pp: $(grep '  TP' "$W/order-dp,tp,pp.out")"
echo "order: tp on NVLink by default, on the network under dp,tp,pp"

# The training time under the table and under --explain: the tokens
# (--tokens, with its suffix, or the config's steps x batch x block) over
# the tokens/s the layout's own line gives, to the table's 3 figures.
"$PLAIT_BIN" plan "$CFG" --ranks 4 --cluster "$CL" --top 1 --tokens 2.5B >"$W/tokens.out" 2>&1 ||
  fail "plan --tokens: $(cat "$W/tokens.out")"
best=$(awk '/^  1 / { print $(NF - 9) }' "$W/tokens.out")
line=$(grep '^training ' "$W/tokens.out") || fail "no training time under the table: $(cat "$W/tokens.out")"
want=$(awk -v t="$best" 'BEGIN { printf "%.3g", 2.5e9 / t / 86400 }')
grep -q "^training 2.5e+09 tokens (--tokens) at the best layout's $best tokens/s: .* = $want days on 4 ranks" <<<"$line" ||
  fail "--tokens 2.5B at $best tokens/s is $want days: $line"
"$PLAIT_BIN" plan "$CFG" --ranks 4 --cluster "$CL" --explain "dp4 tp1 pp1 mb1 adam none" >"$W/run.out" 2>&1 ||
  fail "explain: $(cat "$W/run.out")"
grep -q '^training [0-9.e+]* tokens (\[run\] steps = [0-9]* of [0-9]* sequences of [0-9]* tokens) at its ' "$W/run.out" ||
  fail "--explain without --tokens: $(grep '^training' "$W/run.out")"
out=$("$PLAIT_BIN" plan "$CFG" --ranks 4 --tokens 3X 2>&1) && fail "--tokens 3X was taken: $out"
grep -q "tokens takes a number of tokens, with K, M, B or T after it" <<<"$out" || fail "--tokens 3X: $out"
echo "training time: --tokens 2.5B is $want days at the best layout's $best tokens/s; the config's run under --explain"
# a config's gpipe over 2 chunks a stage (train runs it) is weighed as gpipe
# of one chunk, and the plan says so rather than passing it off as train's
out=$("$PLAIT_BIN" plan "$CFG" --ranks 4 --cluster "$CL" --top 1 parallel.pp=2 parallel.pp.schedule=gpipe \
  parallel.pp.virtual_stages=2 2>&1) || fail "plan of a looped gpipe: $out"
grep -qF "note: [parallel.pp] schedule = gpipe with virtual_stages = 2 runs 2 chunks a stage; the planner weighs gpipe with one chunk a stage" <<<"$out" ||
  fail "a looped gpipe planned without a word: $(head -n 3 <<<"$out")"
echo "looped gpipe: said to be weighed as gpipe of one chunk a stage"
