#!/usr/bin/env bash
# Context parallelism ([parallel] cp): ring attention splits every sequence
# over cp ranks, 2 chunks each. Asserts, in float32:
# - a sequence of 1,024 on a small GPT (learned positions) and a small
#   Llama (rotary positions, grouped-query attention) trains at cp 2 and
#   cp 4 with the losses of cp 1 within 1e-5 (relative);
# - cp composes: dp 2 x cp 2 (dense gradients summed over dp x cp), with
#   ZeRO-1 and ZeRO-3 over that group, tp 2 x cp 2 (with and without
#   sequence parallelism, which splits each rank's rows of the two chunks
#   over tp; GPT and Llama), pp 2 x cp 2 under 1f1b and zb1, and full
#   recomputation each follow cp 1's curve within 1e-5;
# - each rank's activation memory (the model's activation bytes, as
#   memory.csv reports them) is cp 1's divided by cp, on every rank, and
#   its cp column is the rank's place on the ring;
# - deterministic mode: a dp 2 x cp 2 run repeats its bits;
# - a cp 2 checkpoint resumes in one process and continues cp 1's curve,
#   final parameters within 1e-5;
# - a checkpoint trained at another sequence length: a Llama's (rotary
#   positions) resumes at twice its length over cp 2; a GPT's resumes at a
#   shorter one (the first rows of its learned positions) and is refused
#   at a longer one before step 1, naming both lengths;
# - refused before any rank starts, naming the keys and what would work:
#   a block_size that does not split into 2cp chunks, cp with the mlp arch.
source "$(dirname "$0")/lib.sh"
LLAMA=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
S="run.steps=2 model.block_size=1024 data.global_batch=2 data.micro_batch=1 model.n_layer=1"
for c in 1 2 4; do
  train gpt_cp$c $S parallel.cp=$c
  CFG=$LLAMA train llama_cp$c $S parallel.cp=$c
done
act() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "activation_bytes") c = i; next } { print $c }' \
  "$E2E_WORK/$1/memory.csv"; }
for c in 2 4; do
  same_losses gpt_cp1 gpt_cp$c 1e-5
  same_losses llama_cp1 llama_cp$c 1e-5
  for m in gpt llama; do
    whole=$(act ${m}_cp1)
    [ "$(act ${m}_cp$c | wc -l)" = $c ] || fail "${m}_cp$c: memory.csv does not have $c ranks"
    for a in $(act ${m}_cp$c); do
      [ "$a" -gt 0 ] && [ $((a * c)) = "$whole" ] || fail "${m}_cp$c: a rank's activations $a bytes, not cp 1's $whole / $c"
    done
    # each rank's place on the ring, as memory.csv's cp column gives it
    cps=$(for r in $(seq 0 $((c - 1))); do mem ${m}_cp$c $r cp; done | sort -n | tr '\n' ' ')
    [ "$cps" = "$(seq -s ' ' 0 $((c - 1))) " ] || fail "${m}_cp$c: memory.csv's cp coordinates are '$cps'"
  done
done

A="run.steps=4 run.ckpt_every=2 optim.lr_decay_steps=4"
train one $A
train dpcp $A parallel.dp=2 parallel.cp=2
grep -q "^plait: layout dp=2 tp=1 pp=1 cp=2 (" "$E2E_WORK/dpcp.out" || fail "the layout line omits cp: $(grep layout "$E2E_WORK/dpcp.out")"
train zero1 $A parallel.dp=2 parallel.cp=2 optim.plugin=zero1
train zero3 $A parallel.dp=2 parallel.cp=2 optim.plugin=zero3
train tpcp $A parallel.plugin=hybrid parallel.tp=2 parallel.cp=2
train spcp $A parallel.plugin=hybrid parallel.tp=2 parallel.tp.sequence_parallel=true parallel.cp=2
CFG=$LLAMA train llama_one $A
CFG=$LLAMA train llama_spcp $A parallel.plugin=hybrid parallel.tp=2 parallel.tp.sequence_parallel=true parallel.cp=2
train ppcp $A parallel.plugin=hybrid parallel.pp=2 parallel.cp=2
train zb1cp $A parallel.plugin=hybrid parallel.pp=2 parallel.cp=2 parallel.pp.schedule=zb1
train rccp $A parallel.cp=2 model.recompute=full
for r in dpcp zero1 zero3 tpcp spcp ppcp zb1cp rccp; do
  same_losses one $r 1e-5
  same_params one $r 1e-5
