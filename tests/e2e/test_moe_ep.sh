#!/usr/bin/env bash
# Expert parallelism ([parallel] ep): at dp 4 in deterministic mode with one
# micro-batch a rank, ep 2 and ep 4 (each rank holding 2 or 1 of the 4
# experts, the tokens traded by all-to-all) give ep 1's loss curve, routes
# per expert and final parameters bit for bit, as do dp 2 x cp 2 at ep 4,
# dp 2 x pp 2 at ep 2 and the llama arch with a shared expert at ep 2;
# dp 2 x pp 2 at ep 2 under zb1 (the sparse blocks' backward in two halves,
# the holders keeping the rows' output gradients to the weight half) gives
# 1f1b's bits with and without full recomputation, and so does the
# interleaved schedule over 4 chunks a stage;
# with two micro-batches a rank, ep 2 and 4 within 1e-6; ZeRO-1, 2 and 3 at ep 2 as at
# ep 1 and as adam; a checkpoint of ep 1 resumes at ep 2 and one of ep 2 at
# ep 1, gathered or sharded, each as the straight run; config check
# counts a rank's all-to-all bytes and experts; and what ep cannot run
# with yet is refused before step 1, naming the keys.
source "$(dirname "$0")/lib.sh"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 model.moe_z_loss=0.001 model.moe_bias_rate=0.001"
D="run.steps=4 run.deterministic=true run.ckpt_every=2 data.micro_batch=1 data.global_batch=4 parallel.dp=4 $MOE"
train ep1 $D
train ep2 $D parallel.ep=2
grep -q "^plait: layout dp=4 tp=1 pp=1 ep=2 (" "$E2E_WORK/ep2.out" || fail "the layout line omits ep: $(grep layout "$E2E_WORK/ep2.out")"
train ep4 $D parallel.ep=4
for r in ep2 ep4; do
  same_losses ep1 "$r" 0
  same_params ep1 "$r" bits model
  for e in 0 1 2 3; do
    [ "$(column ep1 moe_tokens_$e)" = "$(column "$r" moe_tokens_$e)" ] ||
      fail "$r routed other tokens to expert $e than ep 1"
  done
done
grep -q "step 4" "$E2E_WORK/ep4.out" || fail "ep 4 did not reach step 4: $(tail -n 3 "$E2E_WORK/ep4.out")"

# ZeRO-1, 2 and 3 shard an expert tensor over the ranks holding the same
# experts (edp) and the dense ones over dp: ep 2 as ep 1 bit for bit, and
# as adam at ep 1 (without moe_bias_rate, which ZeRO-3 refuses)
Z="${D/model.moe_bias_rate=0.001/}"
train za $Z
for z in zero1 zero2 zero3; do
  train "${z}_ep1" $Z optim.plugin=$z
  train "${z}_ep2" $Z optim.plugin=$z parallel.ep=2
  same_losses za "${z}_ep2" 0
  same_params "${z}_ep1" "${z}_ep2" bits
  same_params za "${z}_ep2" bits model
done

# ep carved out of dp x cp: dp 2 x cp 2 at ep 4 as at ep 1
C="run.steps=4 run.deterministic=true run.ckpt_every=4 data.micro_batch=1 data.global_batch=2 parallel.dp=2 \
parallel.cp=2 $MOE"
train cp1 $C
train cp_ep4 $C parallel.ep=4
same_losses cp1 cp_ep4 0
same_params cp1 cp_ep4 bits model
# with pipeline parallelism (hybrid): dp 2 x pp 2, each stage's experts
# split over its ep group
P="run.steps=4 run.deterministic=true run.ckpt_every=4 data.micro_batch=1 data.global_batch=2 model.n_layer=4 \
parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 $MOE"
train pp1 $P
train pp_ep2 $P parallel.ep=2
same_losses pp1 pp_ep2 0
same_params pp1 pp_ep2 bits model
# zb1 against 1f1b, four micro-batches a rank so that weight halves wait
Z1="${P/data.global_batch=2/data.global_batch=8} parallel.ep=2"
for r in none full; do
  train "pp_1f1b_$r" $Z1 model.recompute=$r
  train "pp_zb1_$r" $Z1 model.recompute=$r parallel.pp.schedule=zb1
  same_losses "pp_1f1b_$r" "pp_zb1_$r" 0
  same_params "pp_1f1b_$r" "pp_zb1_$r" bits
done
# interleaved, 4 chunks a stage of a sparse block each (6 blocks): the
# block chunks share their slots, a slot moving to another chunk's block
# with its experts' parts carved afresh and its held rows handed on;
# 1f1b's bits
I="${Z1/model.n_layer=4/model.n_layer=6}"
train pp_1f1b_6 $I
train pp_il4_6 $I parallel.pp.schedule=interleaved parallel.pp.virtual_stages=4
same_losses pp_1f1b_6 pp_il4_6 0
same_params pp_1f1b_6 pp_il4_6 bits
# two micro-batches a rank (accumulation_steps 2) at dp 4: the holder
# sums each micro-batch's sources before the micro-batches, ep 1 each
# rank's micro-batches before the ranks, so the experts' gradients round
# otherwise (docs/parallelism.md "Exactness"): ep 2 and ep 4 hold ep 1's
# losses within 1e-6 and its weights within 1e-5, relative
A="run.steps=4 run.deterministic=true run.ckpt_every=4 data.micro_batch=1 data.global_batch=8 parallel.dp=4 $MOE"
train acc1 $A
for e in 2 4; do
  train acc_ep$e $A parallel.ep=$e
  same_losses acc1 acc_ep$e 1e-6
  same_params acc1 acc_ep$e 1e-5
