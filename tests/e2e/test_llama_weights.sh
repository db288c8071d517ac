#!/usr/bin/env bash
# Llama weights in and out, without PyTorch: a trained llama run, exported
# as hf (LlamaForCausalLM's config.json and names, lm_head left out when
# tied), imports back bit-identical through [run] init_from, untied and
# tied; plait sample reads a llama run's checkpoint; a config.json that
# does not describe the run's model, a plait model of the other arch, a
# resume with another llama key, and --format nanogpt are refused naming
# the key, both values or the arch; a run with Llama 3.1's rope scaling
# goes out and back the same way.
CFG=$(dirname "$0")/llama.ini
source "$(dirname "$0")/lib.sh"
D="run.steps=3 data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
Z="run.steps=1 optim.lr=0 optim.min_lr=0 data.path=$PLAIT_SOURCE_DIR/data/corpus.txt"
for tie in false true; do
  train "trained_$tie" $D model.tie_embeddings=$tie
  "$PLAIT_BIN" export "$E2E_WORK/trained_$tie" --format hf --out "$E2E_WORK/exp_$tie" >"$E2E_WORK/exp_$tie.out" 2>&1 ||
    fail "export a llama: $(cat "$E2E_WORK/exp_$tie.out")"
  grep -q "as Hugging Face LlamaForCausalLM" "$E2E_WORK/exp_$tie.out" || fail "export did not say LlamaForCausalLM"
  J=$E2E_WORK/exp_$tie/config.json
  for want in '"model_type": "llama"' '"architectures": \["LlamaForCausalLM"\]' '"num_key_value_heads": 2' \
    '"intermediate_size": 176' '"hidden_size": 64' '"rms_norm_eps": 1e-05' '"rope_theta": 10000.0' \
    '"max_position_embeddings": 32' "\"tie_word_embeddings\": $tie" '"torch_dtype": "float32"'; do
    grep -q "$want" "$J" || fail "config.json lacks $want: $(cat "$J")"
  done
  heads=$(grep -a -c '"lm_head.weight"' "$E2E_WORK/exp_$tie/model.safetensors" || true)
  [ "$heads" = "$([ $tie = true ] && echo 0 || echo 1)" ] || fail "tie_embeddings=$tie: $heads lm_head.weight tensors"
  train "back_$tie" $Z model.tie_embeddings=$tie run.init_from="$E2E_WORK/exp_$tie"
  grep -q "initial weights from $E2E_WORK/exp_$tie/model.safetensors (Llama-family" "$E2E_WORK/back_$tie.out" ||
    fail "no line naming the llama weights: $(grep -i 'initial weights' "$E2E_WORK/back_$tie.out")"
  same_params "trained_$tie" "back_$tie" 0
done

# plait sample rebuilds the llama from the checkpoint's recorded keys
"$PLAIT_BIN" sample "$E2E_WORK/trained_false" --tokens 4 --prompt "The" >"$E2E_WORK/sample.out" 2>&1 ||
  fail "plait sample of a llama run: $(tail -n 2 "$E2E_WORK/sample.out")"

# refusals, naming what differs
train_refused kv "num_key_value_heads = 2, but the run has [model] n_kv_head = 4" $Z model.n_kv_head=4 \
  run.init_from="$E2E_WORK/exp_false" "run.out_dir=$E2E_WORK/kv"
train_refused theta "rope_theta = 10000, but the run has [model] rope_theta = 500" $Z model.rope_theta=500 \
  run.init_from="$E2E_WORK/exp_false" "run.out_dir=$E2E_WORK/theta"
# a gpt config of the same sizes (a llama config with arch = gpt is
# refused for its llama keys first)
GPT=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
CFG=$GPT train_refused gpt_from_llama "a plait model of [model] arch = llama, but this run has arch = gpt" $Z \
  run.init_from="$E2E_WORK/trained_false" "run.out_dir=$E2E_WORK/gpt_from_llama"
train_refused resume_theta "it holds a model with [model] rope_theta = 10000, but this run has rope_theta = 500" \
  $D model.rope_theta=500 "run.out_dir=$E2E_WORK/trained_false" --resume
CFG=$GPT train_refused resume_gpt "it holds a model with [model] arch = llama, but this run has arch = gpt" \
  $D "run.out_dir=$E2E_WORK/trained_false" --resume
# Llama 3.1's rope scaling: recorded, exported as config.json's
# rope_scaling, read back bit-identical, sampled; a resume or an import
# without it refused naming the key
R="model.rope_scaling=llama3 model.rope_original_max_pos=16"
train rope $D $R
"$PLAIT_BIN" export "$E2E_WORK/rope" --format hf --out "$E2E_WORK/exp_rope" >"$E2E_WORK/exp_rope.out" 2>&1 ||
  fail "export a llama with rope scaling: $(cat "$E2E_WORK/exp_rope.out")"
for want in '"rope_type": "llama3"' '"factor": 8.0' '"low_freq_factor": 1.0' '"high_freq_factor": 4.0' \
  '"original_max_position_embeddings": 16'; do
  grep -q "$want" "$E2E_WORK/exp_rope/config.json" || fail "config.json lacks $want: $(cat "$E2E_WORK/exp_rope/config.json")"
done
train back_rope $Z $R run.init_from="$E2E_WORK/exp_rope"
same_params rope back_rope 0
"$PLAIT_BIN" sample "$E2E_WORK/rope" --tokens 4 --prompt "The" >"$E2E_WORK/sample_rope.out" 2>&1 ||
  fail "plait sample of a llama run with rope scaling: $(tail -n 2 "$E2E_WORK/sample_rope.out")"
train_refused rope_none "rope_scaling = type 'llama3', but the run has [model] rope_scaling = none" $Z \
  run.init_from="$E2E_WORK/exp_rope" "run.out_dir=$E2E_WORK/rope_none"
train_refused resume_rope "it holds a model with [model] rope_scaling = llama3, but this run has rope_scaling = none" \
  $D "run.out_dir=$E2E_WORK/rope" --resume
if "$PLAIT_BIN" export "$E2E_WORK/trained_false" --format nanogpt --out "$E2E_WORK/ng" >"$E2E_WORK/ng.out" 2>&1; then
  fail "a llama exported as nanogpt"
fi
grep -q "allowed for llama: --format hf" "$E2E_WORK/ng.out" || fail "unclear nanogpt refusal: $(cat "$E2E_WORK/ng.out")"
echo "llama weights OK: exported as LlamaForCausalLM and read back bit-identical, tied and untied; refusals named"
