#!/usr/bin/env bash
# usage: kit_optim.sh PLAIT ADAM_SO SGD_SO OLD_SGD_SO PLUGIN_DIR KIT_PLUGIN_DIR
# plait plugin test on optimizers: adam and the SGD example pass every check;
# the SGD example of ABI v1.0 (constant lr, no clipping, no weight decay, no
# parameter or gradient bytes reported) fails the math and memory checks on
# their rules, and its state still restores bit for bit. zero1-3 pass on
# data-parallel groups of 2 and 4 ranks; broken copies of zero1 (averaging
# instead of summing the group's gradients; reporting the whole state as the
# rank's) fail on the math and memory rules, and copies whose 3rd step()
# changes the working directory (every rank) or PLAIT_* variables (rank 1
# only) fail the process row, the change named, a secret's value never; a
# copy whose check() refuses what its create() takes fails, naming check().
set -euo pipefail
plait=$1 adam=$2 sgd=$3 old=$4 dir=$5 kit=$6
fail() { echo "FAIL: $*" >&2; exit 1; }
for so in "$adam" "$sgd"; do
  out=$("$plait" plugin test "$so" 2>&1) || { echo "$out"; fail "$so did not pass"; }
  echo "$out"
  grep -Eq "^  4 checks: 4 passed, 0 failed, 0 skipped" <<<"$out" || fail "$so: not 4 passed checks"
  grep -Eq "^  process +process +pass" <<<"$out" || fail "$so: no process row passed"
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
for z in zero1 zero2 zero3; do
  out=$("$plait" plugin test "$dir/libplait-optim-$z.so" 2>&1) || { echo "$out"; fail "$z did not pass"; }
  grep -v '^\[r' <<<"$out"
  grep -q "a data-parallel group of 4 ranks over tcp" <<<"$out" || fail "$z: no group of 4"
  grep -q "passed every check on 2, 4 ranks" <<<"$out" || fail "$z: not passed on 2 and 4 ranks"
done
# SO: the broken copy fails (exit 1) on 2 ranks; its output is in $out
broken() {
  set +e
  out=$("$plait" plugin test "$kit/libplait-optim-$1.so" --ranks 2 2>&1)
  local rc=$?
  set -e
  echo "$out"
  [ $rc -eq 1 ] || fail "$1: exit $rc"
}
broken zero_average
grep -Eq "^  step-math +optim-math +FAIL +step 0: reported gradient norm .* does the plugin sum them" <<<"$out" ||
  fail "zero_average: no step-math failure on the group's sum"
broken zero_memory
grep -Eq "^  memory +optim-memory +FAIL +memory\(\) on rank 0 of 2 .* equal shard of each state tensor" <<<"$out" ||
  fail "zero_memory: no memory failure naming the shard"
grep -Eq "^  step-math +optim-math +pass" <<<"$out" || fail "zero_memory: its math is right"
work=$(mktemp -d "${TMPDIR:-/tmp}/kit-optim.XXXXXX")
trap 'rm -rf "$work"' EXIT
here=$(pwd -P) elsewhere=$(cd "$work" && pwd -P)
BROKEN_CHDIR_TO=$elsewhere broken zero_stepchdir
grep -Eq "^  process +process +FAIL +the calls of the step-math check changed the process: the working directory from '$here' to '$elsewhere'" \
  <<<"$out" || fail "zero_stepchdir: no process failure naming the directories"
grep -Eq "^  rule \[process\] plait/plugin.h" <<<"$out" || fail "zero_stepchdir: the process rule is not printed"
broken zero_stepenv
grep -q "rank 1 failed: plugin test: check 'process' failed on rank 1: the calls of the step-math check changed the process: .*PLAIT_STEP_SETTING set to '3'" \
  <<<"$out" || fail "zero_stepenv: rank 1's process failure is not named"
grep -q "PLAIT_JOB_TOKEN changed (values not shown)" <<<"$out" || fail "zero_stepenv: PLAIT_JOB_TOKEN is not named"
! grep -q hunter2 <<<"$out" || fail "zero_stepenv: the secret's value was shown"
broken zero_check
grep -q "check() refused the kit's configuration on dp 2, one micro-batch a step, which create() must take" \
  <<<"$out" || fail "zero_check: check()'s refusal of what create() takes is not named"
grep -q "zero_check: refused on dp 2" <<<"$out" || fail "zero_check: the plugin's own words are not shown"
echo "kit optim OK"
