#!/usr/bin/env bash
# usage: abi_compat.sh PLAIT V10_DIR NOW_DIR WORK_DIR SOURCE_DIR
# A transport and an optimizer built against the frozen ABI v1.0 headers (V10_DIR)
# load in today's core, pass the conformance kit, and train exactly like
# the same sources built against today's headers (NOW_DIR).
set -euo pipefail
plait=$1 v10=$2 now=$3 work=$4 src=$5
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
core_abi=$("$plait" --version | sed -n 's/.*plugin ABI v\([0-9.]*\)).*/\1/p')
[ "$core_abi" != 1.0 ] || fail "the core still speaks ABI 1.0: the test needs a core newer than the frozen headers"

out=$(PLAIT_PLUGIN_PATH=$v10 "$plait" plugins)
for p in "comm +uds" "optim +sgd"; do
  grep -E "^$p +1\.0\.0 +1\.0 +available +$v10/" <<<"$out" >/dev/null ||
    fail "the v1.0 build of $p is not listed available from $v10: $out"
done
echo "core ABI v$core_abi loads plugins built against the v1.0 headers"

out=$(PLAIT_PLUGIN_PATH=$v10 "$plait" plugin test "$v10/libplait-comm-uds.so" --ranks 3 --large 1M 2>&1) ||
  { echo "$out"; fail "the kit failed the v1.0 build of uds"; }
grep -q "passed every check on 3 ranks" <<<"$out" || { echo "$out"; fail "no passing verdict"; }

# both v1.0 builds in one run (dp = 2 over uds, sgd as optimizer), against today's builds
cd "$src"
for d in v10 now; do
  dir=${!d}
  PLAIT_PLUGIN_PATH=$dir "$plait" train tests/e2e/tiny.ini parallel.dp=2 comm.plugin=uds optim.plugin=sgd \
    run.steps=8 run.deterministic=true "run.out_dir=$work/$d" >"$work/$d.out" 2>&1 ||
    { tail -n 20 "$work/$d.out"; fail "training with the $d builds failed"; }
done
losses() { awk -F, 'NR > 1 { print $1, $2 }' "$work/$1/metrics.csv"; }
[ "$(losses v10 | wc -l)" -eq 8 ] || fail "the v1.0 run has $(losses v10 | wc -l) steps, not 8"
diff <(losses v10) <(losses now) || fail "the v1.0 builds train differently from today's"
first=$(losses v10 | head -n 1 | cut -d' ' -f2) last=$(losses v10 | tail -n 1 | cut -d' ' -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || fail "sgd over uds did not lower the loss ($first -> $last)"
echo "v1.0 builds of uds and sgd: 8 steps at dp=2, losses identical to today's builds ($first -> $last)"
