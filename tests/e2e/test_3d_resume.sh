#!/usr/bin/env bash
# Every layout resumes every other: a dp 2 x tp 2 x pp 2
# checkpoint at step 10 is the full model and optimizer state (equal to one
# process's within 1e-4) and resumes into pp = 4 and into one process; a
# pp = 4 checkpoint resumes into dp 2 x tp 2 x pp 2; a single-process one
# into tp 2 x pp 2 (interleaved). Each continues the single-process curve
# (loss within 1e-5 relative, final parameters within 1e-4), and metrics.csv
# stays one table with steps 1..20 (the per-stage columns of both layouts).
# With a vocabulary that tp must pad (257), a dp 2 x tp 2 x pp 2 checkpoint
# resumes in one process; the final model and optimizer state match one
# process's.
source "$(dirname "$0")/lib.sh"
A="run.steps=20 optim.lr_decay_steps=20 run.ckpt_every=10 parallel.plugin=hybrid data.micro_batch=1"
D3="parallel.dp=2 parallel.tp=2 parallel.pp=2"
train one $A
train d3_pp4 $A $D3 run.steps=10
"$CKPT_DIFF" "$E2E_WORK/one/ckpt-00000010" "$E2E_WORK/d3_pp4/ckpt-00000010" --files all --rtol 1e-4 ||
  fail "the dp2 x tp2 x pp2 checkpoint differs from one process's"
rm -rf "$E2E_WORK/d3_one"
cp -r "$E2E_WORK/d3_pp4" "$E2E_WORK/d3_one"
cp "$E2E_WORK/d3_pp4.out" "$E2E_WORK/d3_one.out"
train d3_pp4 $A parallel.pp=4 --resume
train d3_one $A --resume
train pp4_d3 $A parallel.pp=4 run.steps=10
train pp4_d3 $A $D3 --resume
train one_tp2pp2 $A run.steps=10
train one_tp2pp2 $A parallel.tp=2 parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2 --resume
for r in d3_pp4 d3_one pp4_d3 one_tp2pp2; do
  grep -q "resuming from $E2E_WORK/$r/ckpt-00000010" "$E2E_WORK/$r.out" || fail "$r did not resume from step 10"
  same_losses one "$r" 1e-5
  same_params one "$r" 1e-4
  [ "$(column "$r" step | tr '\n' ' ')" = "$(column one step | tr '\n' ' ')" ] || fail "$r: metrics.csv not continuous"
  awk -F, 'NR == 1 { n = NF } NF != n { bad = 1 } END { exit bad }' "$E2E_WORK/$r/metrics.csv" ||
    fail "$r: metrics.csv rows of different widths"
done
V="model.vocab_size=257"
train one257 $A $V
train d3_one257 $A $V $D3 run.steps=10
"$CKPT_DIFF" "$E2E_WORK/one257/ckpt-00000010" "$E2E_WORK/d3_one257/ckpt-00000010" --files all --rtol 1e-4 ||
  fail "the dp2 x tp2 x pp2 checkpoint with vocabulary 257 differs from one process's"
train d3_one257 $A $V --resume
grep -q "resuming from $E2E_WORK/d3_one257/ckpt-00000010" "$E2E_WORK/d3_one257.out" || fail "d3_one257 did not resume"
same_losses one257 d3_one257 1e-5
same_params one257 d3_one257 1e-4 all
head -n 1 "$E2E_WORK/d3_pp4/metrics.csv" | grep -q "idle_ms_stage3" || fail "d3_pp4: the pp = 4 stage columns are missing"
echo "3-D resume OK"
