#!/usr/bin/env bash
# `plait config check` of a layout with 100,000 accumulation steps (global
# batch 200,000 of micro-batches of 2): it checks every micro-batch of every
# rank's schedule, once each (the check used to scan the whole schedule per
# micro-batch: silent for minutes). It ends (`timeout` only guards against
# a hang; nothing here is timed) and says what it found: the layout fits
# (its memory table, "ok"); with a pipeline (1f1b, zb1) too; and with a
# schedule that keeps every micro-batch's activations (gpipe), whether the
# host has the memory.
source "$(dirname "$0")/lib.sh"
A="data.global_batch=200000 data.micro_batch=2"
check() { # NAME ARGS...: config check; exit status in NAME.rc, output in NAME.out
  local name=$1 rc=0; shift
  timeout 120 "$PLAIT_BIN" config check "$CFG" $A "$@" >"$E2E_WORK/$name.out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "$name: config check with 100,000 accumulation steps did not end in 120 s"
  echo $rc >"$E2E_WORK/$name.rc"
}
for c in "dp1" "pp2_1f1b parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=1f1b" \
  "pp2_zb1 parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1"; do
  read -r name args <<<"$c"
  # shellcheck disable=SC2086
  check "$name" $args
  [ "$(cat "$E2E_WORK/$name.rc")" = 0 ] || fail "$name: config check failed: $(tail -n 3 "$E2E_WORK/$name.out")"
  grep -q "^ *rank  *parameters" "$E2E_WORK/$name.out" || fail "$name: no memory table: $(tail -n 3 "$E2E_WORK/$name.out")"
  grep -q "tiny.ini: ok$" "$E2E_WORK/$name.out" || fail "$name: no verdict: $(tail -n 3 "$E2E_WORK/$name.out")"
  echo "$name: $(tail -n 1 "$E2E_WORK/$name.out")"
done
# gpipe keeps every micro-batch's activations: tens of GiB here, which a
# host may or may not have; either way the check ends saying which
check gpipe parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=gpipe
grep -Eq "tiny.ini: ok$|needs more memory than there is" "$E2E_WORK/gpipe.out" ||
  fail "gpipe: no verdict: $(tail -n 3 "$E2E_WORK/gpipe.out")"
echo "config check with long accumulation OK"
