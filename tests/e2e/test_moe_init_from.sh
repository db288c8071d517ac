#!/usr/bin/env bash
# [run] init_from of a checkpoint plait saved from a mixture of experts
# (gpt and llama archs): read at another layout (ep 2, tp 2 x ep 2), every
# tensor is the checkpoint's bit for bit (one step at lr = 0 changes
# nothing), and the layouts train on with one loss curve (within 1e-6); a run whose
# experts differ in shape, or a dense run, is refused naming the file and
# the key.
source "$(dirname "$0")/lib.sh"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64"
D="run.deterministic=true data.micro_batch=1 data.global_batch=4 $MOE"
for arch in gpt llama; do
  [ "$arch" = llama ] && CFG=$(dirname "$0")/llama.ini
  train "${arch}src" $D run.steps=3 run.ckpt_every=3
  SRC=$E2E_WORK/${arch}src
  # lr 0: the weights read are the weights saved, at each layout
  for l in "one" "ep2 parallel.dp=2 parallel.ep=2" "tpep parallel.plugin=hybrid parallel.tp=2 parallel.dp=2 parallel.ep=2"; do
    set -- $l
    name=$arch$1
    shift
    train "$name" $D run.steps=1 run.ckpt_every=1 optim.lr=0 optim.min_lr=0 run.init_from="$SRC" "$@"
    "$CKPT_DIFF" "$(last_ckpt "${arch}src")" "$(last_ckpt "$name")" --files model --rtol 0 ||
      fail "$arch: init_from at $name did not read the checkpoint's weights exactly"
    train "${name}t" $D run.steps=3 run.init_from="$SRC" "$@"
  done
  # other micro-batch counts and tp's sums: within the bound of ep's other layouts
  same_losses "${arch}onet" "${arch}ep2t" 1e-6
  same_losses "${arch}onet" "${arch}tpept" 1e-6
  train_refused "${arch}wider" "$SRC/ckpt-00000003/model.safetensors: the model was trained with [model] moe_experts = 4, the run has moe_experts = 8" \
    "run.out_dir=$E2E_WORK/${arch}wider" $D run.steps=1 model.moe_experts=8 run.init_from="$SRC"
  train_refused "${arch}dense" "the model was trained with [model] moe_experts = 4, the run has moe_experts = 0" \
    "run.out_dir=$E2E_WORK/${arch}dense" run.steps=1 run.init_from="$SRC"
done
