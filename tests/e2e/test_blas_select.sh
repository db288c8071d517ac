#!/usr/bin/env bash
# BLAS kernels by cpuid: when OpenBLAS runs kernels older than the CPU's
# (pretended here with PLAIT_BLAS_PRETEND_DETECTED=Prescott, what Debian's
# OpenBLAS does on CPU models it does not know), plait restarts itself with
# OPENBLAS_CORETYPE set, the ranks it launches inherit it, and the start-up
# line says so; a hand-set OPENBLAS_CORETYPE is respected.
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
echo "BLAS selection OK: $want"
