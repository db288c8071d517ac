#!/usr/bin/env bash
# Checkpoints across TP sizes: checkpoints hold full tensors with
# nanoGPT names whatever the layout. A tp = 2 run's checkpoint at step 10
# equals one process's (model and optimizer state, within 1e-4 relative);
# a single-process checkpoint resumed at tp = 2 and at tp = 4, and a tp = 2
# checkpoint resumed in one process, continue the single-process curve (loss
# within 1e-5 relative for the resumed steps, final parameters within 1e-4).
# With a vocabulary that tp must pad (257: 258 rows at tp 2, 260 at tp 4)
# one process resumes at tp 4 and tp 4 in one process, and the final
# checkpoints (model and optimizer state, unpadded 257-row tensors) match
# one process's.
source "$(dirname "$0")/lib.sh"
A="run.steps=20 optim.lr_decay_steps=20 run.ckpt_every=10 parallel.plugin=hybrid"
train one $A
# one process -> tp 2, tp 4
for tp in 2 4; do
  train "one_tp$tp" $A run.steps=10
  train "one_tp$tp" $A parallel.tp=$tp --resume
  grep -q "resuming from $E2E_WORK/one_tp$tp/ckpt-00000010" "$E2E_WORK/one_tp$tp.out" || fail "one_tp$tp did not resume"
  same_losses one "one_tp$tp" 1e-5
  same_params one "one_tp$tp" 1e-4
done
# tp 2 -> one process; the tp 2 checkpoint is the full model and optimizer
train tp2_one $A parallel.tp=2 run.steps=10
"$CKPT_DIFF" "$E2E_WORK/one/ckpt-00000010" "$E2E_WORK/tp2_one/ckpt-00000010" --files all --rtol 1e-4 ||
  fail "the tp = 2 checkpoint differs from one process's"
train tp2_one $A --resume
same_losses one tp2_one 1e-5
same_params one tp2_one 1e-4
# the resumed rows follow on: steps 1..20 once each
[ "$(column tp2_one step | tr '\n' ' ')" = "$(column one step | tr '\n' ' ')" ] || fail "metrics.csv not continuous"
# vocabulary 257: padded slices map to and from the checkpoint's full rows
V="model.vocab_size=257"
train one257 $A $V
train one257_tp4 $A $V run.steps=10
train one257_tp4 $A $V parallel.tp=4 --resume
train tp4_one257 $A $V parallel.tp=4 run.steps=10
"$CKPT_DIFF" "$E2E_WORK/one257/ckpt-00000010" "$E2E_WORK/tp4_one257/ckpt-00000010" --files all --rtol 1e-4 ||
  fail "the tp = 4 checkpoint with vocabulary 257 differs from one process's"
train tp4_one257 $A $V --resume
for r in one257_tp4 tp4_one257; do
  grep -q "resuming from $E2E_WORK/$r/ckpt-00000010" "$E2E_WORK/$r.out" || fail "$r did not resume"
  same_losses one257 $r 1e-5
  same_params one257 $r 1e-4 all
done
echo "tp resume OK"
