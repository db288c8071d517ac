#!/usr/bin/env bash
# Training on a GPU (label gpu):
#   test_gpu_training.sh                200 steps of gpt-tiny with device.plugin=cuda:
#     fp32 within 1e-4 relative of the cpu device's loss curve at every step,
#     bf16 within 2% (means over windows of 10 steps, as test_precision.sh
#     holds the CPU's bf16: single steps differ by up to ~3% there), two
#     bf16 runs in deterministic mode bit-identical
#     (every loss, and the final model and optimizer checkpoints byte for byte),
#     as is the run stopped halfway and resumed from its checkpoint,
#     and bf16 with a 4,096-token vocabulary, whose head runs in 4 chunks of
#     rows, within 2% of the cpu over one window.
#     Exits 77 (skipped, never passed) where no CUDA device is found.
#   test_gpu_training.sh selfcheck      the same comparisons with the sim test
#     device posing as the GPU on a few steps (no label, seconds), and proof
#     that each one fails when it must: a loss curve off by 2e-4 relative, one
#     off by 3% over a window and one step off by 7% for the 2% bound, NaNs, a
#     missing step, a loss differing in its last digit and a checkpoint
#     differing in one byte are all caught.
#     sim computes in fp32 only, so its "bf16" run is fp32 (the comparison is
#     what is checked here, not bf16 arithmetic).
#   test_gpu_training.sh emu            the GPU's checks, same bounds, on
#     cuda_emu, the cuda plugin's own source on the CPU emulator (tests/cuda_emu;
#     label cuda_emu): its kernels, memory and GEMM plumbing with real bf16
#     operand rounding and bf16 activations (the start-up line says so), no GPU. The emulator runs a GPU thread per element
#     (~40x slower than the cpu device), so: 20 steps of 2 sequences, bf16
#     windows of 5 steps, the second deterministic run the first window's
#     steps on the first run's schedule (optim.lr_decay_steps), its losses
#     and checkpoints bit-identical to the first run's at step 5.
#   test_gpu_training.sh MODE llama     the same for llama-tiny (RMSNorm,
#     rotary positions, SwiGLU, grouped-query attention: the cuda device's
#     Llama kernels): fp32 within 1e-4 of the cpu curve at each of its first
#     50 steps (llama-tiny's curve turns sensitive after that: two cpu runs
#     that differ only in OpenBLAS's kernels, Zen's and Sandybridge's, part
#     by 1.3e-6 up to step 55, 1.7e-4 at step 60 and 3.0e-3 at step 78, as
#     an H200's run did at step 78; the whole curve is logged), a bf16
#     run (bf16 activations: the Llama kernels' bf16 forms, core/model/
#     llama_bf16.c) within 2% over windows, two deterministic bf16 runs
#     bit-identical. On a GPU 100 steps; on the emulator 4 steps of
#     2 sequences of 96 tokens (two attention tiles), windows of 2 steps
#     (the second deterministic run 2 steps, as gpt's its first window);
#     and with q, k and v biases ([model] qkv_bias), head_dim 16 and q
#     and k norms ([model] qk_norm), fp32 within 1e-4 and bf16 within 2%
#     of the cpu's curve over those steps.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
MODE=${1:-gpu}
MODEL=${2:-gpt}
EXTRA=() # keys only the emulator run adds
case $MODEL in
  gpt) ;;
  llama) CFG=$PLAIT_SOURCE_DIR/configs/llama-tiny.ini ;;
  *) fail "usage: test_gpu_training.sh [gpu|selfcheck|emu] [gpt|llama]" ;;
esac

# max_rel NAME REF TOL [N]: every step's loss of run NAME (its first N
# steps where N is given) within TOL relative of run REF's (the CPU curve);
# prints the largest relative difference and its step. Fails on a NaN or
# infinite loss, a step count that differs, or no steps.
max_rel() {
  local n=${4:-}
  paste -d' ' <(column "$1" loss | head -n "${n:--0}") <(column "$2" loss | head -n "${n:--0}") | awk -v tol="$3" -v a="$1" -v b="$2" '
    function abs(x) { return x < 0 ? -x : x }
    NF != 2 { short = 1; next }
    { n++
      if ($1 !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ || $2 !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/) { bad = n; next }
      r = abs($1 - $2) / abs($2); if (r > worst || n == 1) { worst = r; at = n } }
    END {
      if (n == 0) { print "no steps"; exit 1 }
      if (short) { printf "%s and %s have different numbers of steps\n", a, b; exit 1 }
      if (bad) { printf "step %d: a loss is not a finite number\n", bad; exit 1 }
      printf "%s vs %s: %d steps, max relative loss difference %.3e at step %d (bound %s)\n", a, b, n, worst, at, tol
      exit worst > tol }'
}

