#!/usr/bin/env bash
# Overlap is real: with small buckets, gradient all-reduces start while the
# backward pass is still running (metrics.csv early_buckets > 0 every step),
# and with overlap switched off none do.
source "$(dirname "$0")/lib.sh"
train overlap run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K
column overlap early_buckets | awk '$1 < 1 { bad = 1 } END { exit bad }' ||
  fail "a step had no bucket started before the backward pass ended"
train serial run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K parallel.dp.overlap=false
column serial early_buckets | awk '$1 != 0 { bad = 1 } END { exit bad }' || fail "overlap=false still overlapped"
same_losses overlap serial 1e-6
echo "overlap OK: $(column overlap early_buckets | head -n 1) buckets started early per step"
