#!/usr/bin/env bash
# Every [optim] lr_schedule trains with the rates of its formula
# (plait/optim_util.h), as each step's metrics.csv row reports them: warmup,
# then cosine, linear, constant, wsd in its four shapes (stable at lr, then
# down to min_lr over its last steps) and the inverse square root, with
# adam and with zero1 at dp 2 (a ZeRO plugin steps through the same
# helper). The formulas are computed here again in awk, independently, and
# compared within metrics.csv's six digits.
source "$(dirname "$0")/lib.sh"

W=2 D=10 K=4 LR=0.001 MIN=0.0001 STEPS=12
expected() { # schedule style: the rate of steps 0..STEPS-1, one a line
  awk -v sch="$1" -v sty="$2" -v W=$W -v D=$D -v K=$K -v lr=$LR -v m=$MIN -v n=$STEPS 'BEGIN {
    pi = atan2(0, -1)
    for (s = 0; s < n; s++) {
      if (s < W) r = lr * (s + 1) / (W + 1)
      else if (sch == "constant") r = lr
      else if (sch == "inverse_sqrt") { r = lr * sqrt((W > 1 ? W : 1) / (s > 1 ? s : 1)); if (r < m) r = m }
      else if (s >= D) r = m
      else {
        start = W
        if (sch == "wsd") { start = D - K; if (start < W) start = W }
        if (s < start) r = lr
        else {
          p = (s - start) / (D - start)
          c = (1 + cos(pi * p)) / 2
          if (sch == "linear" || (sch == "wsd" && sty == "linear")) c = 1 - p
          if (sch == "wsd" && sty == "sqrt") c = 1 - sqrt(p)
          if (sch == "wsd" && sty == "exponential") c = 2 * exp(p * log(0.5)) - 1
          r = m + c * (lr - m)
        }
      }
      printf "%.10g\n", r
    }
  }'
}
lr_col() {
  awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "lr") k = i; next } { print $k }' "$1/metrics.csv"
}
check() { # name schedule style [overrides]
  local name=$1 sch=$2 sty=$3 out=$E2E_WORK/$1
  shift 3
  "$PLAIT_BIN" train "$CFG" "$@" run.steps=$STEPS run.eval_every=0 optim.warmup_steps=$W optim.lr_decay_steps=$D \
    optim.lr=$LR optim.min_lr=$MIN optim.lr_schedule="$sch" optim.lr_wsd_decay_steps=$K \
    optim.lr_wsd_decay_style="$sty" "run.out_dir=$out" >"$out.log" 2>&1 ||
    { tail -n 20 "$out.log"; fail "$name: the run failed"; }
  paste -d' ' <(lr_col "$out") <(expected "$sch" "$sty") | awk -v name="$name" '
    { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * $2 + 1e-12) { print name ": step " NR - 1 ": lr " $1 ", the formula " $2; bad = 1 } }
    END { exit bad || NR != '"$STEPS"' }' || fail "$name: the rates are not the schedule's: $(lr_col "$out" | tr '\n' ' ')"
  echo "$name: $(lr_col "$out" | tr '\n' ' ')"
}
check cosine cosine linear
check linear linear linear
check constant constant linear
check wsd-linear wsd linear
check wsd-cosine wsd cosine
check wsd-sqrt wsd sqrt
check wsd-exponential wsd exponential
check inverse-sqrt inverse_sqrt linear
check wsd-zero1 wsd sqrt -n 2 optim.plugin=zero1 parallel.dp=2
# wsd holds lr from the warmup's end to its decay's start
lrs=($(lr_col "$E2E_WORK/wsd-linear"))
[ "${lrs[2]}" = "${lrs[6]}" ] && awk -v a="${lrs[6]}" -v b="${lrs[7]}" -v z="${lrs[10]}" -v m=$MIN \
  'BEGIN { exit !(b < a && z == m) }' || fail "wsd is not stable, then down to min_lr: ${lrs[*]}"
