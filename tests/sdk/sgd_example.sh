#!/usr/bin/env bash
# usage: sgd_example.sh PLAIT PLUGIN_DIR WORK_DIR SOURCE_DIR
# The SGD example honours [optim] through plait/optim_util.h as adam does:
# the learning rate of every step equals adam's (warmup, then cosine), the
# gradient norm of the first step equals adam's (same model, same batch),
# grad_clip changes the update exactly when the norm exceeds it, and the
# memory report counts parameters, gradients and momentum (4 bytes each per
# element, not 0). [optim] offload, which it cannot honour, is refused by
# its own check() before any rank starts: by config check, by the launcher
# of `train -n 2` once (no rank reports it) and by a run of one process
# before its run directory, naming where the key was set; so is a
# learning-rate schedule of a later ABI than the 1.3 it declares.
set -euo pipefail
plait=$1 dir=$2 work=$3 src=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
cd "$src"
export PLAIT_PLUGIN_PATH=$dir
run() {
  local name=$1; shift
  "$plait" train tests/e2e/tiny.ini run.steps=12 optim.warmup_steps=4 optim.lr_decay_steps=10 optim.min_lr=1e-4 \
    "run.out_dir=$work/$name" "$@" >"$work/$name.out" 2>&1 || { tail -n 20 "$work/$name.out"; fail "run $name failed"; }
}
col() {
  awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }' "$work/$1/metrics.csv"
}
run adam optim.plugin=adam
run sgd optim.plugin=sgd
run sgd_clip optim.plugin=sgd optim.grad_clip=1e-3
run sgd_noclip optim.plugin=sgd optim.grad_clip=0
run sgd_bigclip optim.plugin=sgd optim.grad_clip=1e9
run sgd_dp2 optim.plugin=sgd parallel.dp=2 run.deterministic=true
run sgd_dp1 optim.plugin=sgd run.deterministic=true

diff <(col sgd lr) <(col adam lr) || fail "sgd's learning rates differ from adam's schedule"
lrs=$(col sgd lr | tr '\n' ' ')
awk -v l="$lrs" 'BEGIN { n = split(l, a, " "); up = a[1] < a[4]; down = a[5] > a[10]; flat = a[11] == a[12];
  exit !(up && down && flat) }' || fail "the schedule is not warmup, decay, floor: $lrs"
[ "$(col sgd grad_norm | head -n 1)" = "$(col adam grad_norm | head -n 1)" ] ||
  fail "sgd's first gradient norm $(col sgd grad_norm | head -n 1) is not adam's $(col adam grad_norm | head -n 1)"
norm1=$(col sgd grad_norm | head -n 1)
awk -v n="$norm1" 'BEGIN { exit !(n > 1e-3) }' || fail "the first norm $norm1 is below the clip threshold: no test"
# the first step is the same (same norm), the second differs when clipped, and nothing changes when grad_clip
# is above every norm
[ "$(col sgd_clip loss | head -n 1)" = "$(col sgd loss | head -n 1)" ] || fail "clipping changed step 1's loss"
[ "$(col sgd_clip loss | sed -n 2p)" != "$(col sgd loss | sed -n 2p)" ] || fail "grad_clip=1e-3 did not change the update"
diff <(col sgd_bigclip loss) <(col sgd_noclip loss) || fail "a grad_clip above every norm changed the run"
# the global norm is layout-independent: dp=2 and one process, deterministic, bit-identical losses
diff <(col sgd_dp2 loss) <(col sgd_dp1 loss) || fail "sgd at dp=2 does not match one process"
# memory: parameters, gradients and state are reported (4 bytes per element each)
p=$(awk -F, 'NR == 2 { print $5 }' "$work/sgd/memory.csv") g=$(awk -F, 'NR == 2 { print $6 }' "$work/sgd/memory.csv")
s=$(awk -F, 'NR == 2 { print $7 }' "$work/sgd/memory.csv")
pa=$(awk -F, 'NR == 2 { print $5 }' "$work/adam/memory.csv")
[ "$p" -gt 0 ] && [ "$p" = "$g" ] && [ "$s" = "$p" ] && [ "$p" = "$pa" ] ||
  fail "sgd reports parameters $p, gradients $g, state $s bytes (adam: parameters $pa)"
# refused_once WHAT WANT OVERRIDES...: config check refuses the overrides
# naming WANT, and so does the launcher of train -n 1 and -n 2, once, before
# any run directory
refused_once() {
  local what=$1 want=$2 out n
  shift 2
  out=$("$plait" config check tests/e2e/tiny.ini "$@" 2>&1) && fail "config check accepted $what with sgd: $out"
  grep -qF "$want" <<<"$out" || fail "config check's refusal of $what with sgd: $out"
  for n in 1 2; do
    out=$("$plait" train tests/e2e/tiny.ini -n $n parallel.dp=$n "$@" "run.out_dir=$work/refused$n" 2>&1) &&
      fail "train -n $n accepted $what with sgd: $out"
    [ "$(grep -cF "$want" <<<"$out")" -eq 1 ] || fail "train -n $n did not refuse $what with sgd once: $out"
    [ ! -e "$work/refused$n" ] || fail "train -n $n made its run directory before refusing $what with sgd"
  done
}
# its refusal of [optim] offload
refused_once offload \
  "command line 'optim.offload=nvme': [optim] offload = nvme: sgd keeps its momentum in the device's memory" \
  optim.plugin=sgd optim.offload=nvme "optim.offload_path=$work"
# a schedule of a later ABI than the plugin declares (1.3: its helper may
# read the name as cosine)
refused_once wsd "command line 'optim.lr_schedule=wsd': [optim] lr_schedule = wsd with [optim] plugin = sgd: the plugin declares ABI 1.3, before that schedule" \
  optim.plugin=sgd optim.lr_schedule=wsd optim.lr_wsd_decay_steps=2
echo "sgd: lr = adam's schedule ($lrs), first norm $norm1 = adam's, clipping effective, dp=2 = 1 process, memory $p/$g/$s bytes"