done
# the llama arch's experts (gate, up and down projections), beside a
# shared expert every token passes through
CFG=$(dirname "$0")/llama.ini
train lep1 $D model.moe_shared_experts=1
train lep2 $D model.moe_shared_experts=1 parallel.ep=2
same_losses lep1 lep2 0
same_params lep1 lep2 bits model
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini

# ep 1's step-2 checkpoint resumed at ep 2, and ep 2's at ep 1: steps 3-4
# as the straight runs
cp -r "$E2E_WORK/ep1" "$E2E_WORK/to2"
rm -r "$E2E_WORK/to2/ckpt-00000004"
train to2 $D parallel.ep=2 --resume
same_losses ep1 to2 0
same_params ep1 to2 bits model
cp -r "$E2E_WORK/ep2" "$E2E_WORK/to1"
rm -r "$E2E_WORK/to1/ckpt-00000004"
train to1 $D --resume
same_losses ep2 to1 0
same_params ep2 to1 bits model

# sharded checkpoints: each expert slice written once, by a rank of the
# edp group holding it, under its global name and offsets; ZeRO-2's of ep
# 1 resumes at ep 2 and ep 2's at ep 1, adam's of ep 2 at ep 1, each as
# the straight run (the resumed runs save gathered, as the references)
S="run.ckpt_format=sharded"
train zs1 $Z optim.plugin=zero2 $S
train zs2 $Z optim.plugin=zero2 parallel.ep=2 $S
grep -q "shard-00003" "$E2E_WORK/zs2/ckpt-00000002/index.json" || fail "ep 2's sharded save has no rank 3 shard"
train as2 $D parallel.ep=2 $S
same_losses zero2_ep1 zs2 0
for r in zs1:2 zs2:1 as2:1; do
  from=${r%:*} ep=${r#*:}
  rm -rf "$E2E_WORK/${from}_to$ep"
  cp -r "$E2E_WORK/$from" "$E2E_WORK/${from}_to$ep"
  rm -r "$E2E_WORK/${from}_to$ep/ckpt-00000004"
  case $from in as2) O="$D" ;; *) O="$Z optim.plugin=zero2" ;; esac
  train "${from}_to$ep" $O parallel.ep=$ep --resume
  grep -q "resuming from $E2E_WORK/${from}_to$ep/ckpt-00000002" "$E2E_WORK/${from}_to$ep.out" ||
    fail "${from}_to$ep did not resume from step 2"
  case $from in as2) same_params ep1 "${from}_to$ep" bits ;; *) same_params zero2_ep1 "${from}_to$ep" bits ;; esac
done

# config check counts a rank's trades and experts (moe-tiny at dp 2, ep 2
# by hand: 4 sparse blocks x 1 micro-batch x (4 trades x 256 tokens x 2
# routes x 64 floats x 4 bytes x 1/2 leaving + 4 counts x 4 bytes) = 1048640)
"$PLAIT_BIN" config check "$PLAIT_SOURCE_DIR/configs/moe-tiny.ini" parallel.dp=2 parallel.ep=2 \
  >"$E2E_WORK/check.out" 2>&1 || fail "config check at ep 2: $(cat "$E2E_WORK/check.out")"
grep -qF "all-to-all bytes a step: 1048640 a rank sends at ep 2" "$E2E_WORK/check.out" ||
  fail "config check's all-to-all count: $(sed -n 2p "$E2E_WORK/check.out")"
grep -qF "each rank holds 4 of the 8 experts, 0.265M routed experts' parameters" "$E2E_WORK/check.out" ||
  fail "config check's experts a rank: $(sed -n 2p "$E2E_WORK/check.out")"

refused() { # NAME EXPECTED overrides...: config check and train refuse, train before step 1
  local name=$1 want=$2; shift 2
  if "$PLAIT_BIN" config check "$CFG" "$@" >"$E2E_WORK/$name.check" 2>&1; then fail "config check accepted $*"; fi
  grep -qF -- "$want" "$E2E_WORK/$name.check" || fail "config check $*: $(cat "$E2E_WORK/$name.check")"
  train_refused "$name" "$want" run.out_dir="$E2E_WORK/$name" "$@"
  ! grep -q "^step " "$E2E_WORK/$name.out" || fail "train $* ran a step"
}
refused dense "[parallel] ep = 2: expert parallelism splits a mixture-of-experts model's experts, and this model \
has none" parallel.dp=2 parallel.ep=2
echo "ep: ep 2 and 4 bit-identical to ep 1, resumes across ep, refusals named"
