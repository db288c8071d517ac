#!/usr/bin/env bash
# `make demo`: train the default GPT with 3-D parallelism
# (configs/gpt-3d.ini: dp 2 x tp 2 x pp 2 on 8 local ranks over TCP, 1F1B;
# about 40 s on 2 cores), then show where its metrics and checkpoint are and
# a sample of generated text from that checkpoint in one process (checkpoints
# do not depend on the layout). Repeatable: it starts fresh in runs/demo each
# time. DEMO_CONFIG=configs/gpt-tiny-dp4.ini runs the data-parallel one.
set -euo pipefail
build=${1:-build}
plait=$build/bin/plait
out=runs/demo
config=${DEMO_CONFIG:-configs/gpt-3d.ini}
echo "== plait $($plait --version | cut -d' ' -f2-): plugins"
$plait plugins
echo
echo "== training $config ($(grep -E '^(dp|tp|pp) *=' "$config" | sed 's/ *;.*//' | tr -d ' ' | paste -sd' '), TCP)"
rm -rf "$out"
$plait train "$config" run.out_dir=$out
echo
echo "== metrics: $out/metrics.csv (last rows)"
# (awk, not column(1): bsdextrautils is not on every minimal Debian)
{ head -n 1 "$out/metrics.csv"; tail -n 3 "$out/metrics.csv"; } |
  awk -F, '{ for (i = 1; i <= 10 && i <= NF; i++) printf "%-14s", ((i == 2 || i == 3) && $i != "" && NR > 1 ? sprintf("%.4f", $i) : $i); print "" }'
ckpt=$(ls -d "$out"/ckpt-* | sort | tail -n 1)
echo "== checkpoint: $ckpt (model.safetensors with nanoGPT names, optim.safetensors, state.json)"
echo "== sample: plait sample $ckpt --prompt 'LOVE, n.' --tokens 300"
$plait sample "$ckpt" --prompt "LOVE, n." --tokens 300 --temperature 0.8 --seed 1
