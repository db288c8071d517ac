#!/usr/bin/env bash
# usage: uds_out_of_tree.sh BUILD_DIR SOURCE_DIR WORK_DIR
# The example transport as a third party builds it: plait installed to a
# scratch prefix, sdk/examples/uds built with find_package(plait) against
# that prefix only, loaded by name from PLAIT_PLUGIN_PATH by the installed
# plait; it passes `plait plugin test` and trains gpt-tiny at dp=2 in
# deterministic mode with the same losses and final parameters as tcp.
set -euo pipefail
build=$1 src=$2 work=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
plait=$prefix/bin/plait

cmake -S "$src/sdk/examples/uds" -B "$work/uds" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/uds" >/dev/null
lib=$work/uds/libplait-comm-uds.so
test -f "$lib" || fail "the example did not build $lib"
exports=$(nm -D --defined-only "$lib" | awk '$2 == "T" {print $3}')
[ "$exports" = "plait_plugin_v1" ] || fail "unexpected exports: $exports"
export PLAIT_PLUGIN_PATH=$work/uds

out=$("$plait" plugins)
grep -Eq '^comm +uds +1\.0\.0 +1\.0 +available' <<<"$out" || fail "plait plugins does not list uds: $out"

out=$("$plait" plugin test "$lib" --ranks 2,8 --large 4M 2>&1) || { echo "$out"; fail "the kit failed the example"; }
grep -q "passed every check on 2, 8 ranks" <<<"$out" || { echo "$out"; fail "no passing verdict"; }
echo "$out" | grep -E "checks:|passed every"

# gpt-tiny, dp = 2, deterministic: uds (by name) against tcp
cd "$src"
for t in uds tcp; do
  "$plait" train configs/gpt-tiny.ini parallel.dp=2 run.deterministic=true comm.plugin=$t run.steps=10 \
    run.eval_every=0 run.ckpt_every=10 run.progress=off "run.out_dir=$work/train-$t" >"$work/train-$t.out" 2>&1 ||
    { tail -n 20 "$work/train-$t.out"; fail "training over $t failed"; }
done
losses() { awk -F, 'NR > 1 { print $1, $2 }' "$work/train-$1/metrics.csv"; }
[ "$(losses uds | wc -l)" -eq 10 ] || fail "uds run has $(losses uds | wc -l) steps, not 10"
diff <(losses uds) <(losses tcp) || fail "losses over uds differ from tcp"
"$build/tests/ckpt_diff" "$work/train-uds/ckpt-00000010" "$work/train-tcp/ckpt-00000010" --bits ||
  fail "final checkpoints over uds and tcp differ"
echo "uds: 10 steps of gpt-tiny at dp=2, losses and parameters bit-identical to tcp (final loss $(losses uds | tail -n 1))"
