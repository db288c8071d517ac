#!/usr/bin/env bash
# ZeRO-1 and ZeRO-2 as a distributed optimizer ([optim.zeroN] master) on a
# bf16 run at dp 2, on cuda_emu (the cuda plugin's own source on the CPU
# emulator: bf16 activations and the weights' bf16 copy), a 1-block tiny
# GPT and a 1-block tiny Llama, deterministic, 3 steps; asserts:
# - master = sharded (the default, auto, here) gives the bits of master =
#   whole with the same param_gather: the products read the same bf16
#   copy, the float32-read weights (norms, embeddings) the same values
#   (zero1 and zero2 with bf16 gathers; gpt's zero1 with float32 ones);
# - its param_bytes in memory.csv fall by the float32 weights of the
#   copied tensors (4 bytes each of what the copy holds 2);
# - the copied weights are gathered in bf16 (the rounding the copy takes,
#   elementwise): with float32 gathers set, a step's optimizer traffic is
#   the whole-master run's less 2 bytes of (N-1)/N of each copied element;
# - a run resumed from its checkpoint (which holds the float32 slices)
#   continues bit for bit, under zero2 as saved and under zero1 keeping
#   whole masters (the model's tensors and the losses);
# - its checkpoint exports (hf and nanogpt) to the bytes of the whole-master
#   run's, and resumed at dp 1 and dp 4 gives the bits of the whole-master
#   checkpoint resumed so;
# - master = sharded on a float32 run, and on the cpu device with one head
#   of 512 (float32 activations on a bf16 run: past the fused attention's
#   head size), is refused, naming the key and why, by
#   plait train and by plait config check in the same words (which
#   accepts it on the emulated GPU).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
A=(run.steps=3 run.eval_every=0 run.progress=off run.deterministic=true run.precision=bf16 data.global_batch=4
  data.micro_batch=1 model.n_layer=1 model.block_size=32 device.plugin=cuda_emu comm.plugin=tcp parallel.dp=2)
train_refused fp32_sharded "[optim.zero1] master = sharded: the model reads float32 weights on this run ([run] precision is not bf16)" \
  "${A[@]}" run.precision=fp32 optim.plugin=zero1 optim.zero1.master=sharded "run.out_dir=$E2E_WORK/fp32_sharded"
train_refused cpu_sharded "[optim.zero2] master = sharded: the model reads float32 weights on this run (its device or layout keeps float32 activations" \
  "${A[@]}" device.plugin=cpu run.debug_bf16_emulate=true model.n_embd=512 model.n_head=1 optim.plugin=zero2 \
  optim.zero2.master=sharded "run.out_dir=$E2E_WORK/cpu_sharded"
# check_refused NAME EXPECTED ARGS...: plait config check refuses, printing
# EXPECTED (before any rank starts: what train refuses, in its words)
check_refused() {
  local name=$1 want=$2; shift 2
  if "$PLAIT_BIN" config check "$CFG" "$@" >"$E2E_WORK/$name.check" 2>&1; then
    fail "$name: plait config check $* accepted it: $(tail -n 3 "$E2E_WORK/$name.check")"
  fi
  grep -qF -- "$want" "$E2E_WORK/$name.check" || fail "$name: unclear refusal: $(tail -n 3 "$E2E_WORK/$name.check")"
}
W="command line 'optim.zero1.master=sharded': [optim.zero1] master = sharded: the model reads float32 weights"
check_refused fp32_sharded "$W on this run ([run] precision is not bf16)" "${A[@]}" run.precision=fp32 \
  optim.plugin=zero1 optim.zero1.master=sharded
grep -qF -- "$W" "$E2E_WORK/fp32_sharded.out" || fail "train and config check refuse fp32_sharded in other words"
W="command line 'optim.zero2.master=sharded': [optim.zero2] master = sharded: the model reads float32 weights"
check_refused cpu_sharded "$W on this run (its device or layout keeps float32 activations" \
  "${A[@]}" device.plugin=cpu run.debug_bf16_emulate=true model.n_embd=512 model.n_head=1 optim.plugin=zero2 \
  optim.zero2.master=sharded
grep -qF -- "$W" "$E2E_WORK/cpu_sharded.out" || fail "train and config check refuse cpu_sharded in other words"
out=$("$PLAIT_BIN" config check "$CFG" "${A[@]}" optim.plugin=zero2 optim.zero2.master=sharded 2>&1) ||
  fail "config check refused sharded masters on the emulated GPU, where train keeps them: $out"
