# Sourced by the tests/sdk scripts that train (each run as SCRIPT PLAIT PLUGIN_DIR
# SOURCE_DIR): strict mode, the three arguments as $plait, $dir and $src,
# fail(), a fresh $work directory named after the script, removed at exit
# with any process still running from the run directory under it (a rank
# or a helper a broken plugin forked), and the working directory $src.
set -euo pipefail
plait=$1 dir=$2 src=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
work=$(mktemp -d "/tmp/plait-$(basename "$0" .sh)-XXXXXX")
trap 'pkill -KILL -f -- "$work/run" 2>/dev/null || true; rm -rf "$work"' EXIT
cd "$src"
# train PLUGIN [KEY=VALUE...]: gpt-tiny at dp 2 over the comm plugin PLUGIN,
# under `timeout 100`, its output in $work/out-PLUGIN (the last lines shown);
# sets $rc (its exit status) and $took (seconds, only for the log: no test
# asserts how long a run took).
train() {
  local plugin=$1 start=$SECONDS
  shift
  rc=0
  PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train configs/gpt-tiny.ini parallel.dp=2 comm.plugin="$plugin" \
    run.eval_every=0 run.progress=off "run.out_dir=$work/run-$plugin" "$@" >"$work/out-$plugin" 2>&1 || rc=$?
  took=$((SECONDS - start))
  tail -n 4 "$work/out-$plugin"
}
# failed PLUGIN: the last run ended as a failure, neither a success nor a hang.
failed() { [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the run over $1 exited $rc (0: counted as a success; 124: it hung)"; }
# ended_at_once PLUGIN TEXT: the last run over PLUGIN (with [comm] timeout =
# 3600, so a rank that waited for it would meet `timeout 100`) failed, its
# output saying TEXT, no "done:" line and no rank saying it timed out or was
# ended by the watchdog: the job ended as its rank failed, not when rank 0
# gave up waiting for it.
ended_at_once() {
  failed "$1"
  grep -qF -- "$2" "$work/out-$1" || fail "the job's end does not say: $2"
  ! grep -q "^done:" "$work/out-$1" || fail "the run reported itself done"
  ! grep -Eq "timed out|did not complete within|did not arrive within|has been inside [a-z_]+\(\) for" "$work/out-$1" ||
    fail "a rank waited for a timeout: $(grep -E "timed out|did not|has been inside" "$work/out-$1" | head -n 1)"
}