# window_rel NAME REF TOL W: the loss curve as means over windows of W steps
# (one step's loss is one batch's noise), each within TOL relative of REF's
# (as tests/e2e/test_precision.sh defines bf16's 2% on the CPU); prints the
# largest difference. Fails on a non-number, unequal lengths or no window.
window_rel() {
  paste -d' ' <(column "$1" loss) <(column "$2" loss) | awk -v tol="$3" -v w="$4" -v a="$1" -v b="$2" '
    function abs(x) { return x < 0 ? -x : x }
    NF != 2 { short = 1; next }
    $1 !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ || $2 !~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ { bad = NR; next }
    { x += $1; y += $2; n++ }
    n == w { k++; r = abs(x - y) / abs(y); if (r > worst || k == 1) { worst = r; at = k } x = y = n = 0 }
    END {
      if (short) { printf "%s and %s have different numbers of steps\n", a, b; exit 1 }
      if (bad) { printf "step %d: a loss is not a finite number\n", bad; exit 1 }
      if (k == 0) { print "no complete window of " w " steps"; exit 1 }
      printf "%s vs %s: %d windows of %d steps, largest relative difference of the means %.3e (steps %d-%d; bound %s)\n", a, b, k, w, worst, (at - 1) * w + 1, at * w, tol
      exit worst > tol }'
}

# bit_identical A B N: B ran steps 1..N, and each of its losses was printed
# the same as A's at that step; its final model and optimizer checkpoints
# equal A's at step N byte for byte (cmp). A may run longer on the same
# schedule (optim.lr_decay_steps), a checkpoint at step N among its own.
bit_identical() {
  local n=$3 f
  [ "$(column "$2" step | tr '\n' ' ')" = "$(seq -s ' ' 1 "$n") " ] || { echo "$2 did not run steps 1..$n once each"; return 1; }
  cmp -s <(column "$1" loss | head -n "$n") <(column "$2" loss) || { echo "losses of $1 and $2 differ"; return 1; }
  for f in model.safetensors optim.safetensors; do
    cmp "$E2E_WORK/$1/$(printf 'ckpt-%08d' "$n")/$f" "$(last_ckpt "$2")/$f" || { echo "$f of $1 and $2 differ"; return 1; }
  done
  echo "$1 and $2: $n losses and both checkpoints bit-identical"
}

# expect_fail WHAT CMD...: CMD must fail (a check that cannot fail proves nothing).
expect_fail() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then fail "self-check: $what was not caught: $out"; fi
  echo "caught as it must be: $what ($(tail -n 1 <<<"$out"))"
}

# fake NAME FROM AWK: a copy of run FROM whose metrics.csv rows (not the
# header) are rewritten by the awk program AWK (the loss is column $c).
fake() {
  rm -rf "${E2E_WORK:?}/$1"
  cp -r "$E2E_WORK/$2" "$E2E_WORK/$1"
  awk -F, -v OFS=, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; print; next } '"$3" \
    "$E2E_WORK/$2/metrics.csv" >"$E2E_WORK/$1/metrics.csv"
}

if [ "$MODE" = selfcheck ]; then
  DEV=sim STEPS=6 FP=fp32 LOW=fp32 WIN=3
elif [ "$MODE" = emu ]; then
  DEV=cuda_emu STEPS=20 FP=fp32 LOW=bf16 WIN=5 EXTRA=(data.global_batch=2)
else
  [ "$MODE" = gpu ] || fail "usage: test_gpu_training.sh [selfcheck|emu]"
  line=$("$PLAIT_BIN" plugins 2>&1 | grep -A1 -E '^device +cuda ' || true)
  [ -n "$line" ] || { echo "SKIP: the cuda device plugin is not built"; exit 77; }
  case "$line" in *" available "*) ;; *) echo "SKIP: no CUDA device: $(sed -n 2p <<<"$line" | sed 's/^ *-> *//')"; exit 77 ;; esac
  DEV=cuda STEPS=200 FP=fp32 LOW=bf16 WIN=10
