#!/usr/bin/env bash
# `plait bench train` on a device whose memory is not host memory (sim
# stands in for a GPU): MFU is taken against the device's own GEMM rate,
# measured through its kernels, and a device line reports the allocator's
# peak device memory during the steps (never the rate measurement's
# buffers: 3 x 64 MiB, measured after the steps). On the cpu device there is
# no device line and the CPU's GEMM peak stays the denominator.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
bench() { # NAME ARGS...
  local name=$1; shift
  "$PLAIT_BIN" bench train "$CFG" --steps 2 --warmup 1 "$@" >"$E2E_WORK/$name.out" 2>&1 ||
    fail "$name: bench train failed: $(tail -n 3 "$E2E_WORK/$name.out")"
}
mkdir -p "$E2E_WORK"
bench sim device.plugin=sim
grep -q '^# MFU against [0-9.]* GFLOP/s: 1 rank x the GEMM rate of sim .* measured now through its kernels in fp32' \
  "$E2E_WORK/sim.out" || fail "sim: MFU not against the device's GEMM rate: $(grep '^# MFU' "$E2E_WORK/sim.out")"
line=$(grep '^# device sim' "$E2E_WORK/sim.out") || fail "sim: no device line: $(cat "$E2E_WORK/sim.out")"
dev=$(sed -E 's/.*peak device memory ([0-9.]+) MiB.*/\1/' <<<"$line")
act=$(awk '/^ +[0-9]/ { print $11 }' "$E2E_WORK/sim.out")
# activations live in device memory, so the peak holds at least them; it
# holds far less than the rate measurement's 192 MiB on this tiny model
awk -v d="$dev" -v a="$act" 'BEGIN { exit !(d >= a && d > 0 && d < 192) }' ||
  fail "sim: peak device memory $dev MiB (activations $act MiB; must be >= them and below the 192 MiB of the GEMM measurement)"
bench cpu device.plugin=cpu
grep -q '^# device' "$E2E_WORK/cpu.out" && fail "cpu: a device line on the cpu device"
grep -q '^# MFU against .* GEMM rate of one rank.s' "$E2E_WORK/cpu.out" ||
  fail "cpu: MFU not against the CPU's GEMM peak: $(grep '^# MFU' "$E2E_WORK/cpu.out")"
echo "bench train on a device OK: $line"
