#!/usr/bin/env bash
# plait's llama mixture of experts against Hugging Face transformers'
# MixtralForCausalLM (mixtral_torch_check.py), both ways: a random Mixtral
# built and saved by transformers (nothing downloaded), read by [run]
# init_from, gives transformers' logits within 1e-4 of the largest logit,
# and the same bits saved sharded; started from and exported again it is
# the same tensors bit for bit; a run trained by plait, exported with
# --format hf, loaded by MixtralForCausalLM.from_pretrained gives plait's
# logits, and read back by init_from is the run's tensors bit for bit; a
# config.json with a router jitter or a sliding window is refused naming
# the key, and so is the export of a model whose every other block is
# sparse.
# Needs a python with torch, transformers and safetensors: PLAIT_TORCH_PYTHON
# names it (default python3); skipped (77) without them.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/torch_lib.sh"
torch_python "import torch, transformers, safetensors; from transformers import MixtralForCausalLM" \
  "torch, transformers (with MixtralForCausalLM) and safetensors"
CHECK=$PLAIT_SOURCE_DIR/tests/e2e/mixtral_torch_check.py
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=96 model.norm_eps=1e-5"
SHAPE="2 4 64 32 256 arch=llama n_kv_head=2 ${MOE//model./}"

# transformers -> plait (and two configs plait refuses); python starts
# twice, as importing torch takes seconds
"$PY" "$CHECK" make "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" router_jitter_noise=0.1 sliding_window=16 \
  >"$E2E_WORK/make.out" 2>&1 || fail "building the transformers model: $(tail -n 3 "$E2E_WORK/make.out")"
# shellcheck disable=SC2086
sharded_logits hf "$E2E_WORK/tokens.safetensors" $SHAPE

# features plait does not implement, refused naming the key
refused_keys hf "$E2E_WORK/tokens.safetensors" "$SHAPE" router_jitter_noise sliding_window

# transformers -> plait -> transformers (lr 0 leaves the tensors)
D="data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
# shellcheck disable=SC2086
train from_hf $D $MOE run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/hf"
"$PLAIT_BIN" export "$E2E_WORK/from_hf" --format hf --out "$E2E_WORK/exp_hf" >"$E2E_WORK/exp_hf.out" 2>&1 ||
  fail "export: $(cat "$E2E_WORK/exp_hf.out")"
grep -q MixtralForCausalLM "$E2E_WORK/exp_hf.out" || fail "export did not say Mixtral: $(cat "$E2E_WORK/exp_hf.out")"

# plait -> transformers: trained, exported; and read back
# shellcheck disable=SC2086
train trained $D $MOE run.steps=5
"$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --out "$E2E_WORK/exp" >/dev/null || fail "export"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/exp" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp.safetensors" $SHAPE ||
  fail "plait's logits of its export"
# shellcheck disable=SC2086
train back $D $MOE run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/exp"
"$PLAIT_BIN" export "$E2E_WORK/back" --format hf --out "$E2E_WORK/exp_back" >/dev/null || fail "export of the run read back"

# a model Mixtral cannot describe: refused naming the key
# shellcheck disable=SC2086
train every2 $D $MOE model.moe_every=2 run.steps=1
if "$PLAIT_BIN" export "$E2E_WORK/every2" --format hf --out "$E2E_WORK/exp2" >"$E2E_WORK/exp2.out" 2>&1; then
  fail "a model with every other block sparse was exported as Mixtral"
fi
grep -q "moe_every = 2, which Hugging Face's MixtralForCausalLM does not compute" "$E2E_WORK/exp2.out" ||
  fail "unclear refusal: $(cat "$E2E_WORK/exp2.out")"

# transformers' logits of both models equal plait's; the round trips keep every bit
"$PY" "$CHECK" logits "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_hf.safetensors" \
  + logits "$E2E_WORK/exp" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_exp.safetensors" \
  + same "$E2E_WORK/hf/model.safetensors" "$E2E_WORK/exp_hf/model.safetensors" \
  + same "$E2E_WORK/exp/model.safetensors" "$E2E_WORK/exp_back/model.safetensors" ||
  fail "transformers and plait disagree (above: the logits of transformers' model and of plait's export, then" \
    "transformers' model read and exported by plait, then plait's export read back and exported again)"
echo "Mixtral in transformers OK: its model read by plait and written back bit for bit, plait's exports read by it," \
  "logits agree"
