#!/usr/bin/env bash
# BLAS kernels by cpuid: when OpenBLAS runs kernels older than the CPU's
# (pretended here with PLAIT_BLAS_PRETEND_DETECTED=Prescott, what Debian's
# OpenBLAS does on CPU models it does not know), plait restarts itself with
# OPENBLAS_CORETYPE set, the ranks it launches inherit it, and the start-up
# line says so; a hand-set OPENBLAS_CORETYPE is respected. The line names the
# library under the products (PLAIT_CPU_GEMM: the BLAS or oneDNN with its
# ISA), and a missing oneDNN or an unknown library is refused before step 1.
source "$(dirname "$0")/lib.sh"
# a core type set in the environment that runs the tests would hide the selection
unset OPENBLAS_CORETYPE
S="run.steps=2 run.ckpt_every=0"
avx2=$(grep -m1 -wo avx2 /proc/cpuinfo || true)
avx512=$(grep -m1 -wo avx512bw /proc/cpuinfo || true)
want="as OpenBLAS detected"
[ -n "$avx2" ] && want="Haswell kernels (selected by plait from cpuid; OpenBLAS detected Prescott)"
[ -n "$avx512" ] && want="SkylakeX kernels (selected by plait from cpuid; OpenBLAS detected Prescott)"
PLAIT_BLAS_PRETEND_DETECTED=Prescott train pick $S
grep -qF "$want" "$E2E_WORK/pick.out" || fail "single process: no '$want' in: $(grep compute "$E2E_WORK/pick.out")"
PLAIT_BLAS_PRETEND_DETECTED=Prescott train pick_dp $S parallel.dp=2 run.threads=1
grep -qF "$want" "$E2E_WORK/pick_dp.out" || fail "launched rank: no '$want' in: $(grep compute "$E2E_WORK/pick_dp.out")"
grep -qF "1 math thread per rank" "$E2E_WORK/pick_dp.out" || fail "the line does not name the threads"
OPENBLAS_CORETYPE=Prescott train hand $S
grep -qF "Prescott kernels (OPENBLAS_CORETYPE=Prescott set by hand)" "$E2E_WORK/hand.out" ||
  fail "hand-set core type: $(grep compute "$E2E_WORK/hand.out")"
train plain $S
grep -Eq "^plait: compute .*OpenBLAS [0-9.]*, [A-Za-z0-9]+ kernels \((as OpenBLAS detected|selected by plait from cpuid; OpenBLAS detected [A-Za-z0-9]+)\)" "$E2E_WORK/plain.out" ||
  fail "default start-up line: $(grep compute "$E2E_WORK/plain.out")"
# the library under the products: named on the start-up line; a oneDNN that
# cannot be loaded and an unknown library are refused before step 1
# (auto: oneDNN on a CPU whose ISA it was measured faster on, AVX-512's
# with or without VNNI and BF16, or AMX's)
grep -Eq "products on (the BLAS \(PLAIT_CPU_GEMM unset: auto|oneDNN 2\.[0-9.]+, avx512_core[a-z0-9_]* ISA \(PLAIT_CPU_GEMM unset: auto\))" \
  "$E2E_WORK/plain.out" || fail "the line does not name the products' library: $(grep compute "$E2E_WORK/plain.out")"
PLAIT_CPU_GEMM=onednn PLAIT_ONEDNN_LIB=libdnnl-absent.so.9 train_refused no_onednn \
  "PLAIT_CPU_GEMM=onednn: oneDNN (libdnnl-absent.so.9) cannot be loaded" $S "run.out_dir=$E2E_WORK/no_onednn"
grep -qF "Debian's package libdnnl2" "$E2E_WORK/no_onednn.out" || fail "no package named: $(tail -n 1 "$E2E_WORK/no_onednn.out")"
PLAIT_CPU_GEMM=mkl train_refused mkl "PLAIT_CPU_GEMM=mkl: unknown matrix-product library; allowed: auto, blas, onednn" $S \
  "run.out_dir=$E2E_WORK/mkl"
if [ -e /usr/lib/x86_64-linux-gnu/libdnnl.so.2 ] || ldconfig -p 2>/dev/null | grep -qF libdnnl.so.2; then
  PLAIT_CPU_GEMM=onednn train onednn $S
  grep -Eq "products on oneDNN 2\.[0-9.]+, [a-z0-9_]+ ISA \(PLAIT_CPU_GEMM=onednn\)" "$E2E_WORK/onednn.out" ||
    fail "oneDNN run: $(grep compute "$E2E_WORK/onednn.out")"
  # auto's rule by oneDNN's ISA, held there by oneDNN's own switch: AVX-512
  # without VNNI or BF16 (a Skylake's) takes oneDNN, AVX2 keeps the BLAS
  if [ -n "$avx512" ]; then
    ONEDNN_MAX_CPU_ISA=AVX512_CORE train core512 $S
    grep -Eq "products on oneDNN 2\.[0-9.]+, avx512_core ISA \(PLAIT_CPU_GEMM unset: auto\)" "$E2E_WORK/core512.out" ||
      fail "auto at avx512_core: $(grep compute "$E2E_WORK/core512.out")"
  fi
  # a CPU with AVX512_BF16 whose oneDNN is held below its bf16 ISA: a bf16
  # run's products in fp32 on widened operands, not oneDNN's emulated bf16
  # (slower than fp32), unless PLAIT_CPU_BF16_PRODUCTS=bf16 asks for them
  if grep -qw avx512_bf16 /proc/cpuinfo; then
    ONEDNN_MAX_CPU_ISA=AVX512_CORE train held16 $S run.precision=bf16
    grep -qF "bf16 products in fp32 on widened operands (oneDNN at avx512_core by ONEDNN_MAX_CPU_ISA emulates bf16)" \
      "$E2E_WORK/held16.out" || fail "bf16 with oneDNN held at avx512_core: $(grep compute "$E2E_WORK/held16.out")"
    PLAIT_CPU_BF16_PRODUCTS=bf16 ONEDNN_MAX_CPU_ISA=AVX512_CORE train held16_asked $S run.precision=bf16
    grep -qE "bf16 products on oneDNN 2\.[0-9.]+ \(" "$E2E_WORK/held16_asked.out" ||
      fail "PLAIT_CPU_BF16_PRODUCTS=bf16 with oneDNN held: $(grep compute "$E2E_WORK/held16_asked.out")"
  fi
  ONEDNN_MAX_CPU_ISA=AVX2 train isa_avx2 $S
  grep -Eq "products on the BLAS \(PLAIT_CPU_GEMM unset: auto(; oneDNN [0-9.]+ would run its [a-z0-9_]+ ISA)?\)" \
    "$E2E_WORK/isa_avx2.out" || fail "auto at avx2: $(grep compute "$E2E_WORK/isa_avx2.out")"
fi
echo "BLAS selection OK: $want"
