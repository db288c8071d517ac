#!/usr/bin/env bash
# The headline criterion: configs/gpt-tiny.ini, as a user runs it (600 steps
# on one process, about a minute on 2 cores), reaches a final validation loss
# below 2.3 nats (it gets ~2.03; bytes start at ln 256 = 5.55), and its train
# loss falls with it.
source "$(dirname "$0")/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
train tiny run.progress=off
rows=$(column tiny step | wc -l)
[ "$rows" = 600 ] || fail "metrics.csv has $rows rows, not 600"
last=$(tail -n 1 "$E2E_WORK/tiny/metrics.csv")
val=$(column tiny val_loss | tail -n 1)
[ -n "$val" ] || fail "no validation loss at the last step: $last"
awk -v v="$val" 'BEGIN { exit !(v < 2.3) }' || fail "final validation loss $val is not below 2.3"
# the train loss fell too: the mean of the last 50 steps against the first step
first=$(column tiny loss | sed -n 1p)  # (not head: under pipefail an early exit breaks the pipe)
tail_mean=$(column tiny loss | tail -n 50 | awk '{ s += $1 } END { print s / NR }')
awk -v a="$first" -v b="$tail_mean" 'BEGIN { exit !(a > 5 && b < 2.5) }' ||
  fail "train loss went from $first to $tail_mean (mean of the last 50 steps)"
echo "gpt-tiny: final validation loss $val, train loss $first -> $tail_mean; OK"
