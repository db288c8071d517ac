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
