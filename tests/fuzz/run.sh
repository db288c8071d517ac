#!/usr/bin/env bash
# Run every libFuzzer target for a bounded time (CI): new inputs go to a
# scratch directory, the committed corpus is read; a crash, leak or
# sanitizer report fails the run and leaves the input in the scratch
# directory (add it to tests/fuzz/corpus/<target>/ with the fix). Each
# target fuzzes on one core, so as many run at once as there are cores.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS_PER_TARGET]
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [SECONDS]}
seconds=${2:-5}
cd "$(dirname "$0")/../.."
root=$PWD
out=$(mktemp -d /tmp/plait-fuzz-XXXXXX)
# the targets' own scratch directories (fuzz_scratch.h) go there too: a
# crash leaves its files beside its input
export TMPDIR=$out/tmp
mkdir "$TMPDIR"
jobs_max=$(nproc 2>/dev/null || echo 2)

# one target: its log is $out/<target>.log, its exit status $out/<target>.rc
fuzz_one() {
  local target=$1 rc=0
  mkdir -p "$out/$target"
  (cd "$out/$target" && "$root/$build/tests/fuzz_$target" -max_total_time="$seconds" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$out/$target/" "$out/$target" \
    "$root/tests/fuzz/corpus/$target" >"$out/$target.log" 2>&1) || rc=$?
  echo $rc >"$out/$target.rc"
}

# one target per committed corpus directory (tests/fuzz/CMakeLists.txt)
targets=()
for dir in tests/fuzz/corpus/*/; do targets+=("$(basename "$dir")"); done
running=0
for target in "${targets[@]}"; do
  # at most jobs_max at once
  if [ "$running" -ge "$jobs_max" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz_one "$target" &
  running=$((running + 1))
done
wait
# report in order, each target's own status
status=0
for target in "${targets[@]}"; do
  echo "fuzz_$target: ${seconds}s over tests/fuzz/corpus/$target"
  if [ "$(cat "$out/$target.rc" 2>/dev/null)" != 0 ]; then
    tail -n 40 "$out/$target.log"
    echo "fuzz_$target FAILED: the input is in $out/$target (crash-*, leak-*, timeout-*)"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done [0-9]+ runs" "$out/$target.log" | tail -n 1
  fi
done
[ $status -ne 0 ] || rm -rf "$out"
exit $status
