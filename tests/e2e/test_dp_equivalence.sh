#!/usr/bin/env bash
# Data parallelism reproduces one process: dp = 2 and 4, with and without
# gradient accumulation, same seed and global batch (8 sequences), 50 steps:
# loss curves and final parameters within 1e-5 relative.
source "$(dirname "$0")/lib.sh"
train one    parallel.dp=1 data.micro_batch=2           # 1 rank, 4 micro-batches
train dp2    parallel.dp=2 data.micro_batch=4           # no accumulation
train dp2acc parallel.dp=2 data.micro_batch=2           # accumulation 2
train dp4    parallel.dp=4 data.micro_batch=2           # no accumulation
train dp4acc parallel.dp=4 data.micro_batch=1           # accumulation 2
for r in dp2 dp2acc dp4 dp4acc; do
  same_losses one "$r" 1e-5
  same_params one "$r" 1e-5
done
grep -q "global batch 8 = dp 4 x micro-batch 1 x accumulation 2" "$E2E_WORK/dp4acc.out" ||
  fail "dp4acc did not derive accumulation 2 from the global batch"
echo "dp equivalence OK"
