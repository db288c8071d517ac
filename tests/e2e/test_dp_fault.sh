#!/usr/bin/env bash
# A rank killed with SIGKILL mid-step at dp = 4 (see kill_midstep in lib.sh
# for what every survivor and the launcher must do), then recovery: the last
# checkpoint is intact and --resume continues it at dp = 2, bit-identical
# (deterministic mode) to one process that trained straight through.
#
# The job first trains to a checkpoint at step 10, then continues with no
# checkpoint to come, so the kill lands in a training step (gradient bucket
# all-reduce, or the step's other collectives), never in a checkpoint's commit.
source "$(dirname "$0")/lib.sh"
K=10 N=15
D="run.deterministic=true data.micro_batch=2 optim.lr_decay_steps=$N"
out=$E2E_WORK/run
train run $D parallel.dp=4 run.steps=$K
kill_midstep run 4 2 $((K + 1 + 10)) 10 --resume $D parallel.dp=4 run.steps=100000 run.ckpt_every=0

last=$(last_ckpt run)
[ "$last" = "$out/ckpt-$(printf %08d $K)" ] || fail "the last checkpoint is $last, expected step $K's"
"$CKPT_DIFF" "$last" "$last" --bits >/dev/null || fail "the last checkpoint $last does not verify"
train resumed --resume $D parallel.dp=2 run.steps=$N run.out_dir="$out"
grep -q "resuming from $last" "$E2E_WORK/resumed.out" || fail "the resumed run did not start from $last"
[ -e "$out/ckpt-$(printf %08d $N)/COMPLETE" ] || fail "the resumed run did not finish"

# continuation is right: the same as one process straight to step N
train straight $D parallel.dp=1 run.steps=$N
"$CKPT_DIFF" "$out/ckpt-$(printf %08d $N)" "$(last_ckpt straight)" --bits ||
  fail "dp 4 -> kill -> resume at dp 2 differs from one process at step $N"
# metrics.csv holds each step once: the killed run's rows after step K went
# with the resume (it continues from K), so the table is 1..K at dp 4, then
# K+1..N at dp 2, and its losses are one process's, bit for bit
[ "$(column run step | tr '\n' ' ')" = "$(column straight step | tr '\n' ' ')" ] ||
  fail "metrics.csv steps are not 1..$N once each: $(column run step | tr '\n' ' ')"
[ "$(column run loss)" = "$(column straight loss)" ] ||
  fail "losses differ from one process's: $(column run loss | tr '\n' ' ') vs $(column straight loss | tr '\n' ' ')"
echo "dp fault OK: survivors ended ${KILL_ELAPSED}s after the kill; resumed from step $K at dp=2, bit-identical to one process at step $N"
