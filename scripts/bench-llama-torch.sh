#!/usr/bin/env bash
# plait's Llama (`[model] arch = llama`) on the CPU beside Hugging Face
# transformers' LlamaForCausalLM of the same shape (scripts/peers/train_llama.py),
# float32, AdamW, the same batch, sequence length, tokens (data/corpus.txt's
# bytes) and math threads, in interleaved rounds: plait, PyTorch, plait,
# PyTorch, ... so that both see the same minutes of a shared machine.
#   tiny  — configs/llama-tiny.ini (4 layers, 128 wide, 4/2 heads, SwiGLU 352, block 128, batch 8)
#   small — configs/llama-small.ini (6 layers, 384 wide, 6/2 heads, SwiGLU 1024, block 256, batch 8)
# Usage: [BENCH_ROUNDS=3] [BENCH_THREADS="1 2"] [PLAIT_TORCH_PYTHON=python3]
#        scripts/bench-llama-torch.sh [tiny|small|all] [BUILD]
# Each run is a fresh process: `plait bench train CONFIG run.threads=T`
# (median step of S timed steps after W warm-up steps) against
# `train_llama.py --threads T` with OMP_WAIT_POLICY=PASSIVE (libgomp's
# default spin-wait is the slower setting on a shared machine; see
# docs/benchmarks.md). Per round the ratio is plait's tokens/s over
# PyTorch's; the summary gives each side's median tokens/s, the median
# ratio and the smallest and largest round's ratio. Exits 77, saying why,
# when the python cannot import torch and transformers. A benchmark, not a
# test: nothing here asserts a speed.
set -euo pipefail
what=${1:-all} build=${2:-build}
plait=$build/bin/plait
py=${PLAIT_TORCH_PYTHON:-python3}
rounds=${BENCH_ROUNDS:-3}
threads=${BENCH_THREADS:-1 2}
here=$(cd "$(dirname "$0")" && pwd)

[ -x "$plait" ] || { echo "bench-llama-torch: no $plait (build first: make build)" >&2; exit 1; }

# shape: name config peer-args warmup steps
shapes=()
case $what in
  tiny | all) shapes+=("tiny configs/llama-tiny.ini --n_layer 4 --n_head 4 --n_kv_head 2 --n_embd 128 --ffn_hidden 352 --block 128 --batch 8|5|30") ;;&
  small | all) shapes+=("small configs/llama-small.ini --n_layer 6 --n_head 6 --n_kv_head 2 --n_embd 384 --ffn_hidden 1024 --block 256 --batch 8|2|6") ;;
  tiny) ;;
  *) echo "bench-llama-torch: '$what': give tiny, small or all" >&2; exit 2 ;;
esac
if ! "$py" -c 'import torch, transformers' 2>/dev/null; then
  echo "SKIP: $py cannot import torch and transformers (set PLAIT_TORCH_PYTHON to a python that can)"
  exit 77
fi

echo "# $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores; $("$py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
summary=()
for s in "${shapes[@]}"; do
  IFS='|' read -r spec warmup steps <<<"$s"
  read -r name cfg peer_args <<<"$spec"
  for t in $threads; do
    ps=() ts=() rs=()
    for r in $(seq "$rounds"); do
      load=$(cut -d' ' -f1 /proc/loadavg)
      p=$("$plait" bench train "$cfg" run.threads="$t" --warmup "$warmup" --steps "$steps" 2>&1 |
        awk '/^# +ms\/step/ { getline; print $2; exit }')
      # shellcheck disable=SC2086 # peer_args is a list of options
      q=$(OMP_WAIT_POLICY=PASSIVE "$py" "$here/peers/train_llama.py" $peer_args --threads "$t" \
        --warmup "$warmup" --steps "$steps" 2>&1 | sed -n 's/^RESULT .* tok_s=\([0-9]*\) .*/\1/p')
      if [ -z "$p" ] || [ -z "$q" ]; then
        echo "bench-llama-torch: llama-$name, $t threads, round $r: a run gave no figure" >&2
        exit 1
      fi
      ratio=$(awk -v p="$p" -v q="$q" 'BEGIN { printf "%.2f", p / q }')
      echo "llama-$name threads=$t round=$r load=$load plait_tok_s=$p torch_tok_s=$q ratio=$ratio"
      ps+=("$p") ts+=("$q") rs+=("$ratio")
    done
    med() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
    lo=$(printf '%s\n' "${rs[@]}" | sort -g | head -1) hi=$(printf '%s\n' "${rs[@]}" | sort -g | tail -1)
    summary+=("| llama-$name | $t | $(med "${ps[@]}") | $(med "${ts[@]}") | $(med "${rs[@]}")× | $lo–$hi× |")
  done
done
echo
echo "| shape | threads | plait tokens/s (median) | PyTorch tokens/s (median) | plait / PyTorch (median) | per-round range |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${summary[@]}"