done
same_losses llama_one llama_spcp 1e-5
same_params llama_one llama_spcp 1e-5

# deterministic mode: a dp 2 x cp 2 layout repeats its own bits
train det1 $A parallel.dp=2 parallel.cp=2 run.deterministic=true
train det2 $A parallel.dp=2 parallel.cp=2 run.deterministic=true
same_losses det1 det2 0
same_params det1 det2 bits

# a cp 2 checkpoint (full tensors) resumes in one process
train resumed $A parallel.cp=2 run.steps=2
train resumed $A --resume
grep -q "resuming from $E2E_WORK/resumed/ckpt-00000002" "$E2E_WORK/resumed.out" || fail "the cp 2 checkpoint was not resumed"
same_losses one resumed 1e-5
same_params one resumed 1e-5

# another sequence length
CFG=$LLAMA train llama_len run.steps=2
CFG=$LLAMA train llama_len run.steps=3 model.block_size=64 parallel.cp=2 --resume
grep -q "trained at block_size 32, at block_size 64 (rotary positions have no weights)" "$E2E_WORK/llama_len.out" ||
  fail "the llama checkpoint did not resume at block_size 64: $(cat "$E2E_WORK/llama_len.out")"
[ "$(column llama_len step | tr '\n' ' ')" = "1 2 3 " ] || fail "llama_len: steps $(column llama_len step)"
train gpt_short run.steps=2 model.block_size=64
train gpt_short run.steps=3 parallel.cp=2 --resume
grep -q "trained at block_size 64, at block_size 32 (the first rows of its learned positions)" \
  "$E2E_WORK/gpt_short.out" || fail "the gpt checkpoint did not resume at block_size 32"
train gpt_long run.steps=2
if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/gpt_long" run.steps=3 model.block_size=64 parallel.cp=2 --resume \
  >"$E2E_WORK/gpt_long.out" 2>&1; then fail "a gpt checkpoint of block_size 32 resumed at 64"; fi
grep -q "learned positions (transformer.wpe.weight) cover a sequence of 32 tokens (\[model\] block_size = 32 when it was trained), shorter than this run's block_size = 64" \
  "$E2E_WORK/gpt_long.out" || fail "gpt_long: $(cat "$E2E_WORK/gpt_long.out")"
[ "$(column gpt_long step | tr '\n' ' ')" = "1 2 " ] || fail "gpt_long trained past its checkpoint"

refused() { # EXPECTED overrides...
  local want=$1; shift
  if "$PLAIT_BIN" config check "$CFG" "$@" >"$E2E_WORK/out" 2>&1; then fail "config check accepted $*"; fi
  grep -q -- "$want" "$E2E_WORK/out" || fail "config check $*: $(cat "$E2E_WORK/out")"
  rm -rf "$E2E_WORK/run"
  if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/run" "$@" >"$E2E_WORK/out" 2>&1; then fail "trained with $*"; fi
  [ "$(grep -c -- "$want" "$E2E_WORK/out")" = 1 ] || fail "train $* did not say it once: $(cat "$E2E_WORK/out")"
  ! grep -q "step 1" "$E2E_WORK/out" || fail "train $* reached step 1: $(cat "$E2E_WORK/out")"
  [ ! -e "$E2E_WORK/run" ] || fail "train $* created its run directory"
}
refused "\[parallel\] cp = 4 holds each sequence as 2cp = 8 equal chunks, but \[model\] block_size = 36 does not split into 8; set block_size to a multiple of 8 (32 or 40)" \
  parallel.cp=4 model.block_size=36
refused "\[parallel\] cp = 2 splits each sequence's attention over a ring of ranks, and \[model\] arch = mlp has no attention to split; use arch gpt or llama, or cp = 1" \
  parallel.cp=2 model.arch=mlp
echo "context parallelism: cp 2 and 4 follow cp 1 at a sequence of 1,024 (gpt, llama), with dp, ZeRO, tp, pp, recompute; a cp checkpoint resumes in one process; bad layouts refused"
