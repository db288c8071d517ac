#!/usr/bin/env bash
# Math threads never change results: gpt-tiny-shaped training (big enough
# that products are cut into many tiles, AdamW and the exact gradient norm
# into several blocks) with 1, 2, 3 and 8 threads per rank gives
# bit-identical losses and final parameters and optimizer state.
source "$(dirname "$0")/lib.sh"
S="run.steps=12 run.ckpt_every=0 model.n_embd=128 model.block_size=64 data.global_batch=8 data.micro_batch=8"
for t in 1 2 3 8; do train "t$t" $S "run.threads=$t"; done
grep -q "8 math threads" "$E2E_WORK/t8.out" || fail "the start-up line does not name 8 math threads: $(cat "$E2E_WORK/t8.out")"
for t in 2 3 8; do same_losses t1 "t$t" 0; same_params t1 "t$t" bits; done
echo "thread-count invariance OK"
