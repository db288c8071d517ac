#!/usr/bin/env bash
# Mixture-of-experts models ([model] moe_*) in training, deterministic
# mode: dp, pp (1f1b, interleaved, zb1 with the sparse blocks' backward
# in two halves), dp x pp and ZeRO-1/3 give one process's loss curve and
# final parameters bit for bit (the experts' gradients, the auxiliary
# losses' and the selection bias moved after each step by the world's
# counts), for the gpt and llama archs; a run resumes from another
# layout's checkpoint; the loss falls; metrics.csv counts every route
# (moe_tokens_*) and warns when a router collapses; config check counts
# the experts' parameters; plait sample reads a checkpoint with experts,
# plait export refuses it; and what the experts
# cannot run with yet is refused before step 1, naming the keys:
# ep not dividing dp x cp or moe_experts, top_k
# above the experts, a moe key on a dense model. The selection bias is a
# model buffer, whole on every rank: ZeRO-3 (gathered and sharded
# checkpoints, resumed) moves it as one process does, and ZeRO-2 gathering
# bf16 weights as adam does.
source "$(dirname "$0")/lib.sh"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 model.moe_z_loss=0.001 model.moe_bias_rate=0.001"
D="run.steps=6 run.deterministic=true run.ckpt_every=3 data.micro_batch=1 data.global_batch=4 $MOE"
train one $D
train dp2 $D parallel.dp=2
train pp2 $D parallel.plugin=hybrid parallel.pp=2
train zb1 $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1
train zero1 $D parallel.dp=2 optim.plugin=zero1
train zero3 $D parallel.dp=2 optim.plugin=zero3
for r in dp2 pp2 zb1 zero1 zero3; do same_losses one "$r" 0; same_params one "$r" bits model; done
# the selection bias is a model buffer: ZeRO-3 resumes it from its own
# checkpoint (gathered and sharded) as the straight run
rm -r "$E2E_WORK/zero3/ckpt-00000006"
train zero3 $D parallel.dp=2 optim.plugin=zero3 --resume
same_losses one zero3 0
same_params one zero3 bits model
train zero3s $D parallel.dp=2 optim.plugin=zero3 run.ckpt_format=sharded
rm -r "$E2E_WORK/zero3s/ckpt-00000006"
train zero3s $D parallel.dp=2 optim.plugin=zero3 run.ckpt_format=sharded --resume
same_losses one zero3s 0
# ZeRO-2 gathering bf16 weights rounds them (other losses), and moves the
# bias as adam does: both checkpoints' biases moved, and equal
train zero2bf $D parallel.dp=2 optim.plugin=zero2 optim.zero2.param_gather=bf16
python3 - "$E2E_WORK/one/ckpt-00000006/model.safetensors" "$E2E_WORK/zero2bf/ckpt-00000006/model.safetensors" <<'PY' ||
import json, struct, sys
def biases(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in h.items()
            if k.endswith("expert_bias")}
a, z = biases(sys.argv[1]), biases(sys.argv[2])
sys.exit(not (len(a) == 2 and a == z and all(any(x) for x in a.values())))
PY
  fail "ZeRO-2 with param_gather = bf16 moved the selection bias otherwise than adam (or not at all)"
train one4 $D model.n_layer=4
train il $D model.n_layer=4 parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=interleaved \
  parallel.pp.virtual_stages=2
same_losses one4 il 0
same_params one4 il bits model
# the step-3 checkpoint of one process resumed as dp 2 x pp 2: steps 4-6 as the straight run's
rm -r "$E2E_WORK/one/ckpt-00000006"
train one $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 --resume
same_losses one dp2 0
same_params one dp2 bits model
# every route counted: 2 sparse blocks x 4 sequences x 32 tokens x top 2 = 512 a step
awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i ~ /^moe_tokens_/) c[i] = 1; next }
  { s = 0; for (i in c) s += $i; if (s != 512) { print "step " $1 ": " s " routes"; bad = 1 } } END { exit bad }' \
  "$E2E_WORK/one/metrics.csv" || fail "metrics.csv's moe_tokens_* do not add up to every route"
