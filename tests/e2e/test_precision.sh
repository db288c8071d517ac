#!/usr/bin/env bash
# [run] precision on the CPU: bf16 (operands rounded to bf16, fp32
# accumulation and master weights) follows fp32's loss curve within 2% over
# 200 steps of gpt-tiny (10-step means); bf16 on a CPU without AVX512_BF16/AMX_BF16 is
# refused naming the missing feature and the config line (forced here with
# the hidden debug_cpu_hide switch, so it holds on any machine); tf32 is
# refused on the CPU; a bad feature name is an error.
source "$(dirname "$0")/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini

# refusals, from a config file line and from the command line
ini=$E2E_WORK/bf16.ini
sed 's/^seed = 1337 .*/seed = 1337\nprecision = bf16 ; the mode under test/' "$CFG" >"$ini"
line=$(grep -n '^precision = bf16' "$ini" | cut -d: -f1)
[ -n "$line" ] || fail "could not write $ini"
refused() { # refused NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2; shift 2
  if "$PLAIT_BIN" train "$@" "run.out_dir=$E2E_WORK/$name" >"$E2E_WORK/$name.out" 2>&1; then
    fail "$name: ran instead of being refused"
  fi
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: no '$want' in: $(cat "$E2E_WORK/$name.out")"
  [ ! -e "$E2E_WORK/$name/metrics.csv" ] || fail "$name: trained a step before refusing"
}
refused nobf16 "$ini:$line: key 'precision' in [run]: bf16 needs a CPU with AVX512_BF16 or AMX_BF16" \
  "$ini" run.debug_cpu_hide=avx512_bf16,amx_bf16
refused nobf16_dp "$ini:$line: key 'precision' in [run]: bf16 needs a CPU with AVX512_BF16 or AMX_BF16" \
  "$ini" run.debug_cpu_hide=AVX512,amx_bf16 parallel.dp=2
refused tf32 "key 'precision' in [run]: tf32 is TensorFloat-32" "$CFG" run.precision=tf32
refused badhide "key 'debug_cpu_hide' in [run]: 'sse9' is not a CPU feature" "$CFG" run.precision=bf16 \
  run.debug_cpu_hide=avx2,sse9

# the bf16 numbers (emulated where the CPU lacks the instructions) against fp32
S="run.steps=200 run.eval_every=0 run.ckpt_every=0 run.progress=off"
# (side by side: each alone keeps 2 cores only partly busy at this size)
train fp32 $S &
train bf16 $S run.precision=bf16 run.debug_bf16_emulate=true &
joined
grep -q "precision bf16" "$E2E_WORK/bf16.out" || fail "bf16 run does not say so: $(cat "$E2E_WORK/bf16.out")"
# the curve: means over windows of 10 steps (one step's loss is one batch's
# noise: single steps differ by up to ~2% here) agree within 2%
within_2pct() { # within_2pct A B: A's and B's 10-step mean losses
  paste -d' ' <(column "$1" loss) <(column "$2" loss) | awk -v a="$1" -v b="$2" '
    { x += $1; y += $2; n++ }
    n == 10 { w++; d = (y - x) / x; if (d < 0) d = -d; if (d > 0.02) { printf "steps %d-%d: %s mean %.4f, %s %.4f\n", 10 * w - 9, 10 * w, a, x / 10, b, y / 10; bad = 1 }
              if (d > worst) worst = d; x = y = n = 0 }
    END { if (w != 20) { print "expected 200 steps, got windows: " w; exit 1 }; printf "%s vs %s: largest 10-step mean difference %.2f%%\n", b, a, 100 * worst; exit bad }' ||
    fail "$2's loss curve is not within 2% of $1's"
}
within_2pct fp32 bf16
# and they are not the same run: bf16 rounding changed the numbers
! (same_losses fp32 bf16 0) >/dev/null 2>&1 || fail "bf16 gave exactly fp32's losses: the operands were not rounded"

# native bf16 where this CPU has it and oneDNN (or a BLAS with
# cblas_sbgemm) multiplies bf16 (PLAIT_CPU_BF16_PRODUCTS=bf16: the bf16
# instructions even where auto multiplies in fp32): the same curve test
# against fp32; the emulated numbers step for step while the two orders of
# fp32 sums have not yet drifted apart (within 8.3e-5 over the first 30
# steps here; later they part, as any two summation orders do); and the
# same bits at 1 and 2 threads. Then the native run's other way, fp32
# products on the widened bf16 operands: the same curve test and bits.
rm -rf "$E2E_WORK/probe" # a failed run's work directory stays
export PLAIT_CPU_BF16_PRODUCTS=bf16
if "$PLAIT_BIN" train "$CFG" run.steps=1 run.precision=bf16 "run.out_dir=$E2E_WORK/probe" >"$E2E_WORK/probe.out" 2>&1; then
  train native $S run.precision=bf16
  grep -q "bf16 products on " "$E2E_WORK/native.out" || fail "the start-up line names no bf16 library: $(cat "$E2E_WORK/native.out")"
  within_2pct fp32 native
  mkdir -p "$E2E_WORK/emul30" "$E2E_WORK/native30"
  head -n 31 "$E2E_WORK/bf16/metrics.csv" >"$E2E_WORK/emul30/metrics.csv"
  head -n 31 "$E2E_WORK/native/metrics.csv" >"$E2E_WORK/native30/metrics.csv"
  same_losses emul30 native30 0.001
  S20="run.steps=20 run.eval_every=0 run.ckpt_every=0 run.progress=off run.precision=bf16"
  train native_t1 $S20 run.threads=1
  train native_t2 $S20 run.threads=2
  same_losses native_t1 native_t2 0
  # a oneDNN missing at run time: refused before step 1, naming its package
  PLAIT_ONEDNN_LIB=libdnnl-absent.so.9 refused no_onednn "neither oneDNN nor the BLAS has a bf16 matrix product" \
    "$CFG" run.precision=bf16
  grep -qF "Debian's package libdnnl2" "$E2E_WORK/no_onednn.out" || fail "no package named: $(cat "$E2E_WORK/no_onednn.out")"
  echo "native bf16 checked: $(grep -o "bf16 products on [^,]*" "$E2E_WORK/native.out" | head -n 1)"
  export PLAIT_CPU_BF16_PRODUCTS=fp32
  train widened $S run.precision=bf16
  grep -q "bf16 products in fp32 on widened operands (PLAIT_CPU_BF16_PRODUCTS=fp32)" "$E2E_WORK/widened.out" ||
    fail "the start-up line does not name the widened products: $(cat "$E2E_WORK/widened.out")"
  within_2pct fp32 widened
  ! (same_losses native widened 0) >/dev/null 2>&1 || fail "the widened products gave the bf16 instructions' bits"
  train widened_t1 $S20 run.threads=1
  train widened_t2 $S20 run.threads=2
  same_losses widened_t1 widened_t2 0
  PLAIT_CPU_BF16_PRODUCTS=dot refused badproducts \
    "key 'precision' in [run]: PLAIT_CPU_BF16_PRODUCTS=dot: unknown way to multiply bf16; allowed: auto, bf16, fp32" \
    "$CFG" run.precision=bf16
else
  grep -q "bf16 needs\|but neither" "$E2E_WORK/probe.out" ||
    fail "bf16 was refused without saying what is missing: $(cat "$E2E_WORK/probe.out")"
  echo "native bf16 not available here: $(grep -o "bf16 needs.*\|but neither.*" "$E2E_WORK/probe.out" | head -n 1)"
fi
unset PLAIT_CPU_BF16_PRODUCTS
echo "precision OK"
