#!/usr/bin/env bash
# The mixture of experts under tensor parallelism (each expert's width
# split over the tp group, the router replicated, docs/parallelism.md
# "Experts under tensor parallelism"): configs/moe-tiny.ini at tp 2, with
# and without sequence parallelism, and the llama arch with a shared
# expert at tp 2 and dp 2 x tp 2, each within tp's documented tolerance
# of one process (losses within 1e-5 relative, final parameters within
# 1e-4) in deterministic mode; tp's routes per expert are one process's;
# tp 2's step-2 checkpoint resumes in one process as the straight run;
# tp 2 x pp 2 with sequence parallelism under zb1 (the sparse blocks'
# backward in two halves) gives 1f1b's losses and parameters bit for bit; an
# expert width tp cannot split is refused before step 1, naming the keys
# (tp x ep: test_moe_tpep.sh).
source "$(dirname "$0")/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
# (run.mfu_peak: the progress lines' MFU against a given peak, so no run
# measures the GEMM rate first: seconds of CPU, again at every run on a
# busy machine, train/mfu_peak.h; nothing here reads MFU)
D="run.steps=4 run.deterministic=true run.eval_every=0 run.ckpt_every=2 data.global_batch=4 model.moe_bias_rate=0.001 run.mfu_peak=1000"
train one $D
train tp2 $D parallel.plugin=hybrid parallel.tp=2
train tp2sp $D parallel.plugin=hybrid parallel.tp=2 parallel.tp.sequence_parallel=true
for r in tp2 tp2sp; do
  same_losses one "$r" 1e-5
  same_params one "$r" 1e-4
  for e in 0 1 2 3 4 5 6 7; do
    [ "$(column one moe_tokens_$e)" = "$(column "$r" moe_tokens_$e)" ] ||
      fail "$r routed other tokens to expert $e than one process"
  done
done
for s in 1f1b zb1; do
  train "pp$s" $D parallel.plugin=hybrid parallel.tp=2 parallel.tp.sequence_parallel=true parallel.pp=2 \
    parallel.pp.schedule=$s data.micro_batch=1
done
same_losses pp1f1b ppzb1 0
same_params pp1f1b ppzb1 bits
# the experts' slices gathered into whole tensors: tp 2's checkpoint at tp 1
rm -r "$E2E_WORK/tp2/ckpt-00000004"
train tp2 $D --resume
same_params one tp2 1e-4

# the llama arch, a shared expert beside the routed ones
CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
L="$D model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 model.moe_shared_experts=1"
train lone $L
train ltp2 $L parallel.plugin=hybrid parallel.tp=2
train ldp2tp2 $L parallel.plugin=hybrid parallel.dp=2 parallel.tp=2
for r in ltp2 ldp2tp2; do
  same_losses lone "$r" 1e-5
  same_params lone "$r" 1e-4
done

# refused by config check and by train, before any step
refused() { # EXPECTED overrides...
  local want=$1; shift
  if "$PLAIT_BIN" config check "$CFG" "$@" >"$E2E_WORK/out" 2>&1; then fail "config check accepted $*"; fi
  grep -qF -- "$want" "$E2E_WORK/out" || fail "config check $*: $(cat "$E2E_WORK/out")"
  train_refused refused "$want" run.out_dir="$E2E_WORK/refused" "$@"
  ! grep -q "^step " "$E2E_WORK/refused.out" || fail "train $* ran a step"
}
refused "[model] moe_ffn_hidden = 66 is not divisible by [parallel] tp = 4" $L model.moe_ffn_hidden=66 \
  parallel.plugin=hybrid parallel.tp=4 model.n_kv_head=4
grep -qF "allowed: tp in {1, 2, 3, 6, 11, 22, 33}" "$E2E_WORK/refused.out" ||
  fail "the refusal of moe_ffn_hidden = 66 at tp 4 does not say what would work: $(cat "$E2E_WORK/refused.out")"
echo "moe under tp: tp 2 (also with sequence parallelism, dp 2, llama with a shared expert) as one process"