# both: MODEL STAGE GATHER, the two runs side by side, then compared
both() {
  local n=$1_$2_$3
  train ${n}_whole "${A[@]}" optim.plugin=$2 optim.$2.param_gather=$3 optim.$2.master=whole &
  train ${n}_sharded "${A[@]}" optim.plugin=$2 optim.$2.param_gather=$3 &
  joined
  same_params ${n}_whole ${n}_sharded bits
  same_losses ${n}_whole ${n}_sharded 0
  local w s
  w=$(mem ${n}_whole 0 param_bytes) s=$(mem ${n}_sharded 0 param_bytes)
  [ -n "$w" ] && [ -n "$s" ] && [ "$s" -lt "$w" ] ||
    fail "$1 $2 ($3 gathers): param_bytes $s with sharded masters, $w with whole ones (want fewer)"
  echo "$1 $2 ($3 gathers): the same bits; param_bytes $w whole, $s sharded"
  [ "$3" = fp32 ] || return 0
  # the copied weights (one block's 12C² + 7C, C = 128) gathered in bf16:
  # 2 bytes of (N-1)/N of each fewer a step than whole masters' float32
  local saved=$(((12 * 128 * 128 + 7 * 128) * 2 / 2))
  paste -d' ' <(column ${n}_whole optim_bytes) <(column ${n}_sharded optim_bytes) | awk -v s="$saved" '
    { n++; if ($1 - $2 != s) { printf "step %d: whole %d bytes, sharded %d: %d fewer, not %d\n", n, $1, $2, $1 - $2, s; bad = 1 } }
    END { exit n == 0 || bad }' || fail "$1 $2: the kept copies' gathers do not travel in bf16"
  echo "$1 $2: the kept copies gathered in bf16, $saved bytes a step fewer than float32 gathers"
}
both gpt zero1 bf16
both gpt zero2 bf16
both gpt zero1 fp32
# resumed from the float32 slices: the bits of the uninterrupted run
B=("${A[@]}" optim.plugin=zero2 optim.zero2.param_gather=bf16 run.ckpt_every=2)
train straight "${B[@]}" run.steps=4 &
train split "${B[@]}" run.steps=2 &
joined
train split_w "${B[@]}" optim.zero2.master=whole run.steps=2
# exported, its float32 slices are whole masters' bytes
for f in hf nanogpt; do
  for n in split split_w; do
    "$PLAIT_BIN" export "$E2E_WORK/$n" --format $f --out "$E2E_WORK/ex_${n}_$f" >"$E2E_WORK/ex_${n}_$f.out" 2>&1 ||
      fail "plait export --format $f of $n failed: $(tail -n 3 "$E2E_WORK/ex_${n}_$f.out")"
  done
  for x in model.safetensors config.json; do
    cmp "$E2E_WORK/ex_split_$f/$x" "$E2E_WORK/ex_split_w_$f/$x" ||
      fail "plait export --format $f: $x of sharded masters differs from that of whole ones"
  done
done
for n in split_whole split_dp1 split_dp4; do cp -r "$E2E_WORK/split" "$E2E_WORK/$n"; done
for n in split_w_dp1 split_w_dp4; do cp -r "$E2E_WORK/split_w" "$E2E_WORK/$n"; done
train split "${B[@]}" run.steps=4 --resume &
# and under another optimizer keeping whole masters (the same bits, above)
train split_whole "${A[@]}" optim.plugin=zero1 optim.zero1.param_gather=bf16 optim.zero1.master=whole \
  run.ckpt_every=2 run.steps=4 --resume &
joined
same_params straight split bits
same_params straight split_whole 0 model
same_losses straight split_whole 0
# resumed at dp 1 and dp 4, the bits of whole masters resumed so
for dp in 1 4; do
  train split_dp$dp "${B[@]}" parallel.dp=$dp run.steps=4 --resume &
  train split_w_dp$dp "${B[@]}" optim.zero2.master=whole parallel.dp=$dp run.steps=4 --resume &
  joined
  same_params split_w_dp$dp split_dp$dp bits
  same_losses split_w_dp$dp split_dp$dp 0
done
export CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
both llama zero1 bf16
both llama zero2 bf16
echo "sharded masters: bits of whole ones (gpt, llama; zero1, zero2), resumed bit for bit, refused on fp32"
