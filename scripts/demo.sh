#!/usr/bin/env bash
# `make demo`: train the default GPT (configs/gpt-tiny-dp4.ini) on 4 local
# ranks with data parallelism over TCP, then show where its metrics and
# checkpoint are and a sample of generated text. Repeatable: it starts fresh
# in runs/demo each time.
set -euo pipefail
build=${1:-build}
plait=$build/bin/plait
out=runs/demo
echo "== plait $($plait --version | cut -d' ' -f2-): plugins"
$plait plugins
echo
echo "== training configs/gpt-tiny-dp4.ini on 4 local ranks (data parallel, TCP)"
rm -rf "$out"
$plait train configs/gpt-tiny-dp4.ini run.out_dir=$out
echo
echo "== metrics: $out/metrics.csv (last rows)"
{ head -n 1 "$out/metrics.csv"; tail -n 3 "$out/metrics.csv"; } | cut -d, -f1-10 | column -t -s,
ckpt=$(ls -d "$out"/ckpt-* | sort | tail -n 1)
echo "== checkpoint: $ckpt (model.safetensors with nanoGPT names, optim.safetensors, state.json)"
echo "== sample: plait sample $ckpt --prompt 'LOVE, n.' --tokens 300"
$plait sample "$ckpt" --prompt "LOVE, n." --tokens 300 --temperature 0.8 --seed 1
