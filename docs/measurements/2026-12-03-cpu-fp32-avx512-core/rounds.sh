#!/usr/bin/env bash
# fp32 products: OpenBLAS SkylakeX kernels against oneDNN capped at avx512_core(_vnni), interleaved rounds
cd "${PLAIT_SOURCE_DIR:-.}" || exit 1 # the source tree, built
run() { # cfg warm steps threads env...
  local cfg=$1 w=$2 s=$3 t=$4
  shift 4
  env "$@" build/bin/plait bench train "$cfg" run.threads="$t" --warmup "$w" --steps "$s" 2>&1 | awk '/^# +ms\/step/ { getline; print $1; exit }'
}
for r in $(seq 1 "${ROUNDS:-5}"); do
  for spec in "gpt-small 2 6 2" "llama-small 2 6 2" "gpt-small 2 6 1"; do
    read -r n w s t <<<"$spec"
    a=$(run "configs/$n.ini" "$w" "$s" "$t" OPENBLAS_CORETYPE=SkylakeX PLAIT_CPU_GEMM=blas)
    b=$(run "configs/$n.ini" "$w" "$s" "$t" ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI PLAIT_CPU_GEMM=onednn)
    c=$(run "configs/$n.ini" "$w" "$s" "$t" ONEDNN_MAX_CPU_ISA=AVX512_CORE PLAIT_CPU_GEMM=onednn)
    echo "round $r $n threads $t load $(cut -d' ' -f1 /proc/loadavg): blas-skylakex $a onednn-vnni $b onednn-core $c"
  done
done
