#!/usr/bin/env bash
# usage: kit_optim.sh PLAIT ADAM_SO SGD_SO OLD_SGD_SO
# plait plugin test on optimizers: adam and the SGD example pass every check;
# the SGD example of ABI v1.0 (constant lr, no clipping, no weight decay, no
# parameter or gradient bytes reported) fails the math and memory checks on
# their rules, and its state still restores bit for bit.
set -euo pipefail
plait=$1 adam=$2 sgd=$3 old=$4
fail() { echo "FAIL: $*" >&2; exit 1; }
for so in "$adam" "$sgd"; do
  out=$("$plait" plugin test "$so" 2>&1) || { echo "$out"; fail "$so did not pass"; }
  echo "$out"
  grep -Eq "^  3 checks: 3 passed, 0 failed, 0 skipped" <<<"$out" || fail "$so: not 3 passed checks"
done
set +e
out=$("$plait" plugin test "$old" 2>&1)
rc=$?
set -e
echo "$out"
[ $rc -eq 1 ] || fail "the v1.0 sgd example passed the kit (exit $rc)"
grep -Eq "^  step-math +optim-math +FAIL +step 0: " <<<"$out" || fail "no step-math failure"
grep -Eq "^  state-restore +optim-state +pass" <<<"$out" || fail "state-restore should pass"
grep -Eq "^  memory +optim-memory +FAIL +memory\(\) reports parameters 0 B" <<<"$out" || fail "no memory failure"
grep -Eq "^  rule \[optim-math\] plait/optim.h" <<<"$out" || fail "the rule is not printed"
echo "kit optim OK"
