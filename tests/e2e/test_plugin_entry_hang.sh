#!/usr/bin/env bash
# A plugin file whose entry function (plait_plugin_v1) never returns:
# `plait train`, `plait config check` and `plait config show` selecting it
# end with an error naming the file and its entry function, as `plait
# plugins` names it (PLAIT_PLUGIN_SCAN_TIMEOUT=1 makes the bound short;
# `timeout` only guards against a hang, it bounds nothing of the test).
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
echo "plugin entry hang OK"
