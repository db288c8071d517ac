#!/usr/bin/env bash
# Activation recomputation with sparse blocks ([model] recompute with
# experts, docs/recompute.md): selective and full give recompute = none's
# loss curve, routes per expert and final parameters bit for bit, for the
# gpt arch (configs/moe-tiny.ini, also full at tp 2 against none at tp 2)
# and the llama arch with a shared expert, each at ep 1 and at dp 2 x ep 2
# (full rerunning the router, the experts and their all-to-alls before the
# backward, selective the experts' GELU or SwiGLU); both keep fewer
# activations than none in every layout.
source "$(dirname "$0")/lib.sh"
# (run.mfu_peak: the progress lines' MFU against a given peak, so no run
# measures the GEMM rate first: seconds of CPU, again at every run on a
# busy machine, train/mfu_peak.h; nothing here reads MFU)
D="run.steps=4 run.deterministic=true run.eval_every=0 run.ckpt_every=4 data.global_batch=4 model.moe_bias_rate=0.001 run.mfu_peak=1000"
# modes PREFIX EXPERTS overrides...: PREFIXnone, PREFIXselective and
# PREFIXfull trained; the last two as the first, bit for bit, routes too
modes() {
  local p=$1 experts=$2; shift 2
  for r in none selective full; do train "$p$r" "$@" model.recompute=$r; done
  for r in selective full; do
    [ "$(mem "$p$r" 0 activation_bytes)" -lt "$(mem "${p}none" 0 activation_bytes)" ] ||
      fail "${p}: recompute = $r kept no fewer activations than none: $(mem "$p$r" 0 activation_bytes)"
  done
  for r in selective full; do
    same_losses "${p}none" "$p$r" 0
    same_params "${p}none" "$p$r" bits model
    for ((e = 0; e < experts; e++)); do
      [ "$(column "${p}none" moe_tokens_$e)" = "$(column "$p$r" moe_tokens_$e)" ] ||
        fail "recompute = $r routed other tokens to expert $e than none"
    done
  done
}
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
modes "" 8 $D
modes ep2 8 $D parallel.dp=2 parallel.ep=2
train tp2 $D parallel.plugin=hybrid parallel.tp=2
train tp2full $D parallel.plugin=hybrid parallel.tp=2 model.recompute=full
same_losses tp2 tp2full 0
same_params tp2 tp2full bits model

CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
L="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 model.moe_shared_experts=1"
modes l 4 $D $L
modes lep2 4 $D $L parallel.dp=2 parallel.ep=2
echo "moe with recompute: selective and full bit-identical to none (gpt, gpt at tp 2, llama; ep 1 and 2)"
