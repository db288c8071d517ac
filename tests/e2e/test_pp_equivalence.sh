#!/usr/bin/env bash
# Pipeline parallelism reproduces one process, 30 steps each.
# Deterministic mode: pp = 2 and 4 with gpipe, 1f1b, zb1 and interleaved
# (virtual_stages = 2) are bit-identical to one process accumulating the same
# micro-batches (losses and every tensor of the checkpoint, optimizer state
# included) — PP does not change the arithmetic. Also with fewer
# micro-batches than stages (m = 2 and m = 1 at pp = 4) and an explicit
# partition. Default (non-deterministic) mode: pp = 2 and 4 with each
# schedule within 1e-5 relative (loss) and 1e-4 (parameters), and zb1
# bit-identical to 1f1b there too (its weight halves accumulate in 1f1b's
# order); zb1 with ZeRO-3 over dp 2 x pp 2 bit-identical to 1f1b's.
# interleaved at pp = 4 needs 8 model chunks: n_layer = 6 (8 layers with
# the embedding and the head), against its own single-process reference.
source "$(dirname "$0")/lib.sh"
H="run.steps=30 parallel.plugin=hybrid"
D="$H run.deterministic=true data.micro_batch=1"       # m = 8 micro-batches per step
train ref $D parallel.pp=1
for p in 2 4; do
  for s in gpipe 1f1b zb1; do
    train "pp${p}_$s" $D parallel.pp=$p parallel.pp.schedule=$s
    same_losses ref "pp${p}_$s" 0; same_params ref "pp${p}_$s" bits
  done
done
train pp2_il $D parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
same_losses ref pp2_il 0; same_params ref pp2_il bits
train pp2_stages $D parallel.pp=2 parallel.pp.stages=0-0,1-3
same_losses ref pp2_stages 0; same_params ref pp2_stages bits
grep -q "explicit partition of layers 0,1-3" "$E2E_WORK/pp2_stages.out" || fail "explicit stages not used"

train ref6 $D model.n_layer=6
train pp4_il6 $D model.n_layer=6 parallel.pp=4 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
same_losses ref6 pp4_il6 0; same_params ref6 pp4_il6 bits
# 4 chunks a stage, a layer each: the block chunks share their slots (a
# slot moves from one chunk's layers to another's)
train pp2_il4_6 $D model.n_layer=6 parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=4
same_losses ref6 pp2_il4_6 0; same_params ref6 pp2_il4_6 bits

# m < pp: 2 micro-batches of 4 sequences, and 1 of 8, over 4 stages
train ref_m2 $H run.deterministic=true data.micro_batch=4
train ref_m1 $H run.deterministic=true data.micro_batch=8
for s in gpipe 1f1b zb1; do
  train "pp4_m2_$s" $H run.deterministic=true data.micro_batch=4 parallel.pp=4 parallel.pp.schedule=$s
  same_losses ref_m2 "pp4_m2_$s" 0; same_params ref_m2 "pp4_m2_$s" bits
  train "pp4_m1_$s" $H run.deterministic=true data.micro_batch=8 parallel.pp=4 parallel.pp.schedule=$s
  same_losses ref_m1 "pp4_m1_$s" 0; same_params ref_m1 "pp4_m1_$s" bits
done
train ref6_m2 $H run.deterministic=true data.micro_batch=4 model.n_layer=6
train pp4_il6_m2 $H run.deterministic=true data.micro_batch=4 model.n_layer=6 parallel.pp=4 \
  parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
same_losses ref6_m2 pp4_il6_m2 0; same_params ref6_m2 pp4_il6_m2 bits

# default mode (tree accumulation off): within float tolerance
N="$H data.micro_batch=2"
train one $N
for p in 2 4; do
  for s in gpipe 1f1b; do
    train "nd_pp${p}_$s" $N parallel.pp=$p parallel.pp.schedule=$s
    same_losses one "nd_pp${p}_$s" 1e-5; same_params one "nd_pp${p}_$s" 1e-4
  done
done
train nd_pp2_il $N parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
same_losses one nd_pp2_il 1e-5; same_params one nd_pp2_il 1e-4
train nd_pp4_zb1 $N parallel.pp=4 parallel.pp.schedule=zb1
same_losses nd_pp4_1f1b nd_pp4_zb1 0; same_params nd_pp4_1f1b nd_pp4_zb1 bits
Z="$D parallel.dp=2 parallel.pp=2 optim.plugin=zero3"
train z3_1f1b $Z parallel.pp.schedule=1f1b
train z3_zb1 $Z parallel.pp.schedule=zb1
same_losses z3_1f1b z3_zb1 0; same_params z3_1f1b z3_zb1 bits
echo "pp equivalence OK"