fi
FPN=$STEPS # the steps fp32 is held to 1e-4 at
if [ "$MODEL" = llama ]; then
  [ "$MODE" != selfcheck ] || fail "the self-check is the gpt arch's"
  if [ "$MODE" = emu ]; then STEPS=4 WIN=2 FPN=4 EXTRA=(data.global_batch=2 model.block_size=96); else STEPS=100 FPN=50; fi
fi
# The second deterministic run's steps (BIT): on the emulator its first
# window of steps, on the same schedule as the first run's (lr_decay_steps),
# compared with the first run's checkpoint at that step; elsewhere every step.
BIT=$STEPS
[ "$MODE" = emu ] && BIT=$WIN
S=("run.steps=$STEPS" run.eval_every=0 "run.ckpt_every=$STEPS" run.progress=off "${EXTRA[@]}")
L=(run.eval_every=0 "run.ckpt_every=$BIT" "run.keep_checkpoints=$((STEPS / BIT + 1))" run.progress=off "${EXTRA[@]}"
  "optim.lr_decay_steps=$STEPS" device.plugin=$DEV run.precision=$LOW run.deterministic=true)
# one-process runs side by side (the emulator's run on one core; the cpu
# device's take a fraction of its time): each deterministic run beside
# others also shows they do not depend on what else the machine runs
train cpu "${S[@]}" device.plugin=cpu run.precision=fp32 &
train dev_fp32 "${S[@]}" device.plugin=$DEV run.precision=$FP &
train dev_low_a "${L[@]}" "run.steps=$STEPS" &
joined
train dev_low_b "${L[@]}" "run.steps=$BIT" &
# the same run stopped at HALF (its checkpoint there) and resumed to BIT
HALF=$(((BIT + 1) / 2))
train dev_low_r "${L[@]}" "run.steps=$HALF" "run.ckpt_every=$HALF" &
# bf16 activations compute the head a chunk of rows at a time (gpt_bf16.c):
# a vocabulary of 4,096 leaves 128-wide rows room for 64 logit rows a chunk,
# so the 2 x 128 rows of a micro-batch take 4 chunks
CHUNKS=
if [ "$LOW" = bf16 ] && [ "$MODEL" = gpt ]; then
  CHUNKS=1
  C=("run.steps=$WIN" run.eval_every=0 "run.ckpt_every=$WIN" run.progress=off "${EXTRA[@]}" model.vocab_size=4096
    data.global_batch=2)
  train cpu_chunks "${C[@]}" device.plugin=cpu run.precision=fp32 &
  train dev_chunks "${C[@]}" device.plugin=$DEV run.precision=bf16 &
fi
joined
# a bf16 run on the cuda device stores its activations in bf16 (the
# model's bf16 path, not float32 activations with converted operands), the
# llama arch's too (docs/models.md)
if [ "$LOW" = bf16 ]; then
  grep -q '^plait: activations bf16' "$E2E_WORK/dev_low_a.out" ||
    fail "the $DEV bf16 run kept float32 activations: $(grep 'activations' "$E2E_WORK/dev_low_a.out")"
fi
[ "$FPN" = "$STEPS" ] || max_rel dev_fp32 cpu 1 || true # for the log: the whole curve
max_rel dev_fp32 cpu 1e-4 "$FPN" || fail "$DEV $FP is not within 1e-4 of the cpu loss curve over $FPN steps"
max_rel dev_low_a cpu 1 || true # for the log: single steps of bf16 differ by up to ~3% on the CPU
window_rel dev_low_a cpu 2e-2 "$WIN" || fail "$DEV $LOW is not within 2% of the cpu loss curve (means of $WIN steps)"
bit_identical dev_low_a dev_low_b "$BIT" || fail "two $DEV $LOW runs in deterministic mode differ"
train dev_low_r "${L[@]}" "run.steps=$BIT" "run.ckpt_every=$HALF" --resume
grep -q "resuming from .*ckpt-$(printf %08d "$HALF")" "$E2E_WORK/dev_low_r.out" || fail "dev_low_r did not resume from step $HALF"
bit_identical dev_low_a dev_low_r "$BIT" ||
  fail "a $DEV $LOW run stopped at step $HALF and resumed from its checkpoint differs from the uninterrupted run"
