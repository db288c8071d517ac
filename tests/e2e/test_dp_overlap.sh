#!/usr/bin/env bash
# Overlap is real, and measured honestly (metrics.csv early_buckets counts the
# buckets whose all-reduce started while some backward was still to run):
# - small buckets: the upper layers' buckets start during the backward, every step;
# - the default bucket size holds the tiny model in one bucket, which can only
#   start once the last layer's backward is done: nothing overlaps, 0;
# - overlap switched off: 0.
source "$(dirname "$0")/lib.sh"
each_step() { # NAME AWK-CONDITION MESSAGE: the condition holds for every step
  column "$1" early_buckets | awk "$2 { ok++ } END { exit !(ok == NR && NR > 0) }" || fail "$3: $(column "$1" early_buckets | tr '\n' ' ')"
}
train overlap run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K
each_step overlap '$1 >= 1' "a step had no bucket started before the backward pass ended"
train one_bucket run.steps=5 parallel.dp=2
each_step one_bucket '$1 == 0' "a single bucket, started after the whole backward, was counted as overlapped"
train serial run.steps=5 parallel.dp=2 parallel.dp.bucket_size=16K parallel.dp.overlap=false
each_step serial '$1 == 0' "overlap=false still overlapped"
same_losses overlap serial 1e-6
same_losses overlap one_bucket 1e-6
echo "overlap OK: $(column overlap early_buckets | sed -n 1p) buckets started early per step"
