#!/usr/bin/env bash
# bf16 on the CPU: plait in bf16 against plait in float32 on the same CPU,
# and each against PyTorch 2.x written the usual way on the same machine
# and threads (bf16 autocast with float32 weights, and float32), in
# interleaved rounds: plait fp32, plait bf16, PyTorch fp32, PyTorch bf16,
# then again, so that all four see the same minutes of a shared machine.
#   gpt-small   — configs/gpt-small.ini beside scripts/peers/gpt_gpu_bench.py --device cpu
#                 (nanoGPT-style: SDPA attention, fused AdamW), 8 layers, 256 wide, block 256, batch 8
#   llama-tiny  — configs/llama-tiny.ini beside scripts/peers/train_llama.py
#                 (transformers' LlamaForCausalLM), 4 layers, 128 wide, block 128, batch 8
#   llama-small — configs/llama-small.ini, 6 layers, 384 wide, block 256, batch 8
# Usage: [BENCH_ROUNDS=3] [BENCH_THREADS=2] [PLAIT_TORCH_PYTHON=python3]
#        scripts/bench-cpu-bf16.sh [gpt-small|llama-tiny|llama-small|all] [BUILD]
# Each figure is a fresh process's median step (`plait bench train CONFIG
# run.threads=T [run.precision=bf16]`; the peers with OMP_NUM_THREADS=T,
# OMP_WAIT_POLICY=PASSIVE). Prints each round with the load average, then
# a table of medians and per-round ranges of the four ratios. Exits 77,
# saying why, when plait refuses bf16 here (a CPU without AVX512_BF16 or
# AMX_BF16, or no bf16 product library) or the python cannot import torch
# and transformers. A benchmark, not a test: nothing here asserts a speed.
set -euo pipefail
what=${1:-all} build=${2:-build}
plait=$build/bin/plait
py=${PLAIT_TORCH_PYTHON:-python3}
rounds=${BENCH_ROUNDS:-3}
threads=${BENCH_THREADS:-2}
here=$(cd "$(dirname "$0")" && pwd)

[ -x "$plait" ] || { echo "bench-cpu-bf16: no $plait (build first: make build)" >&2; exit 1; }
if ! out=$("$plait" doctor 2>&1 | grep '^precision'); then out="(plait doctor printed no precision line)"; fi
case $out in
  *"bf16 runs here"*) ;;
  *) echo "SKIP: plait cannot run bf16 on this CPU: $out"; exit 77 ;;
esac
if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
  echo "SKIP: $py cannot import torch and transformers (set PLAIT_TORCH_PYTHON to a python that can)"
  exit 77
fi

# name|config|peer|peer args|warmup|steps
shapes=()
gpt_args="--n_layer 8 --n_head 8 --n_embd 256 --block 256 --vocab 256 --batch 8"
case $what in
  gpt-small | all) shapes+=("gpt-small|configs/gpt-small.ini|gpt|$gpt_args|2|6") ;;&
  llama-tiny | all) shapes+=("llama-tiny|configs/llama-tiny.ini|llama|--n_layer 4 --n_head 4 --n_kv_head 2 --n_embd 128 --ffn_hidden 352 --block 128 --batch 8|5|30") ;;&
  llama-small | all) shapes+=("llama-small|configs/llama-small.ini|llama|--n_layer 6 --n_head 6 --n_kv_head 2 --n_embd 384 --ffn_hidden 1024 --block 256 --batch 8|2|6") ;;
  gpt-small | llama-tiny) ;;
  *) echo "bench-cpu-bf16: '$what': give gpt-small, llama-tiny, llama-small or all" >&2; exit 2 ;;
esac

echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, $threads threads; $("$py" -c 'import torch; print("torch", torch.__version__)')"
echo "# plait: $("$plait" doctor 2>&1 | grep -E '^(gemm|precision)' | tr -s ' ' | paste -sd';')"

