#!/usr/bin/env bash
# A plugin directory or file in PLAIT_PLUGIN_PATH that every user may write
# is warned about once, naming it, when a command looks up plugins there:
# the directory with and without its sticky bit (a new plugin file can be
# created in either), the file; one writable by its owner only is not.
source "$(dirname "$0")/lib.sh"
good=$(dirname "$(dirname "$PLAIT_BIN")")/tests/plugins/libplait-optim-testgood.so
[ -f "$good" ] || fail "no test plugin $good"
d=$(realpath "$E2E_WORK")/open
mkdir -p "$d" && cp "$good" "$d/"
so=$d/libplait-optim-testgood.so
check() { # NAME: config check selecting the plugin there; its output in NAME.out
  PLAIT_PLUGIN_PATH=$d timeout 120 "$PLAIT_BIN" config check "$CFG" optim.plugin=testgood >"$E2E_WORK/$1.out" 2>&1 || true
}
said() { grep -cF "$1 is writable by every user" "$E2E_WORK/$2.out" || true; }
for mode in 777 1777; do
  chmod "$mode" "$d" && chmod 666 "$so"
  check "dir$mode"
  [ "$(said "plugin directory $d" "dir$mode")" = 1 ] ||
    fail "directory mode $mode: the warning naming $d was said $(said "plugin directory $d" "dir$mode") times: $(head -n 3 "$E2E_WORK/dir$mode.out")"
  [ "$(said "plugin file $so" "dir$mode")" = 1 ] ||
    fail "directory mode $mode: the warning naming $so was said $(said "plugin file $so" "dir$mode") times"
done
grep -F "plugin directory $d" "$E2E_WORK/dir777.out" | head -n 1
chmod 755 "$d" && chmod 644 "$so"
check owner_only
! grep -q "writable by every user" "$E2E_WORK/owner_only.out" || fail "warned about a plugin path only its owner may write"
echo "plugin path writable OK"
