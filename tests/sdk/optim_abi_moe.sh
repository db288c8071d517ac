#!/usr/bin/env bash
# usage: optim_abi_moe.sh PLAIT V10_DIR WORK_DIR SOURCE_DIR
# An optimizer built against the v1.0 headers (abi-1.0/sgd.c) predates an
# expert tensor cut over tp x ep (plait_plan.second_shards, ABI 1.28):
# `plait config check` refuses tp x ep with it, and `plait train` refuses
# it once, before any rank starts, in the words a rank would use, naming
# the keys; ep alone (sgd reduces no gradients itself) is checked ok.
set -euo pipefail
plait=$1 v10=$2 work=$3 src=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
cd "$src"
MOE="model.moe_experts=4 model.moe_top_k=2 model.moe_ffn_hidden=64 optim.plugin=sgd"
TPEP="parallel.plugin=hybrid parallel.tp=2 parallel.dp=2 parallel.ep=2"
want="command line 'parallel.tp=2': [parallel] tp = 2 with ep = 2 and [optim] plugin = sgd: the plugin declares ABI 1.0, before an expert tensor cut over both (plait_plan.second_shards, 1.28)"
rc=0
out=$(PLAIT_PLUGIN_PATH=$v10 timeout 120 "$plait" config check tests/e2e/tiny.ini $MOE $TPEP 2>&1) || rc=$?
[ $rc -eq 1 ] || fail "config check of tp x ep with a v1.0 optimizer: exit $rc: $out"
grep -qF -- "$want" <<<"$out" || fail "config check: the refusal is not named: $out"
rc=0
out=$(PLAIT_PLUGIN_PATH=$v10 timeout 120 "$plait" train tests/e2e/tiny.ini "run.out_dir=$work/tpep" run.steps=1 \
  $MOE $TPEP 2>&1) || rc=$?
[ $rc -ne 0 ] || fail "train of tp x ep with a v1.0 optimizer succeeded: $out"
[ "$(grep -cF -- "$want" <<<"$out")" = 1 ] || fail "train: not refused once, before the ranks start: $out"
[ ! -e "$work/tpep/rank-0.log" ] || fail "train: the ranks started before the refusal: $out"
out=$(PLAIT_PLUGIN_PATH=$v10 timeout 120 "$plait" config check tests/e2e/tiny.ini $MOE parallel.dp=2 parallel.ep=2 2>&1) ||
  fail "config check of ep 2 with a v1.0 optimizer that reduces no gradients itself: $out"
echo "a v1.0 optimizer at tp x ep: refused by config check and once by train's launcher"
rm -rf "$work"