[ "$(column one moe_aux_loss | grep -c .)" = 6 ] || fail "metrics.csv has no moe_aux_loss for every step"
# plait sample rebuilds the sparse blocks from the checkpoint's metadata alone
"$PLAIT_BIN" sample "$E2E_WORK/one" --prompt "LOVE" --tokens 8 >"$E2E_WORK/sample.out" 2>&1 ||
  fail "sample of a mixture of experts: $(tail -n 3 "$E2E_WORK/sample.out")"
# export refuses it rather than writing a dense model without its MLPs
if "$PLAIT_BIN" export "$E2E_WORK/one" --format hf --out "$E2E_WORK/exported" >"$E2E_WORK/export.out" 2>&1; then
  fail "export wrote a mixture of experts as a dense model"
fi
grep -qF "a mixture of experts (moe_experts = 4)" "$E2E_WORK/export.out" || fail "export: $(cat "$E2E_WORK/export.out")"

# the llama arch, dp x pp against one process
CFG=$(dirname "$0")/llama.ini
train lone $D
train ldp2pp2 $D parallel.plugin=hybrid parallel.dp=2 parallel.pp=2
train lzb1 $D parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1 model.recompute=selective
for r in ldp2pp2 lzb1; do same_losses lone "$r" 0; same_params lone "$r" bits model; done
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini

# 40 steps: the loss falls; an expert taking nearly every token is named
train falls run.steps=40 $MOE model.moe_aux_loss=0 model.moe_bias_rate=0 optim.lr=1e-2
first=$(column falls loss | head -n 1) last=$(column falls loss | tail -n 1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.8 * a) }' || fail "the loss went from $first to $last"
grep -q "the router of block h.[01] collapsed: expert [0-3] took" "$E2E_WORK/falls.out" ||
  echo "(no router collapsed in 40 steps without balancing)"

# config check counts the experts (moe-tiny by hand: 4 blocks x 8 experts x
# (2 x 128 x 64 + 128 + 64) = 530432 of 620704; a token uses 2 of 8 and no
# selection bias: 530432 / 4 + 620704 - 530432 - 4 x 8 = 222848)
"$PLAIT_BIN" config check "$PLAIT_SOURCE_DIR/configs/moe-tiny.ini" >"$E2E_WORK/check.out" 2>&1 ||
  fail "config check of moe-tiny: $(cat "$E2E_WORK/check.out")"
grep -qF "8 experts, top 2: 0.621M parameters, 0.530M of them the routed experts'; 0.223M active a token" \
  "$E2E_WORK/check.out" || fail "config check's expert count: $(head -n 2 "$E2E_WORK/check.out")"

# refused by config check, and by train before step 1 (before any rank
# starts where the layout has several)
refused() { # EXPECTED overrides...
  local want=$1; shift
  if "$PLAIT_BIN" config check "$CFG" "$@" >"$E2E_WORK/out" 2>&1; then fail "config check accepted $*"; fi
  grep -qF -- "$want" "$E2E_WORK/out" || fail "config check $*: $(cat "$E2E_WORK/out")"
  rm -rf "$E2E_WORK/refused"
  if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/refused" "$@" >"$E2E_WORK/out" 2>&1; then fail "trained with $*"; fi
  grep -qF -- "$want" "$E2E_WORK/out" || fail "train $*: $(cat "$E2E_WORK/out")"
  ! grep -q "^step " "$E2E_WORK/out" || fail "train $* ran a step: $(cat "$E2E_WORK/out")"
  ! ls -d "$E2E_WORK/refused"/ckpt-* >/dev/null 2>&1 || fail "train $* saved a checkpoint"
}
refused "[parallel] ep = 3 does not divide [model] moe_experts = 4" $MOE parallel.dp=3 parallel.ep=3 data.global_batch=6
refused "[parallel] ep = 3 does not divide dp 2 x cp 1 = 2" $MOE parallel.dp=2 parallel.ep=3
refused "[model] moe_top_k = 5 is more than moe_experts = 4" $MOE model.moe_top_k=5
refused "[model] moe_router configures a mixture of experts, and this model has none" model.moe_router=sigmoid
echo "moe: layouts bit-identical, resume across layouts, routes counted, refusals named"
