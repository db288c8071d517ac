#!/usr/bin/env bash
# plait's llama against Hugging Face transformers (llama_torch_check.py),
# both ways: a random LlamaForCausalLM built and saved by transformers
# (nothing downloaded), read by [run] init_from, gives transformers'
# logits within 1e-4 of the largest logit and the same greedy tokens
# (plait sample --temperature 0 of a run that starts from it at lr 0);
# saved sharded it gives the same logits bit for bit, saved in bfloat16
# transformers' logits of those bfloat16 weights;
# llama runs trained by plait, untied and tied, exported with --format hf,
# loaded by LlamaForCausalLM.from_pretrained give plait's logits, and
# exported with --dtype bf16 and fp16 are read by it in that dtype, each
# tensor torch's rounding of the float32 export's; and a
# transformers model with Llama 3.1's rope scaling (rope_type llama3) gives
# plait's logits of it, read with [model] rope_scaling = llama3; and a
# Qwen2ForCausalLM (q, k and v biases) both ways, read and trained with
# [model] qkv_bias; Llama's, Qwen2's and Qwen3's heads of their own size
# (head_dim) both ways; a Qwen3ForCausalLM (q and k norms) read with
# [model] qk_norm, and a model trained with it exported as one; and a
# MistralForCausalLM without a sliding window read.
# Needs a python with torch, transformers and safetensors: PLAIT_TORCH_PYTHON
# names it (default python3); skipped (77) without them.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/torch_lib.sh"
torch_python "import torch, transformers, safetensors" "torch, transformers and safetensors"
CHECK=$PLAIT_SOURCE_DIR/tests/e2e/llama_torch_check.py
SHAPE="2 4 64 32 256 arch=llama n_kv_head=2 ffn_hidden=176"

# transformers -> plait
"$PY" "$CHECK" make "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" >"$E2E_WORK/make.out" 2>&1 ||
  fail "building the transformers model: $(tail -n 3 "$E2E_WORK/make.out")"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_hf.safetensors" $SHAPE ||
  fail "plait's logits of the transformers model"
"$PY" "$CHECK" logits "$E2E_WORK/hf" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_hf.safetensors" ||
  fail "plait's logits of the transformers model differ from transformers'"
ls "$E2E_WORK/hf-sharded/model.safetensors.index.json" >/dev/null || fail "transformers wrote no sharded model"
for v in sharded bf16; do
  # shellcheck disable=SC2086
  "$LOGITS" "$E2E_WORK/hf-$v" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_$v.safetensors" $SHAPE ||
    fail "plait's logits of the $v transformers model"
done
cmp -s "$E2E_WORK/plait_hf.safetensors" "$E2E_WORK/plait_sharded.safetensors" ||
  fail "the sharded save gives other logits than the single file"
"$PY" "$CHECK" logits "$E2E_WORK/hf-bf16" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_bf16.safetensors" ||
  fail "plait's logits of the bfloat16 transformers model differ from transformers'"
# Llama 3.1's rope scaling: the same logits, and a run without the scaling refused
"$PY" "$CHECK" make "$E2E_WORK/hf3" "$E2E_WORK/tokens3.safetensors" llama3 >"$E2E_WORK/make3.out" 2>&1 ||
  fail "building the transformers model with llama3 rope scaling: $(tail -n 3 "$E2E_WORK/make3.out")"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/hf3" "$E2E_WORK/tokens3.safetensors" "$E2E_WORK/plait_hf3.safetensors" $SHAPE \
  rope_scaling=llama3 rope_original_max_pos=16 || fail "plait's logits of the transformers model with llama3 scaling"
"$PY" "$CHECK" logits "$E2E_WORK/hf3" "$E2E_WORK/tokens3.safetensors" "$E2E_WORK/plait_hf3.safetensors" ||
  fail "plait's logits of the transformers model with llama3 rope scaling differ from transformers'"
# shellcheck disable=SC2086
if "$LOGITS" "$E2E_WORK/hf3" "$E2E_WORK/tokens3.safetensors" "$E2E_WORK/plait_no3.safetensors" $SHAPE \
  >"$E2E_WORK/no3.out" 2>&1; then
  fail "a model with llama3 rope scaling read by a run without it"
