#!/usr/bin/env bash
# scripts/test.sh BUILD [EXCLUDE]: the test runner of `make test`,
# `make test-all` and CI. It runs ctest over the build tree BUILD as two
# processes side by side:
#   - the tests labelled `waits`, one at a time. They spend most of their
#     time waiting (for heartbeats, join and stop timeouts, a stuck peer's
#     or plugin's bound) and keep at most about a third of a core busy, so
#     they cost the machine little beside the others;
#   - every other test as ctest -j2 runs it: two at a time, and the runs of
#     several ranks (RUN_SERIAL) alone.
# Run by one ctest, a waiting test would hold one of the two places for its
# whole length. EXCLUDE (a label regex, e.g. `slow`) leaves more tests out
# of both. The waiting tests' ctest runs in BUILD/ctest-waits, a folder
# whose CTestTestfile.cmake includes BUILD's, so that each ctest keeps its
# own Testing/ logs (`ctest --rerun-failed` in BUILD reruns the others'
# failures; in BUILD/ctest-waits, the waiting tests'). Their output is
# printed after the others' (BUILD/ctest-waits/waits.log), then both
# summaries; the exit status fails if either failed.
set -uo pipefail
build=${1:?usage: scripts/test.sh BUILD [EXCLUDE]}
exclude=${2:-}
cd "$build" || exit 1
mkdir -p ctest-waits
printf 'subdirs("%s")\n' "$PWD" >ctest-waits/CTestTestfile.cmake
waits_log=ctest-waits/waits.log
(cd ctest-waits && exec ctest --output-on-failure -j1 -L waits ${exclude:+-LE "$exclude"}) >"$waits_log" 2>&1 &
waits=$!
trap 'kill $waits 2>/dev/null' EXIT
ctest --output-on-failure -j2 -LE "waits${exclude:+|$exclude}"
rc=$?
wait $waits
waits_rc=$?
trap - EXIT
echo
echo "=== the tests that mostly wait, run beside the others (label waits):"
cat "$waits_log"
[ $rc -eq 0 ] && [ $waits_rc -eq 0 ]
