#!/usr/bin/env bash
# A llama mixture of experts in and out as Hugging Face's Mixtral, without
# PyTorch: a trained run exported as hf says MixtralForCausalLM, writes
# Mixtral's config.json (num_local_experts, num_experts_per_tok, an
# expert's width as intermediate_size) and names (block_sparse_moe.gate,
# experts.N.w1/w2/w3, no router bias), and imports back bit-identical
# through [run] init_from; a model trained with the bias balancing, whose
# bias Mixtral has no place for, and one with every other block sparse are
# refused by export naming the tensor or key.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=48"
D="run.steps=3 data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
Z="run.steps=1 optim.lr=0 optim.min_lr=0 data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
# shellcheck disable=SC2086
train trained $D $MOE
"$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --out "$E2E_WORK/exp" >"$E2E_WORK/exp.out" 2>&1 ||
  fail "export a llama mixture of experts: $(cat "$E2E_WORK/exp.out")"
grep -q "as Hugging Face MixtralForCausalLM" "$E2E_WORK/exp.out" || fail "export did not say MixtralForCausalLM"
J=$E2E_WORK/exp/config.json
for want in '"model_type": "mixtral"' '"architectures": \["MixtralForCausalLM"\]' '"num_local_experts": 4' \
  '"num_experts_per_tok": 2' '"intermediate_size": 48' '"router_jitter_noise": 0.0' '"sliding_window": null'; do
  grep -q "$want" "$J" || fail "config.json lacks $want: $(cat "$J")"
done
M=$E2E_WORK/exp/model.safetensors
for want in model.layers.1.block_sparse_moe.gate.weight model.layers.0.block_sparse_moe.experts.3.w1.weight \
  model.layers.1.block_sparse_moe.experts.0.w2.weight model.layers.1.block_sparse_moe.experts.2.w3.weight; do
  grep -a -q "\"$want\"" "$M" || fail "model.safetensors has no $want"
done
for unwanted in expert_bias mlp.experts. mlp.router.; do
  if grep -a -q "$unwanted" "$M"; then fail "model.safetensors holds plait's $unwanted"; fi
done
# shellcheck disable=SC2086
train back $Z $MOE run.init_from="$E2E_WORK/exp"
same_params trained back 0

# what Mixtral cannot describe
# shellcheck disable=SC2086
train biased $D $MOE model.moe_bias_rate=0.01
rm -rf "${E2E_WORK:?}/exp_biased" # a failed earlier run's
if "$PLAIT_BIN" export "$E2E_WORK/biased" --format hf --out "$E2E_WORK/exp_biased" >"$E2E_WORK/biased.out" 2>&1; then
  fail "a model whose router bias steers its routing was exported as Mixtral"
fi
grep -q "model.layers.0.mlp.router.expert_bias' is .* not 0: the bias balancing" "$E2E_WORK/biased.out" ||
  fail "unclear refusal of the bias: $(cat "$E2E_WORK/biased.out")"
[ ! -e "$E2E_WORK/exp_biased/model.safetensors" ] || fail "the refused export left a model.safetensors"
# shellcheck disable=SC2086
train every2 $D $MOE model.moe_every=2
if "$PLAIT_BIN" export "$E2E_WORK/every2" --format hf --out "$E2E_WORK/exp2" >"$E2E_WORK/exp2.out" 2>&1; then
  fail "a model with every other block sparse was exported as Mixtral"
fi
grep -q "moe_every = 2, which Hugging Face's MixtralForCausalLM does not compute (allowed: 1" "$E2E_WORK/exp2.out" ||
  fail "unclear refusal: $(cat "$E2E_WORK/exp2.out")"
echo "Mixtral weights OK: exported as MixtralForCausalLM and read back bit-identical; what Mixtral cannot describe refused"
