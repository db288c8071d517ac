#!/usr/bin/env bash
# A resume continues the same mixture of experts: a checkpoint with experts
# resumed with another router (softmax -> sigmoid), another expert count
# or width, or none at all, and a dense checkpoint resumed with experts,
# are each refused before step 1 naming the [model] key, both values and
# how to continue, as [run] init_from refuses them; nothing in the run
# directory is touched. moe_top_k and the losses' coefficients are how it
# trains on: a resume with another top k goes on.
source "$(dirname "$0")/lib.sh"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64"
S="run.steps=2 run.ckpt_every=2"
train moe $S $MOE
train dense $S
listing() { ls -lR "$E2E_WORK/$1" | grep -v ' rank-[0-9]*\.log$' | md5sum; }
before=$(listing moe)
# refused NAME EXPECTED ARGS...: the resume of NAME refused naming EXPECTED, no step run
refused() {
  local name=$1 want=$2; shift 2
  train_refused "$name-refused" "$want" "run.out_dir=$E2E_WORK/$name" run.steps=4 --resume "$@"
  ! grep -q "^step " "$E2E_WORK/$name-refused.out" || fail "the resume of $name ($*) ran a step"
}
refused moe "holds a model with [model] moe_router = softmax, but this run has moe_router = sigmoid" \
  $MOE model.moe_router=sigmoid
grep -qF "give model.moe_router=softmax to continue it" "$E2E_WORK/moe-refused.out" ||
  fail "no way to continue named: $(tail -n 3 "$E2E_WORK/moe-refused.out")"
refused moe "holds a model with [model] moe_experts = 4, but this run has moe_experts = 8" \
  model.moe_experts=8 model.moe_top_k=2 model.moe_ffn_hidden=64
refused moe "holds a model with [model] moe_ffn_hidden = 64, but this run has moe_ffn_hidden = 32" \
  model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=32
refused moe "holds a model with [model] moe_experts = 4, but this run has moe_experts = 0"
refused dense "holds a model with [model] moe_experts = 0, but this run has moe_experts = 4" $MOE
[ "$(listing moe)" = "$before" ] || fail "a refused resume changed the run directory"
# another top k is how the same experts train on
train moe run.steps=4 run.ckpt_every=2 $MOE model.moe_top_k=1 --resume
echo "moe resume: another router, expert count or width, and dense <-> experts refused naming the key"
