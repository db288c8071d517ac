#!/usr/bin/env bash
# usage: kit_parallel.sh PLAIT PLUGIN_DIR KIT_PLUGIN_DIR
# plait plugin test on parallel plugins: dp, tp, pp and hybrid pass every
# check; each broken copy of hybrid (tests/sdk/broken_parallel.c) fails on
# the check of the rule it breaks, and the rule's statement is printed.
set -euo pipefail
plait=$1 dir=$2 kit=$3
export TMPDIR=$(mktemp -d)
trap 'rm -rf "$TMPDIR"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
for p in dp tp pp hybrid; do
  out=$("$plait" plugin test "$dir/libplait-parallel-$p.so" 2>&1) || { echo "$out"; fail "$p did not pass"; }
  grep -v '^ *[0-9.]* [a-z]*: ' <<<"$out"
  grep -Eq "^  [0-9]+ checks: ([0-9]+) passed, 0 failed, 0 skipped" <<<"$out" || fail "$p: not every check passed"
  grep -Eq "^  losses (dp|tp|pp)[0-9]" <<<"$out" || fail "$p: no losses row"
done
# NAME CHECK RULE: the broken copy fails CHECK's row on RULE
while IFS='|' read -r name check rule; do
  set +e
  out=$("$plait" plugin test "$kit/libplait-parallel-par_$name.so" 2>&1)
  rc=$?
  set -e
  grep -v '^ *[0-9.]* [a-z]*: ' <<<"$out"
  [ $rc -eq 1 ] || fail "par_$name: exit $rc, expected 1"
  grep -Eq "^  $check +$rule +FAIL " <<<"$out" || fail "par_$name: no FAIL row '$check' on rule '$rule'"
  grep -Eq "^  rule \[$rule\] plait/parallel.h" <<<"$out" || fail "par_$name: rule [$rule] not stated"
  grep -q "FAILED (runs and logs kept in $TMPDIR/plait-kit-" <<<"$out" || fail "par_$name: work directory not named"
done <<'LIST'
layers|plan pp2|plan
shards|plan tp2|plan-shards
batches|plan dp2|plan-batches
schedule|plan pp2|plan-schedule
losses|losses dp2|losses
LIST
# plait train runs the same plan rules before it starts a rank: a broken
# plugin is refused, naming the rule, and nothing is trained.
src=$(cd "$(dirname "$0")/../.." && pwd)
while IFS='|' read -r name layout rule; do
  set +e
  out=$(cd "$src" && "$plait" train configs/gpt-tiny.ini "parallel.plugin=$kit/libplait-parallel-par_$name.so" $layout \
    run.steps=2 "run.out_dir=$TMPDIR/train-$name" 2>&1)
  rc=$?
  set -e
  [ $rc -ne 0 ] || fail "train with par_$name: exit 0, expected a refusal"
  grep -q "break the rule \[$rule\] of plait/parallel.h, so no rank was started" <<<"$out" ||
    { echo "$out"; fail "train with par_$name: the refusal does not name rule [$rule]"; }
  [ ! -e "$TMPDIR/train-$name/metrics.csv" ] || fail "train with par_$name: trained anyway"
done <<'LIST'
shards|parallel.tp=2|plan-shards
batches|parallel.dp=2|plan-batches
schedule|parallel.pp=2|plan-schedule
LIST
echo "kit parallel OK"
