#!/usr/bin/env bash
# usage: walkthrough.sh BUILD_DIR SOURCE_DIR WORK_DIR
# Runs the author's walkthrough of sdk/README.md (the block between the
# walkthrough markers) exactly as written, in an empty directory, against a
# scratch install of plait: only installed files are used.
set -euo pipefail
build=$1 src=$2 work=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work/empty"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
script=$(awk '/<!-- walkthrough -->/ { on = 1; next } /<!-- \/walkthrough -->/ { on = 0 } on && !/^```/' \
  "$src/sdk/README.md")
[ -n "$script" ] || fail "no walkthrough block in sdk/README.md"
# nothing of the source tree is reachable: PATH has no build dir, the cwd is empty
out=$(cd "$work/empty" && env -u PLAIT_PLUGIN_PATH PREFIX="$work/prefix" bash -euo pipefail -c "$script" 2>&1) ||
  { echo "$out"; fail "the walkthrough failed"; }
echo "$out" | tail -n 25
grep -Eq '^comm +shm +1\.0\.0 +1\.0 +available' <<<"$out" || fail "plait plugins did not list shm"
grep -q "passed every check on 2, 4 ranks" <<<"$out" || fail "the kit did not pass shm"
echo "walkthrough OK"
