#!/usr/bin/env bash
# A layout that cannot fit is refused before any rank starts: `plait config
# check`, `plait train` and `plait bench train` compare the memory plait
# plan predicts per rank with what the ranks have, and say so naming the
# largest parts and what would fit. Host memory is pinned down here by a
# per-process limit (ulimit -v) so the test does not depend on the
# machine's RAM; a device's own memory by the sim device's
# PLAIT_SIM_MEMORY_MB. With [run] memory_check = false the run starts, and
# the allocation that fails names itself as memory. On a device with its
# own memory under recompute = full, [model] recompute_offload = host is
# among the settings named.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# AddressSanitizer reserves terabytes of address space for its shadow
# memory, so no process of a sanitized build starts under ulimit -v
if [ -n "${PLAIT_SANITIZE:-}" ]; then
  echo "skipped: built with -fsanitize=$PLAIT_SANITIZE, whose shadow memory no ulimit -v admits"
  exit 77
fi
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
BIG=(model.n_layer=8 model.n_embd=512 model.block_size=256 data.global_batch=16 data.micro_batch=16 run.steps=1)
LIMIT_KB=1500000 # the big layout's one rank needs ~1.6 GiB (activations ~1.2 GiB)

# refused NAME CMD...: exit 1, no rank started, the prediction, its largest
# part, the limit and a setting that fits, in one error
refused() {
  local name=$1; shift
  if (ulimit -v $LIMIT_KB; "$@") >"$E2E_WORK/$name.out" 2>&1; then fail "$name: ran: $(tail -n 3 "$E2E_WORK/$name.out")"; fi
  for want in "this layout needs more memory than there is, so no rank was started" "for its largest rank (activations" \
    "each process may map at most 1465 MiB here (ulimit -v)" "What fits, one setting changed" "data.micro_batch=8 ("; do
    grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: no '$want' in: $(cat "$E2E_WORK/$name.out")"
  done
  [ "$(grep -c 'error: ' "$E2E_WORK/$name.out")" -eq 1 ] || fail "$name: not one error: $(cat "$E2E_WORK/$name.out")"
}
refused check "$PLAIT_BIN" config check "$CFG" "${BIG[@]}"
! grep -q ": ok$" "$E2E_WORK/check.out" || fail "config check said ok"
rm -rf "${E2E_WORK:?}/run"
refused train "$PLAIT_BIN" train "$CFG" "${BIG[@]}" "run.out_dir=$E2E_WORK/run"
[ ! -e "$E2E_WORK/run" ] || fail "train started a rank: $(ls "$E2E_WORK/run")"
refused bench "$PLAIT_BIN" bench train "$CFG" "${BIG[@]}" --steps 1
refused launched "$PLAIT_BIN" train "$CFG" "${BIG[@]}" parallel.dp=2 data.global_batch=32 "run.out_dir=$E2E_WORK/run"
[ ! -e "$E2E_WORK/run" ] || fail "the launcher started ranks: $(ls "$E2E_WORK/run")"
refused dashn "$PLAIT_BIN" train "$CFG" "${BIG[@]}" -n 1 "run.out_dir=$E2E_WORK/run"
[ ! -e "$E2E_WORK/run" ] || fail "-n 1 started a rank: $(ls "$E2E_WORK/run")"
# the suggestion fits: config check under the same limit says ok with it
(ulimit -v $LIMIT_KB; "$PLAIT_BIN" config check "$CFG" "${BIG[@]}" data.micro_batch=8) >"$E2E_WORK/fix.out" 2>&1 ||
  fail "the suggested data.micro_batch=8 does not pass: $(cat "$E2E_WORK/fix.out")"

# started anyway: the allocation that fails says memory, not comm
rc=0
(ulimit -v $LIMIT_KB; "$PLAIT_BIN" train "$CFG" "${BIG[@]}" run.memory_check=false "run.out_dir=$E2E_WORK/run") \
  >"$E2E_WORK/oom.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "memory_check = false under the limit: exit $rc: $(tail -n 3 "$E2E_WORK/oom.out")"
grep -Eq "^plait: error: train: step 1: .*out of memory: cannot allocate [0-9]+ MiB \([0-9]+ bytes\) for activations; this process holds" \
  "$E2E_WORK/oom.out" || fail "the failed allocation: $(grep error "$E2E_WORK/oom.out")"
grep -qF "plait config check" "$E2E_WORK/oom.out" || fail "no advice with the failed allocation: $(grep error "$E2E_WORK/oom.out")"
! grep -q "comm error" "$E2E_WORK/oom.out" || fail "a memory failure labelled comm: $(grep 'comm error' "$E2E_WORK/oom.out")"

# a device with memory of its own: each rank's model state against it
refused_dev() {
  if PLAIT_SIM_MEMORY_MB=$1 "$PLAIT_BIN" config check "$CFG" "${BIG[@]}" device.plugin=sim >"$E2E_WORK/dev$1.out" 2>&1; then
    return 1
  fi
  grep -qF "on each rank's device for its largest rank (activations" "$E2E_WORK/dev$1.out" &&
    grep -qF "its device (sim (host memory at non-canonical addresses)) has $1 MiB" "$E2E_WORK/dev$1.out" ||
    fail "device of $1 MiB: $(cat "$E2E_WORK/dev$1.out")"
}
refused_dev 1024 || fail "a device of 1 GiB took a layout of ~1.6 GiB: $(cat "$E2E_WORK/dev1024.out")"
! refused_dev 4096 || fail "a device of 4 GiB refused a layout of ~1.6 GiB: $(cat "$E2E_WORK/dev4096.out")"
grep -q ": ok$" "$E2E_WORK/dev4096.out" || fail "device of 4 GiB: $(cat "$E2E_WORK/dev4096.out")"
# full recomputation's kept inputs in host memory, named where the
# device's memory is its own (689 MiB on the device, 633 with them on the host)
if PLAIT_SIM_MEMORY_MB=650 "$PLAIT_BIN" config check "$CFG" "${BIG[@]}" device.plugin=sim model.recompute=full \
  >"$E2E_WORK/offload.out" 2>&1; then
  fail "a device of 650 MiB took recompute = full: $(cat "$E2E_WORK/offload.out")"
fi
grep -qF "model.recompute_offload=host (" "$E2E_WORK/offload.out" ||
  fail "recompute = full on a device too small: no recompute_offload in: $(cat "$E2E_WORK/offload.out")"
PLAIT_SIM_MEMORY_MB=650 "$PLAIT_BIN" config check "$CFG" "${BIG[@]}" device.plugin=sim model.recompute=full \
  model.recompute_offload=host >"$E2E_WORK/offload_ok.out" 2>&1 ||
  fail "the suggested recompute_offload = host does not pass: $(cat "$E2E_WORK/offload_ok.out")"
echo "memory fit: refused before any rank (check, train, bench train, the launcher, a device), what fits named (recompute_offload too); a failed allocation says memory"
