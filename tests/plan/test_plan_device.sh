#!/usr/bin/env bash
# The device whose memory `plait plan`, `plait bench sweep` and `plait
# config check` count, without a cluster file: the config's [device]
# plugin, asked for its kernel table in a child process, once a command.
#  - cuda_emu (the cuda plugin's own code; bf16 activations where granted):
#    plan's and the sweep's predicted memory of a layout equal config
#    check's, and differ from the cpu device's; each names the device;
#  - nodev (no device here): plan and the sweep count the cpu device and
#    say so in one line; the plan still succeeds;
#  - sim: config check and plan open the device once each (the core's
#    debug line "opened sim device" of the child that asks).
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
W=$E2E_WORK
# a sweep whose layout fails keeps its scratch directory (the layout's log
# says why): under the test's work directory, which a pass removes
export TMPDIR=$W
M=(model.block_size=128 data.micro_batch=2)
L=(--dp 1 --tp 1 --pp 1 --optim adam --micro_batch 2 --recompute none)

# plan_mem NAME ARGS...: plan one layout of one rank; its mem_MiB
plan_mem() {
  local name=$1; shift
  "$PLAIT_BIN" plan "$CFG" --ranks 1 "${L[@]}" "${M[@]}" "$@" >"$W/$name.out" 2>"$W/$name.err" ||
    fail "plan $name: $(cat "$W/$name.out" "$W/$name.err")"
  awk '/^  1 / { print $(NF - 1) }' "$W/$name.out"
}
# check_mem NAME ARGS...: config check's total for rank 0, in MiB
check_mem() {
  local name=$1; shift
  "$PLAIT_BIN" config check "$CFG" "${M[@]}" "$@" >"$W/$name.out" 2>"$W/$name.err" ||
    fail "config check $name: $(cat "$W/$name.out" "$W/$name.err")"
  awk '$1 == "0" && NF == 8 { print $NF }' "$W/$name.out"
}
# sweep_mem NAME ARGS...: the sweep's predicted memory of its one layout
sweep_mem() {
  local name=$1; shift
  "$PLAIT_BIN" bench sweep "$CFG" -n 1 --steps 1 --warmup 0 --repeat 1 "${L[@]}" "${M[@]}" "$@" >"$W/$name.out" \
    2>"$W/$name.err" || fail "sweep $name: $(cat "$W/$name.out" "$W/$name.err")"
  awk -F'|' '/^  1 / { split($2, f, " "); print f[4] }' "$W/$name.out"
}
has() { grep -qF -- "$2" "$W/$1.out" || fail "$1: no '$2' in: $(cat "$W/$1.out")"; }

cpu=$(plan_mem plan-cpu device.plugin=cpu run.precision=bf16)
has plan-cpu "# memory counted for the cpu device ([device] plugin)"

if [ -e "$PLAIT_PLUGIN_PATH/libplait-device-cuda_emu.so" ]; then
  emu=$(plan_mem plan-emu device.plugin=cuda_emu run.precision=bf16)
  has plan-emu "# memory counted for the cuda_emu device ([device] plugin"
  want=$(check_mem check-emu device.plugin=cuda_emu run.precision=bf16)
  has check-emu "memory counted for the cuda_emu device ([device] plugin"
  swept=$(sweep_mem sweep-emu device.plugin=cuda_emu run.precision=bf16)
  has sweep-emu "# predicted memory counted for the cuda_emu device ([device] plugin"
  echo "cuda_emu bf16: plan $emu MiB, sweep $swept MiB, config check $want MiB; the cpu device $cpu MiB"
  [ -n "$want" ] && [ "$emu" = "$want" ] || fail "plan predicts $emu MiB on cuda_emu, config check $want MiB"
  [ "$swept" = "$want" ] || fail "the sweep predicts $swept MiB on cuda_emu, config check $want MiB"
  [ "$emu" != "$cpu" ] || fail "cuda_emu's bf16 activations counted as the cpu device's ($cpu MiB)"
else
  echo "cuda_emu: skipped, the cuda_emu device is not built here"
fi

# a device that does not open here: the cpu device, said in one line
gone=$(plan_mem plan-nodev device.plugin=nodev run.precision=bf16)
[ "$gone" = "$cpu" ] || fail "plan on nodev predicts $gone MiB, the cpu device $cpu MiB"
[ "$(grep -c "memory counted for" "$W/plan-nodev.out")" -eq 1 ] ||
  fail "plan on nodev: not one line on the device: $(cat "$W/plan-nodev.out")"
has plan-nodev "# memory counted for the cpu device (the config's does not open here: "
has plan-nodev "no NODEV device found"
# (its one layout cannot run here: bench train refuses it, and the sweep says so)
"$PLAIT_BIN" bench sweep "$CFG" -n 1 --steps 1 --warmup 0 --repeat 1 "${L[@]}" "${M[@]}" device.plugin=nodev \
  >"$W/sweep-nodev.out" 2>"$W/sweep-nodev.err" || true
has sweep-nodev "# predicted memory counted for the cpu device (the config's does not open here: "

# asked once a command: each open of the device logs one debug line
for cmd in check plan; do
  if [ $cmd = check ]; then args=(config check "$CFG"); else args=(plan "$CFG" --ranks 1 "${L[@]}"); fi
  PLAIT_LOG_LEVEL=debug "$PLAIT_BIN" "${args[@]}" "${M[@]}" device.plugin=sim >"$W/open-$cmd.out" 2>&1 ||
    fail "$cmd on sim: $(cat "$W/open-$cmd.out")"
  opens=$(grep -c "opened sim device" "$W/open-$cmd.out" || true)
  [ "$opens" -eq 1 ] || fail "$cmd opened the sim device $opens times: $(grep "opened sim" "$W/open-$cmd.out")"
done
echo "plan, bench sweep and config check count the config's device, asked once; one that does not open: the cpu device, said"
