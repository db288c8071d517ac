#!/usr/bin/env bash
# Pipeline schedules over the transport's rendezvous path: with
# [comm.tcp] cma_min = 4K every activation and gradient message (8 KB here,
# 256 KB on gpt-small) goes by single copy, and a send completes only once
# the neighbour has posted the matching receive. An executor that waits for
# such a send before reusing an activation slot deadlocks (interleaved did,
# until run_step.c stopped doing so); every schedule must run and stay
# bit-identical to one process, also with m < pp and in 3-D.
source "$(dirname "$0")/lib.sh"
R="run.steps=5 parallel.plugin=hybrid comm.tcp.cma_min=4K comm.timeout=20 run.deterministic=true"
train ref   $R data.micro_batch=1
train ref6  $R data.micro_batch=1 model.n_layer=6
train ref_m2 $R data.micro_batch=4 model.n_layer=6
for s in gpipe 1f1b; do
  train "pp4_$s" $R data.micro_batch=1 parallel.pp=4 parallel.pp.schedule=$s
  same_losses ref "pp4_$s" 0; same_params ref "pp4_$s" bits
done
I="parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2"
train pp2_il $R data.micro_batch=1 parallel.pp=2 $I
same_losses ref pp2_il 0; same_params ref pp2_il bits
train pp4_il $R data.micro_batch=1 model.n_layer=6 parallel.pp=4 $I
same_losses ref6 pp4_il 0; same_params ref6 pp4_il bits
train pp4_il_m2 $R data.micro_batch=4 model.n_layer=6 parallel.pp=4 $I
same_losses ref_m2 pp4_il_m2 0; same_params ref_m2 pp4_il_m2 bits
train d3_il $R data.micro_batch=1 parallel.dp=2 parallel.tp=2 parallel.pp=2 $I
same_losses ref d3_il 1e-5; same_params ref d3_il 1e-4
echo "pp rendezvous OK"