plait_run() { # plait_run CONFIG WARMUP STEPS [KEY=VALUE ...]: tokens/s
  local cfg=$1 w=$2 s=$3
  shift 3
  "$plait" bench train "$cfg" run.threads="$threads" --warmup "$w" --steps "$s" "$@" 2>&1 |
    awk '/^# +ms\/step/ { getline; print $2; exit }'
}
peer_run() { # peer_run gpt|llama ARGS WARMUP STEPS bf16|fp32: tokens/s
  local kind=$1 args=$2 w=$3 s=$4 prec=$5
  # shellcheck disable=SC2086 # args is a list of options
  if [ "$kind" = gpt ]; then
    OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE "$py" "$here/peers/gpt_gpu_bench.py" --device cpu \
      $([ "$prec" = fp32 ] && echo --fp32) $args --warmup "$w" --steps "$s" 2>&1 |
      sed -n 's/^RESULT .* tokens_per_s=\([0-9]*\) .*/\1/p'
  else
    OMP_NUM_THREADS=$threads OMP_WAIT_POLICY=PASSIVE "$py" "$here/peers/train_llama.py" $args \
      $([ "$prec" = bf16 ] && echo --bf16) --threads "$threads" --warmup "$w" --steps "$s" 2>&1 |
      sed -n 's/^RESULT .* tok_s=\([0-9]*\) .*/\1/p'
  fi
}
med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { printf '%s–%s' "$(printf '%s\n' "$@" | sort -g | head -1)" "$(printf '%s\n' "$@" | sort -g | tail -1)"; }

summary=()
for sh in "${shapes[@]}"; do
  IFS='|' read -r name cfg kind args warmup steps <<<"$sh"
  pf=() pb=() tf=() tb=() r1=() r2=() r3=() r4=()
  for r in $(seq "$rounds"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    a=$(plait_run "$cfg" "$warmup" "$steps")
    b=$(plait_run "$cfg" "$warmup" "$steps" run.precision=bf16)
    c=$(peer_run "$kind" "$args" "$warmup" "$steps" fp32)
    d=$(peer_run "$kind" "$args" "$warmup" "$steps" bf16)
    if [ -z "$a" ] || [ -z "$b" ] || [ -z "$c" ] || [ -z "$d" ]; then
      echo "bench-cpu-bf16: $name, round $r: a run gave no figure (plait fp32 '$a', bf16 '$b'; PyTorch fp32 '$c', bf16 '$d')" >&2
      exit 1
    fi
    x=$(awk -v p="$b" -v q="$a" 'BEGIN { printf "%.2f", p / q }')
    y=$(awk -v p="$b" -v q="$d" 'BEGIN { printf "%.2f", p / q }')
    z=$(awk -v p="$a" -v q="$c" 'BEGIN { printf "%.2f", p / q }')
    v=$(awk -v p="$b" -v q="$c" 'BEGIN { printf "%.2f", p / q }')
    echo "$name round=$r load=$load plait_fp32=$a plait_bf16=$b torch_fp32=$c torch_bf16=$d bf16/fp32=$x bf16/torch_bf16=$y bf16/torch_fp32=$v fp32/torch_fp32=$z"
    pf+=("$a") pb+=("$b") tf+=("$c") tb+=("$d") r1+=("$x") r2+=("$y") r3+=("$z") r4+=("$v")
  done
  summary+=("| $name | $(med "${pf[@]}") | $(med "${pb[@]}") | $(med "${tf[@]}") | $(med "${tb[@]}") | $(med "${r1[@]}")× ($(range "${r1[@]}")) | $(med "${r2[@]}")× ($(range "${r2[@]}")) | $(med "${r4[@]}")× ($(range "${r4[@]}")) | $(med "${r3[@]}")× ($(range "${r3[@]}")) |")
done
echo
echo "| model | plait fp32 tok/s | plait bf16 tok/s | PyTorch fp32 tok/s | PyTorch bf16 tok/s | plait bf16 / plait fp32 | plait bf16 / PyTorch bf16 | plait bf16 / PyTorch fp32 | plait fp32 / PyTorch fp32 |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
