#!/usr/bin/env bash
# What metrics.csv says about each step. The time split adds up: on every
# row compute_ms + comm_ms + idle_ms equals step_ms within max(1 ms, 3%), with
# no negative part, for DP (dp = 2), ZeRO-3 (dp = 2: parameter gathers in the
# layer hooks, the all-gather-free step) and a pipeline (pp = 2, where idle
# is the bubble). The header has the documented columns, and they are
# filled on every row. val_loss is filled exactly at the multiples of
# [run] eval_every and at the last step (with eval_every = 0 at the last
# step of each resumed leg alone, not at the checkpoints). time_s grows
# and tokens_seen counts the global batch's tokens (the mfu column is
# checked in test_progress.sh).
source "$(dirname "$0")/lib.sh"
A="run.steps=12"

# split_adds_up NAME: every row's compute + comm + idle is its step time.
split_adds_up() {
  local csv=$E2E_WORK/$1/metrics.csv
  awk -F, -v name="$1" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { step = $c["step_ms"]; comp = $c["compute_ms"]; comm = $c["comm_ms"]; idle = $c["idle_ms"]
      sum = comp + comm + idle; d = sum - step; if (d < 0) d = -d
      tol = 0.03 * step; if (tol < 1) tol = 1
      if (step == "" || comp == "" || comm == "" || idle == "") { printf "%s step %s: empty time column\n", name, $c["step"]; bad = 1 }
      else if (d > tol) { printf "%s step %s: compute %s + comm %s + idle %s = %.3f ms, step %s ms\n", name, $c["step"], comp, comm, idle, sum, step; bad = 1 }
      if (comp < 0 || comm < 0 || idle < 0) { printf "%s step %s: a negative part (compute %s, comm %s, idle %s)\n", name, $c["step"], comp, comm, idle; bad = 1 }
      rows++ }
    END { if (rows == 0) { print name ": no rows"; exit 1 } exit bad }' "$csv" || fail "$1: the time split does not add up to step_ms"
}

# positive NAME COL: the column is > 0 on some row (the part was measured at all).
positive() {
  column "$1" "$2" | awk '$1 > 0 { ok = 1 } END { exit !ok }' || fail "$1: $2 is never above 0"
}

# has_columns NAME: the header names every promised column; each is filled on
# every row (val_loss only where an evaluation ran: see below).
has_columns() {
  local csv=$E2E_WORK/$1/metrics.csv col
  for col in step loss val_loss lr tokens_per_s step_ms compute_ms comm_ms idle_ms peak_rss_mb time_s tokens_seen; do
    head -n 1 "$csv" | tr ',' '\n' | grep -qx "$col" || fail "$1: metrics.csv has no column $col: $(head -n 1 "$csv")"
    [ "$col" = val_loss ] && continue
    [ "$(column "$1" "$col" | grep -c '^$')" = 0 ] || fail "$1: column $col is empty on some row"
  done
}

train dp2 $A parallel.dp=2
has_columns dp2
split_adds_up dp2
positive dp2 comm_ms

train zero3 $A parallel.dp=2 optim.plugin=zero3
split_adds_up zero3
positive zero3 comm_ms

train pp2 $A parallel.plugin=hybrid parallel.pp=2
split_adds_up pp2
positive pp2 idle_ms

# val_loss at steps 3, 6, 9 (eval_every) and 10 (the last), nowhere else
train eval $A run.steps=10 run.eval_every=3
has_columns eval
paste -d' ' <(column eval step) <(column eval val_loss) | awk '
  { want = ($1 % 3 == 0 || $1 == 10); have = NF == 2
    if (want && !(have && $2 > 0)) { printf "step %s: no validation loss\n", $1; bad = 1 }
    if (!want && have) { printf "step %s: a validation loss %s without an evaluation due\n", $1, $2; bad = 1 }
    n++ }
  END { if (n != 10) { printf "%d rows, not 10\n", n; bad = 1 } exit bad }' ||
  fail "eval: val_loss is not filled exactly at multiples of eval_every and the last step"
# eval_every = 0 on a run trained in two legs of 2 steps, a checkpoint at
# every step: val_loss at each leg's last step (2 and 4), not at the
# checkpoints between (1 and 3)
train legs $A run.steps=2 run.eval_every=0 run.ckpt_every=1
train legs $A run.steps=4 run.eval_every=0 run.ckpt_every=1 --resume
paste -d' ' <(column legs step) <(column legs val_loss) | awk '
  { want = ($1 == 2 || $1 == 4); have = NF == 2
    if (want && !(have && $2 > 0)) { printf "step %s: no validation loss at the end of a leg\n", $1; bad = 1 }
    if (!want && have) { printf "step %s: a validation loss %s at a checkpoint inside a leg\n", $1, $2; bad = 1 }
    n++ }
  END { if (n != 4) { printf "%d rows, not 4\n", n; bad = 1 } exit bad }' ||
  fail "legs: with eval_every = 0, val_loss is not filled exactly at each plait train's last step"
# time since start grows; tokens seen = step x global batch x block (8 x 32
# in tiny.ini); mfu is a column, empty without a peak (progress off here)
paste -d' ' <(column eval step) <(column eval time_s) <(column eval tokens_seen) | awk '
  { if ($2 <= last) { printf "step %s: time_s %s after %s\n", $1, $2, last; bad = 1 } last = $2
    if ($3 != $1 * 8 * 32) { printf "step %s: tokens_seen %s, expected %d\n", $1, $3, $1 * 256; bad = 1 } }
  END { exit bad }' || fail "eval: time_s or tokens_seen wrong"
head -n 1 "$E2E_WORK/eval/metrics.csv" | tr ',' '\n' | grep -qx mfu || fail "metrics.csv has no mfu column"
echo "metrics OK"
