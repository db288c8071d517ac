#!/usr/bin/env bash
# usage: uses_cycle.sh PLAIT PLUGIN_DIR
# comm/cyca uses comm/cycb, which uses comm/cyca (tests/sdk/uses_cycle.c):
# plugin test and bench comm refuse the cycle naming it, never crash.
set -euo pipefail
plait=$1 dir=$2
fail() { echo "FAIL: $*" >&2; exit 1; }
want="comm plugins use one another in a cycle, or more than 4 deep (plait_plugin_desc.uses): cyca -> cycb -> cyca"
rc=0
out=$(PLAIT_PLUGIN_PATH=$dir timeout 60 "$plait" plugin test "$dir/libplait-comm-cyca.so" --ranks 2 --timeout 2 2>&1) || rc=$?
[ $rc -eq 1 ] || fail "plugin test: exit $rc: $out"
grep -qF "$want" <<<"$out" || fail "plugin test: the cycle is not named: $out"
rc=0
out=$(PLAIT_PLUGIN_PATH=$dir timeout 60 "$plait" bench comm -n 2 --op allreduce --max 4K comm.plugin=cyca 2>&1) || rc=$?
[ $rc -eq 2 ] || fail "bench comm: exit $rc: $out"
grep -qF "$want" <<<"$out" || fail "bench comm: the cycle is not named: $out"
echo "uses cycle: refused, named"
