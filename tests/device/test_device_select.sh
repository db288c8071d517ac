#!/usr/bin/env bash
# [device] plugin selection: a device plugin that finds no device stops
# `plait train` before any rank starts (one process and the launcher's
# path), with the plugin's reason and the key; unknown plugins and ordinals
# beyond the visible devices are config errors; an optimizer written for
# ABI 1.0 is refused on a device whose memory is not host memory (sim) and
# still runs on the cpu device; `plait plugins` lists device plugins.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini

refused() { # refused NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2; shift 2
  rm -rf "${E2E_WORK:?}/$name"
  if "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$E2E_WORK/$name.out" 2>&1; then
    fail "$name: ran instead of being refused"
  fi
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: no '$want' in: $(cat "$E2E_WORK/$name.out")"
}

# no device: nothing starts, not even a rank's log
for layout in "parallel.dp=1" "parallel.dp=2"; do
  name=nodev_${layout#parallel.}
  refused "$name" "[device] plugin = nodev: no NODEV device found (the nodev test device never has one); no rank was started" \
    device.plugin=nodev "$layout"
  [ ! -e "$E2E_WORK/$name" ] || fail "$name: a rank started ($(ls "$E2E_WORK/$name"))"
done
refused unknown "[device] plugin = warp9: device plugin 'warp9' not found" device.plugin=warp9
refused ordinal "key 'ordinal' in [device]: 3, but this process sees 1 cpu device" device.ordinal=3

# an optimizer built against SDK 1.0 predates device memory
sgd=${PLAIT_TEST_ABI10_DIR:?}/libplait-optim-sgd.so
[ -f "$sgd" ] || fail "the ABI 1.0 sgd plugin was not built ($sgd)"
refused old_optim "optim plugin 'sgd' declares ABI 1.0, older than 1.3" device.plugin=sim "optim.plugin=$sgd"
grep -qF "device 'sim'" "$E2E_WORK/old_optim.out" || fail "the refusal does not name the device: $(cat "$E2E_WORK/old_optim.out")"
train old_optim_cpu run.steps=2 run.progress=off "optim.plugin=$sgd" device.plugin=cpu

"$PLAIT_BIN" plugins >"$E2E_WORK/plugins.out" 2>&1 || fail "plait plugins failed"
grep -qE '^device +cpu +[^ ]+ +1\.[0-9]+ +available' "$E2E_WORK/plugins.out" || fail "cpu device not listed: $(cat "$E2E_WORK/plugins.out")"
grep -qE '^device +sim ' "$E2E_WORK/plugins.out" || fail "sim device not listed: $(cat "$E2E_WORK/plugins.out")"
echo "device selection: no-device refusal before any rank, config errors, ABI 1.0 optimizer refused on sim"
