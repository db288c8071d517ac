#!/usr/bin/env bash
# plait's llama mixture of experts with q and k norms against Hugging Face
# transformers' Qwen3MoeForCausalLM (mixtral_torch_check.py), both ways: a
# random Qwen3-MoE built and saved by transformers (nothing downloaded),
# read by [run] init_from, gives transformers' logits within 1e-4 of the
# largest logit, and the same bits saved sharded; one whose every other
# block is dense (decoder_sparse_step 2) read with [model] moe_every = 2;
# started from and exported again it is the same tensors bit for bit; a
# run trained by plait, exported with --format hf, loaded by
# AutoModelForCausalLM gives plait's logits; a config.json whose
# norm_topk_prob is not plait's rule or with mlp_only_layers is refused
# naming the key.
# Needs a python with torch, transformers and safetensors: PLAIT_TORCH_PYTHON
# names it (default python3); skipped (77) without them.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/torch_lib.sh"
torch_python "import torch, transformers, safetensors; from transformers import Qwen3MoeForCausalLM" \
  "torch, transformers (with Qwen3MoeForCausalLM) and safetensors"
CHECK=$PLAIT_SOURCE_DIR/tests/e2e/mixtral_torch_check.py
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=96 model.norm_eps=1e-5 model.qk_norm=true"
SHAPE="2 4 64 32 256 arch=llama n_kv_head=2 ${MOE//model./}"

# transformers -> plait (and two configs plait refuses)
"$PY" "$CHECK" make "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" qwen3_moe norm_topk_prob=false \
  mlp_only_layers='[0]' >"$E2E_WORK/make.out" 2>&1 || fail "building the transformers model: $(tail -n 3 "$E2E_WORK/make.out")"
grep -q '"model_type": "qwen3_moe"' "$E2E_WORK/hf/config.json" || fail "transformers wrote no Qwen3-MoE config.json"
"$PY" "$CHECK" make "$E2E_WORK/hf2" "$E2E_WORK/tokens2.safetensors" qwen3_moe_step2 >"$E2E_WORK/make2.out" 2>&1 ||
  fail "building the transformers model with a dense block: $(tail -n 3 "$E2E_WORK/make2.out")"
# shellcheck disable=SC2086
sharded_logits hf "$E2E_WORK/tokens.safetensors" $SHAPE
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/hf2" "$E2E_WORK/tokens2.safetensors" "$E2E_WORK/plait_hf2.safetensors" $SHAPE moe_every=2 \
  ffn_hidden=176 || fail "plait's logits of the transformers model with a dense block"

# what plait does not compute, refused naming the key
refused_keys hf "$E2E_WORK/tokens.safetensors" "$SHAPE" norm_topk_prob mlp_only_layers

# transformers -> plait -> transformers (lr 0 leaves the tensors)
D="data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
# shellcheck disable=SC2086
train from_hf $D $MOE run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/hf"
"$PLAIT_BIN" export "$E2E_WORK/from_hf" --format hf --out "$E2E_WORK/exp_hf" >"$E2E_WORK/exp_hf.out" 2>&1 ||
  fail "export: $(cat "$E2E_WORK/exp_hf.out")"
grep -q '"Qwen3MoeForCausalLM"' "$E2E_WORK/exp_hf/config.json" || fail "not exported as Qwen3MoeForCausalLM"

# plait -> transformers: trained, exported (every other block dense too)
# shellcheck disable=SC2086
train trained $D $MOE run.steps=5
"$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --out "$E2E_WORK/exp" >/dev/null || fail "export"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/exp" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp.safetensors" $SHAPE ||
  fail "plait's logits of its export"
# shellcheck disable=SC2086
train trained2 $D $MOE model.moe_every=2 model.ffn_hidden=176 run.steps=5
"$PLAIT_BIN" export "$E2E_WORK/trained2" --format hf --out "$E2E_WORK/exp2" >/dev/null || fail "export (moe_every 2)"
grep -q '"decoder_sparse_step": 2' "$E2E_WORK/exp2/config.json" || fail "moe_every 2 not exported as decoder_sparse_step"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/exp2" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp2.safetensors" $SHAPE moe_every=2 \
  ffn_hidden=176 || fail "plait's logits of its export (moe_every 2)"

# transformers' logits of every model equal plait's; the round trip keeps every bit
"$PY" "$CHECK" logits "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_hf.safetensors" \
  + logits "$E2E_WORK/hf2" "$E2E_WORK/tokens2.safetensors" "$E2E_WORK/plait_hf2.safetensors" \
  + logits "$E2E_WORK/exp" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp.safetensors" \
  + logits "$E2E_WORK/exp2" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp2.safetensors" \
  + same "$E2E_WORK/hf/model.safetensors" "$E2E_WORK/exp_hf/model.safetensors" ||
  fail "transformers and plait disagree (above: the logits of transformers' two models and of plait's two exports," \
    "then transformers' model read and exported by plait)"
echo "Qwen3-MoE in transformers OK: its models read by plait and written back bit for bit, plait's exports read by" \
  "it, logits agree"