if [ "$MODEL" = llama ] && [ "$MODE" != selfcheck ]; then
  # q, k and v biases (Qwen2's, [model] qkv_bias) with heads of their own
  # size (head_dim 16 where n_embd / n_head is 32) and q and k norms
  # (Qwen3's, [model] qk_norm): the device's bias entries, and its RMSNorm
  # and copy_rows on the heads, in the fp32 and bf16 Llama blocks, against
  # the cpu's curve
  Q=("run.steps=$FPN" run.eval_every=0 "run.ckpt_every=$FPN" run.progress=off "${EXTRA[@]}" model.qkv_bias=true
    model.head_dim=16 model.qk_norm=true)
  train cpu_qb "${Q[@]}" device.plugin=cpu run.precision=fp32 &
  train dev_qb "${Q[@]}" device.plugin=$DEV run.precision=$FP &
  train dev_qb_low "${Q[@]}" device.plugin=$DEV run.precision=$LOW &
  joined
  max_rel dev_qb cpu_qb 1e-4 || fail "$DEV $FP with qkv_bias and qk_norm is not within 1e-4 of the cpu loss curve"
  window_rel dev_qb_low cpu_qb 2e-2 "$WIN" ||
    fail "$DEV $LOW with qkv_bias and qk_norm is not within 2% of the cpu loss curve"
fi
if [ -n "$CHUNKS" ]; then
  grep -q "^plait: activations bf16 .*the head's logits 64 rows at a time (4 chunks)" "$E2E_WORK/dev_chunks.out" ||
    fail "the head did not run in 4 chunks: $(grep 'activations' "$E2E_WORK/dev_chunks.out")"
  window_rel dev_chunks cpu_chunks 2e-2 "$WIN" || fail "$DEV bf16 with the head in chunks is not within 2% of the cpu"
fi

if [ "$MODE" = selfcheck ]; then
  # shellcheck disable=SC2016 # awk programs: $c is awk's
  fake off2e4 dev_fp32 '{ if (NR == 4) $c = $c * (1 + 2e-4); print }'
  expect_fail "a curve 2e-4 off at one step (1e-4 bound)" max_rel off2e4 cpu 1e-4
  expect_fail "a curve 2e-4 off at the last of the steps compared" max_rel off2e4 cpu 1e-4 3
  max_rel off2e4 cpu 1e-4 2 >/dev/null || fail "self-check: a step past the steps compared was held to the bound"
  # shellcheck disable=SC2016
  fake off3pc dev_low_a '{ if (NR >= 5) $c = $c * 1.03; print }'
  expect_fail "a curve 3% off over a window (2% bound on the means)" window_rel off3pc cpu 2e-2 "$WIN"
  # shellcheck disable=SC2016
  fake spike dev_low_a '{ if (NR == 3) $c = $c * 1.07; print }'
  expect_fail "one step 7% off (a window's mean 2.3% off)" window_rel spike cpu 2e-2 "$WIN"
  # shellcheck disable=SC2016
  fake wnan dev_low_a '{ if (NR == 2) $c = "-nan"; print }'
  expect_fail "a NaN in the windowed curve" window_rel wnan cpu 2e-2 "$WIN"
  # shellcheck disable=SC2016
  fake nan dev_fp32 '{ if (NR == 2) $c = "nan"; print }'
  expect_fail "a NaN loss" max_rel nan cpu 1e-4
  fake short dev_fp32 'NR < 4 { print }'
  expect_fail "a missing step" max_rel short cpu 1e-4
  # shellcheck disable=SC2016
  fake digit dev_low_b '{ if (NR == 5) $c = $c "1"; print }'
  expect_fail "one loss differing in an added last digit" bit_identical dev_low_a digit "$BIT"
  rm -rf "${E2E_WORK:?}/byte" && cp -r "$E2E_WORK/dev_low_b" "$E2E_WORK/byte"
  f=$(last_ckpt byte)/optim.safetensors
  size=$(stat -c %s "$f")
  byte=$(od -An -tu1 -j $((size - 3)) -N1 "$f")
  printf '%b' "\\x$(printf %02x $(((byte + 1) % 256)))" | dd of="$f" bs=1 seek=$((size - 3)) conv=notrunc status=none
  expect_fail "an optimizer checkpoint differing in one byte" bit_identical dev_low_a byte "$BIT"
  echo "self-check: the comparisons pass on sim ($STEPS steps) and catch every wrong curve"
else
  echo "$DEV $MODEL: $STEPS steps, fp32 within 1e-4 over the first $FPN, and bf16 within 2% ($WIN-step means) of the cpu curve; two deterministic bf16 runs, and one stopped at step $HALF and resumed, bit-identical"
fi
