#!/usr/bin/env bash
# 3-D parallelism reproduces one process: dp 2 x tp 2 x pp 2 on
# 8 ranks over one mesh, 30 steps, loss curve within 1e-5 relative and final
# parameters within 1e-4 — with 1f1b (default order: tp innermost, then dp,
# then pp), gpipe, interleaved (virtual_stages = 2) and another rank order.
# memory.csv shows each rank's coordinates; configs/gpt-3d.ini is valid,
# lays out dp 2 x tp 2 x pp 2 and trains (two steps here).
source "$(dirname "$0")/lib.sh"
H="run.steps=30 parallel.plugin=hybrid data.micro_batch=1"
D3="$H parallel.dp=2 parallel.tp=2 parallel.pp=2"
train one $H
train d3_1f1b  $D3
train d3_gpipe $D3 parallel.pp.schedule=gpipe
train d3_inter $D3 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
train d3_order $D3 parallel.order=pp,dp,tp
for r in d3_1f1b d3_gpipe d3_inter d3_order; do
  same_losses one "$r" 1e-5
  same_params one "$r" 1e-4
done
# coordinates: default order tp,dp,pp puts rank 1 at tp 1, rank 2 at dp 1,
# rank 4 at pp 1; order pp,dp,tp puts rank 1 at pp 1, rank 2 at dp 1, rank 4 at tp 1
coords() { echo "$(mem "$1" "$2" dp)$(mem "$1" "$2" tp)$(mem "$1" "$2" pp)"; }
[ "$(coords d3_1f1b 1) $(coords d3_1f1b 2) $(coords d3_1f1b 4)" = "010 100 001" ] ||
  fail "default order: ranks 1, 2, 4 at $(coords d3_1f1b 1) $(coords d3_1f1b 2) $(coords d3_1f1b 4) (dp tp pp)"
[ "$(coords d3_order 1) $(coords d3_order 2) $(coords d3_order 4)" = "001 100 010" ] ||
  fail "order pp,dp,tp: ranks 1, 2, 4 at $(coords d3_order 1) $(coords d3_order 2) $(coords d3_order 4)"
"$PLAIT_BIN" config check configs/gpt-3d.ini >/dev/null || fail "configs/gpt-3d.ini does not check"
show=$("$PLAIT_BIN" config show configs/gpt-3d.ini)
for k in "dp = 2" "tp = 2" "pp = 2" "plugin = hybrid" "schedule = 1f1b"; do
  grep -q "^$k " <<<"$show" || fail "configs/gpt-3d.ini: no '$k'"
done
# the shipped config itself: 8 local ranks, two steps (its progress lines'
# MFU against a given peak, so rank 0 does not measure the GEMM rate
# first: seconds of CPU, again at every run on a busy machine,
# train/mfu_peak.h)
CFG=configs/gpt-3d.ini train gpt3d run.steps=2 run.eval_every=0 run.ckpt_every=0 run.eval_batches=1 run.mfu_peak=1000
grep -q "layout dp=2 tp=2 pp=2 (hybrid, order tp,dp,pp)" "$E2E_WORK/gpt3d.out" || fail "gpt-3d.ini: unexpected layout"
[ "$(column gpt3d step | tail -n 1)" = 2 ] || fail "gpt-3d.ini did not train 2 steps"
echo "3-D equivalence OK"
