#!/usr/bin/env bash
# Deterministic mode: every (dp, accumulation) split of the same global
# micro-batches (one micro-batch size) gives bit-identical losses and
# parameters (and optimizer state) to one process, for 30 steps.
source "$(dirname "$0")/lib.sh"
D="run.steps=30 run.deterministic=true data.micro_batch=1"
train a14 $D data.global_batch=4 parallel.dp=1
train a22 $D data.global_batch=4 parallel.dp=2
train a41 $D data.global_batch=4 parallel.dp=4
for r in a22 a41; do same_losses a14 "$r" 0; same_params a14 "$r" bits; done
train b18 $D data.global_batch=8 parallel.dp=1
train b24 $D data.global_batch=8 parallel.dp=2
train b42 $D data.global_batch=8 parallel.dp=4
train b81 $D data.global_batch=8 parallel.dp=8
for r in b24 b42 b81; do same_losses b18 "$r" 0; same_params b18 "$r" bits; done
echo "deterministic dp OK"
