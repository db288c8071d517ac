#!/usr/bin/env bash
# A plugin file whose entry function (plait_plugin_v1) never returns:
# `plait train`, `plait config check` and `plait config show` selecting it
# end with an error naming the file and its entry function, as `plait
# plugins` names it; a device plugin whose probe never returns (the sim
# test device with PLAIT_SIM_PROBE=hang): `plait train` ends naming it, and
# `plait config check` names it where it says which device it counted
# (PLAIT_PLUGIN_SCAN_TIMEOUT=1 makes the bound short; `timeout` only guards
# against a hang, it bounds nothing of the test).
source "$(dirname "$0")/lib.sh"
hanging=$(dirname "$(dirname "$PLAIT_BIN")")/tests/plugins-hanging
[ -f "$hanging/libplait-optim-hangentry.so" ] || fail "no hanging test plugin in $hanging"
want="libplait-optim-hangentry.so: the plugin's entry function plait_plugin_v1 did not return within 1 s"
for cmd in train "config check" "config show"; do
  out="$E2E_WORK/${cmd// /_}.out"
  rc=0
  # shellcheck disable=SC2086
  PLAIT_PLUGIN_PATH=$hanging PLAIT_PLUGIN_SCAN_TIMEOUT=1 timeout 120 "$PLAIT_BIN" $cmd "$CFG" \
    "run.out_dir=$E2E_WORK/run" optim.plugin=hangentry >"$out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "plait $cmd waited for the plugin's entry function until timeout ended it"
  [ $rc -ne 0 ] || fail "plait $cmd succeeded with a plugin whose entry function never returns"
  grep -qF "$want" "$out" || fail "plait $cmd did not name the hanging entry: $(tail -n 3 "$out")"
  echo "plait $cmd: exit $rc, $(grep -F "$want" "$out" | head -n 1 | cut -c1-160)"
done
devices=$(dirname "$(dirname "$PLAIT_BIN")")/tests/device-plugins
[ -f "$devices/libplait-device-sim.so" ] || fail "no sim test device in $devices"
want="libplait-device-sim.so): its probe did not return within 1 s"
for cmd in train "config check"; do
  out="$E2E_WORK/probe_${cmd// /_}.out"
  rc=0
  # shellcheck disable=SC2086
  PLAIT_PLUGIN_PATH=$devices PLAIT_SIM_PROBE=hang PLAIT_PLUGIN_SCAN_TIMEOUT=1 timeout 120 "$PLAIT_BIN" $cmd "$CFG" \
    "run.out_dir=$E2E_WORK/probe" device.plugin=sim >"$out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "plait $cmd waited for the device's probe until timeout ended it"
  [ "$cmd" != train ] || [ $rc -ne 0 ] || fail "plait train succeeded with a device whose probe never returns"
  grep -qF "$want" "$out" || fail "plait $cmd did not name the hanging probe: $(tail -n 3 "$out")"
  echo "plait $cmd, device probe: exit $rc"
done
echo "plugin entry hang OK"
