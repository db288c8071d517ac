#!/usr/bin/env bash
# usage: kit_broken.sh PLAIT PLUGIN_DIR NAME CHECK RULE
# `plait plugin test` on libplait-comm-NAME.so (the inner "uds" found through
# PLAIT_PLUGIN_PATH) must fail, with the row CHECK failing on rule RULE and
# the rule's statement printed. CHECK "-": the plugin must pass every check.
# CHECK "ended": a call of the plugin never returns, so the watchdog ends a
# rank naming the rule; the rows checked before it must have been printed.
set -euo pipefail
plait=$1 dir=$2 name=$3 check=$4 rule=$5
# a passing plugin on 2 and 3 ranks; a broken one on 2 (each failing check waits out the timeout)
ranks=2 timeout=1; [ "$check" = - ] && ranks=2,3 timeout=10
fail() { echo "FAIL: $*" >&2; exit 1; }
set +e
out=$(PLAIT_PLUGIN_PATH=$dir "$plait" plugin test "$dir/libplait-comm-$name.so" --ranks "$ranks" --timeout "$timeout" --large 1M 2>&1)
rc=$?
set -e
echo "$out"
if [ "$check" = - ]; then
  [ $rc -eq 0 ] || fail "$name: plait plugin test exited $rc"
  grep -Eq "^  14 checks: 14 passed, 0 failed" <<<"$out" || fail "$name: not every check passed"
  grep -q "passed every check on 2, 3 ranks" <<<"$out" || fail "$name: no final verdict"
  echo "kit: $name passes"
  exit 0
fi
[ $rc -eq 1 ] || fail "$name: plait plugin test exited $rc, not 1"
if [ "$check" = ended ]; then
  grep -Eq "^  progress +progress +pass " <<<"$out" || fail "$name: the rows checked before the rank ended are lost"
  grep -Eq "rank [0-9]+ failed: the comm plugin '$name' has been inside [a-z]+\(\) .*plait/comm.h \[$rule\]" <<<"$out" ||
    fail "$name: the ended rank does not name the plugin's stuck call and rule [$rule]"
  grep -q "FAILED on 1 of 1 rank counts" <<<"$out" || fail "$name: no final verdict"
  echo "kit: $name ends a rank on rule [$rule], the rows before it printed"
  exit 0
fi
grep -Eq "^  $check +$rule +FAIL +rank [0-9]+: " <<<"$out" || fail "$name: the '$check' row does not fail on rule [$rule]"
grep -Eq "^  rule \[$rule\] plait/(comm|plugin).h" <<<"$out" || fail "$name: the statement of rule [$rule] is not printed"
# a count of wrong elements is this rank's own, not one carried by the broken transport
n=$(grep -Eo "rank [0-9]+: [0-9]+ wrong elements" <<<"$out" | head -n 1 | awk "{ print \$3 }" || true)
[ -z "$n" ] || [ "$n" -le 100000 ] || fail "$name: $n wrong elements, more than the checks move"
grep -q "FAILED on 1 of 1 rank counts" <<<"$out" || fail "$name: no final verdict"
echo "kit: $name fails '$check' on rule [$rule]"