fi
# transformers 4 writes the scaling as rope_scaling, 5 as rope_parameters
grep -Eq "rope_(scaling|parameters) = type 'llama3'" "$E2E_WORK/no3.out" || fail "unclear refusal: $(cat "$E2E_WORK/no3.out")"
# Qwen2 (q, k and v biases: [model] qkv_bias): transformers' logits, both ways
"$PY" "$CHECK" make "$E2E_WORK/hfq" "$E2E_WORK/tokensq.safetensors" qwen2 >"$E2E_WORK/makeq.out" 2>&1 ||
  fail "building the transformers Qwen2 model: $(tail -n 3 "$E2E_WORK/makeq.out")"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/hfq" "$E2E_WORK/tokensq.safetensors" "$E2E_WORK/plait_hfq.safetensors" $SHAPE qkv_bias=true ||
  fail "plait's logits of the transformers Qwen2 model"
"$PY" "$CHECK" logits "$E2E_WORK/hfq" "$E2E_WORK/tokensq.safetensors" "$E2E_WORK/plait_hfq.safetensors" ||
  fail "plait's logits of the transformers Qwen2 model differ from transformers'"
# heads of their own size (head_dim 32 for a width of 64 over 4 heads), a
# Llama's, a Qwen2's and a Qwen3's (q and k norms: [model] qk_norm), and a
# Qwen3's of hidden_size / num_attention_heads
for v in headdim:llama qwen2h:qwen2 qwen3h:qwen3 qwen3:qwen3:16; do
  set -- ${v//:/ }
  HD=${3:-32}
  "$PY" "$CHECK" make "$E2E_WORK/hf-$1" "$E2E_WORK/tokens-$1.safetensors" "$2" $([ "$HD" = 32 ] && echo headdim) \
    >"$E2E_WORK/make-$1.out" 2>&1 || fail "building the transformers $v model: $(tail -n 3 "$E2E_WORK/make-$1.out")"
  Q=
  [ "$2" = qwen2 ] && Q=qkv_bias=true
  [ "$2" = qwen3 ] && Q=qk_norm=true
  # shellcheck disable=SC2086
  "$LOGITS" "$E2E_WORK/hf-$1" "$E2E_WORK/tokens-$1.safetensors" "$E2E_WORK/plait-$1.safetensors" \
    $SHAPE head_dim=$HD $Q || fail "plait's logits of the transformers $v model"
  "$PY" "$CHECK" logits "$E2E_WORK/hf-$1" "$E2E_WORK/tokens-$1.safetensors" "$E2E_WORK/plait-$1.safetensors" ||
    fail "plait's logits of the transformers $v model differ from transformers'"
done
# a Qwen3 file read by a run without q and k norms: refused, saying what would load it
# shellcheck disable=SC2086
if "$LOGITS" "$E2E_WORK/hf-qwen3h" "$E2E_WORK/tokens-qwen3h.safetensors" "$E2E_WORK/plait-noqk.safetensors" $SHAPE \
  head_dim=32 >"$E2E_WORK/noqk.out" 2>&1; then
  fail "a Qwen3 model read by a run without qk_norm"
fi
grep -q "give model.qk_norm=true" "$E2E_WORK/noqk.out" || fail "unclear refusal: $(cat "$E2E_WORK/noqk.out")"
# Mistral (model_type mistral, no sliding window): read as a Llama
"$PY" "$CHECK" make "$E2E_WORK/hfm" "$E2E_WORK/tokensm.safetensors" mistral >"$E2E_WORK/makem.out" 2>&1 ||
  fail "building the transformers Mistral model: $(tail -n 3 "$E2E_WORK/makem.out")"
grep -q '"model_type": "mistral"' "$E2E_WORK/hfm/config.json" || fail "transformers wrote no Mistral config.json"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/hfm" "$E2E_WORK/tokensm.safetensors" "$E2E_WORK/plait_hfm.safetensors" $SHAPE ||
  fail "plait's logits of the transformers Mistral model"
"$PY" "$CHECK" logits "$E2E_WORK/hfm" "$E2E_WORK/tokensm.safetensors" "$E2E_WORK/plait_hfm.safetensors" ||
  fail "plait's logits of the transformers Mistral model differ from transformers'"
D="data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
train from_hf $D run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/hf"
"$PLAIT_BIN" sample "$E2E_WORK/from_hf" --prompt "The cat" --tokens 20 --temperature 0 >"$E2E_WORK/greedy.out" \
  2>"$E2E_WORK/greedy.err" || fail "plait sample: $(tail -n 2 "$E2E_WORK/greedy.err")"
"$PY" "$CHECK" greedy "$E2E_WORK/hf" "The cat" 20 "$E2E_WORK/greedy.out" ||
  fail "plait's greedy tokens differ from transformers'"

# plait -> transformers: trained, exported, loaded
for tie in false true; do
  train "trained_$tie" $D run.steps=5 model.tie_embeddings=$tie
  "$PLAIT_BIN" export "$E2E_WORK/trained_$tie" --format hf --out "$E2E_WORK/exp_$tie" >/dev/null || fail "export"
  # shellcheck disable=SC2086
  "$LOGITS" "$E2E_WORK/exp_$tie" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_$tie.safetensors" $SHAPE \
    tie_embeddings=$tie || fail "plait's logits of its export"
  "$PY" "$CHECK" logits "$E2E_WORK/exp_$tie" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_$tie.safetensors" ||
    fail "transformers' logits of plait's export (tie_embeddings=$tie) differ from plait's"
done
train trained_qkv $D run.steps=5 model.qkv_bias=true model.head_dim=32
"$PLAIT_BIN" export "$E2E_WORK/trained_qkv" --format hf --out "$E2E_WORK/exp_qkv" >/dev/null || fail "export (qkv_bias)"
grep -q '"Qwen2ForCausalLM"' "$E2E_WORK/exp_qkv/config.json" || fail "a qkv_bias model not exported as Qwen2ForCausalLM"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/exp_qkv" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_qkv.safetensors" $SHAPE qkv_bias=true \
  head_dim=32 ||
  fail "plait's logits of its Qwen2 export"
"$PY" "$CHECK" logits "$E2E_WORK/exp_qkv" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_qkv.safetensors" ||
  fail "transformers' logits of plait's Qwen2 export differ from plait's"
train trained_qkn $D run.steps=5 model.qk_norm=true model.head_dim=32
"$PLAIT_BIN" export "$E2E_WORK/trained_qkn" --format hf --out "$E2E_WORK/exp_qkn" >/dev/null || fail "export (qk_norm)"
grep -q '"Qwen3ForCausalLM"' "$E2E_WORK/exp_qkn/config.json" || fail "a qk_norm model not exported as Qwen3ForCausalLM"
# shellcheck disable=SC2086
"$LOGITS" "$E2E_WORK/exp_qkn" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_qkn.safetensors" $SHAPE qk_norm=true \
  head_dim=32 || fail "plait's logits of its Qwen3 export"
"$PY" "$CHECK" logits "$E2E_WORK/exp_qkn" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_qkn.safetensors" ||
  fail "transformers' logits of plait's Qwen3 export differ from plait's"
# half-size exports: transformers reads them in their dtype, each tensor
# torch's rounding of the float32 export's, and plait reads them back
for dt in bf16:bfloat16 fp16:float16; do
  "$PLAIT_BIN" export "$E2E_WORK/trained_false" --format hf --dtype "${dt%%:*}" --out "$E2E_WORK/exp_${dt%%:*}" \
    >/dev/null || fail "export --dtype ${dt%%:*}"
  "$PY" "$CHECK" rounded "$E2E_WORK/exp_false" "$E2E_WORK/exp_${dt%%:*}" "${dt#*:}" ||
    fail "transformers' reading of plait's --dtype ${dt%%:*} export is not torch's rounding of its float32 export"
  # shellcheck disable=SC2086
  "$LOGITS" "$E2E_WORK/exp_${dt%%:*}" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_${dt%%:*}.safetensors" $SHAPE \
    tie_embeddings=false || fail "plait's logits of its --dtype ${dt%%:*} export"
  "$PY" "$CHECK" logits "$E2E_WORK/exp_${dt%%:*}" "$E2E_WORK/tokens.safetensors" "$E2E_WORK/plait_${dt%%:*}.safetensors" ||
    fail "transformers' logits of plait's --dtype ${dt%%:*} export differ from plait's"
done
echo "llama in transformers OK: its model read by plait, plait's exports read by it, logits and greedy tokens agree"
