#!/usr/bin/env bash
# Tensor x expert parallelism (docs/parallelism.md "Experts under tensor
# parallelism", tp x ep): an expert tensor cut twice, its experts over ep
# and each one's width over tp. In deterministic mode dp 2 x tp 2 x ep 2
# (4 ranks, ep carved out of dp), also with sequence parallelism, under
# ZeRO-1, 2 and 3, and the llama arch with a shared expert, each within
# tp's documented tolerance of dp 2 at tp 1 ep 1 (losses within 1e-5
# relative, final parameters and Adam moments within 1e-4) with the same
# routes per expert; a checkpoint of tp 2 x ep 2 (gathered, or sharded:
# slices cut twice, index.json's format_version 2) resumes at tp 1 ep 1,
# and one of tp 1 ep 1 (gathered or sharded) at tp 2 x ep 2, each within
# the same tolerance of the straight run (at tp x ep itself bit for bit);
# init_from at tp x ep starts as init_from at tp 1 ep 1; config check
# counts a rank's experts cut twice.
source "$(dirname "$0")/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
# (run.mfu_peak: the progress lines' MFU against a given peak, so no run
# measures the GEMM rate first: seconds of CPU, again at every run on a
# busy machine, train/mfu_peak.h; nothing here reads MFU)
D="run.steps=4 run.deterministic=true run.eval_every=0 run.ckpt_every=2 data.global_batch=4 model.moe_bias_rate=0.001
  parallel.plugin=hybrid parallel.dp=2 run.mfu_peak=1000"
TPEP="parallel.tp=2 parallel.ep=2"
# each case: NAME|the reference's overrides|the tp x ep run's overrides
cases=(
  "gpt||"
  "sp||parallel.tp.sequence_parallel=true"
  "zero1|optim.plugin=zero1|optim.plugin=zero1"
  "zero2|optim.plugin=zero2|optim.plugin=zero2"
  "zero3|optim.plugin=zero3 model.moe_bias_rate=0|optim.plugin=zero3 model.moe_bias_rate=0"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name ref extra <<<"$c"
  train "ref_$name" $D $ref
  train "$name" $D $TPEP $extra
  same_losses "ref_$name" "$name" 1e-5
  same_params "ref_$name" "$name" 1e-4 all
  for e in 0 1 2 3 4 5 6 7; do
    [ "$(column "ref_$name" moe_tokens_$e)" = "$(column "$name" moe_tokens_$e)" ] ||
      fail "$name routed other tokens to expert $e than tp 1 ep 1"
  done
done
grep -q "step     4/4" "$E2E_WORK/gpt.out" || fail "tp x ep did not reach step 4: $(tail -n 3 "$E2E_WORK/gpt.out")"
# config check counts a rank's experts cut twice: half of ep 2's at tp 2
"$PLAIT_BIN" config check "$CFG" $D $TPEP >"$E2E_WORK/check.out" 2>&1 || fail "config check: $(cat "$E2E_WORK/check.out")"
grep -qF "each rank holds 4 of the 8 experts, each one's width over tp, 0.133M routed experts' parameters" \
  "$E2E_WORK/check.out" || fail "config check's experts a rank at tp x ep: $(sed -n 2p "$E2E_WORK/check.out")"

# checkpoints: tp 2 x ep 2's step 2 resumed at tp 1 ep 1, and tp 1 ep 1's
# (gathered, then sharded) at tp 2 x ep 2, each as the straight run
cp -r "$E2E_WORK/ref_gpt" "$E2E_WORK/straight"
cp -r "$E2E_WORK/gpt" "$E2E_WORK/straight_tpep"
rm -r "$E2E_WORK/gpt/ckpt-00000004"
train gpt $D --resume
same_params straight gpt 1e-4 all
rm -r "$E2E_WORK/ref_gpt/ckpt-00000004"
train ref_gpt $D $TPEP --resume
same_params straight ref_gpt 1e-4 all
train sharded $D run.ckpt_format=sharded
rm -r "$E2E_WORK/sharded/ckpt-00000004"
train sharded $D $TPEP --resume
same_params straight sharded 1e-4 all
# a sharded save at tp x ep: its experts' slices cut twice (index.json's
# format_version 2), its step 2 resumed at tp 1 ep 1 and at tp x ep
train xsharded $D $TPEP run.ckpt_format=sharded
grep -q '"format_version": 2' "$E2E_WORK/xsharded/ckpt-00000004/index.json" ||
  fail "a sharded save at tp x ep did not record its slices cut twice (format_version 2)"
grep -q '"second_dim": 2, "second_parts": 2, "second_index": 1' "$E2E_WORK/xsharded/ckpt-00000004/index.json" ||
  fail "no slice of c_proj's experts is cut twice in the index"
cp -r "$E2E_WORK/xsharded" "$E2E_WORK/xsharded_tpep"
rm -r "$E2E_WORK/xsharded/ckpt-00000004" "$E2E_WORK/xsharded_tpep/ckpt-00000004"
train xsharded $D --resume
same_params straight xsharded 1e-4 all
train xsharded_tpep $D $TPEP --resume
same_params straight_tpep xsharded_tpep bits # the same layout resumes bit for bit

# the llama arch, a shared expert beside the routed ones
CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
L="$D model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 model.moe_shared_experts=1"
train lref $L
train ltpep $L $TPEP
same_losses lref ltpep 1e-5
same_params lref ltpep 1e-4 all

# init_from at tp x ep: each expert's slice cut twice from the weights' whole tensor
train linit_ref $L run.init_from="$E2E_WORK/lref/ckpt-00000004"
train linit $L $TPEP run.init_from="$E2E_WORK/lref/ckpt-00000004"
same_losses linit_ref linit 1e-5
same_params linit_ref linit 1e-4 all
echo "moe under tp x ep: dp 2 x tp 2 x ep 2 (also with sequence parallelism, ZeRO-1/2/3, llama with a shared expert) as tp 1 ep 1; checkpoints and init_from across"
