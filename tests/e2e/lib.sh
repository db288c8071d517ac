# Shared helpers of the end-to-end tests (sourced). Environment from ctest:
# PLAIT_BIN, PLAIT_SOURCE_DIR, CKPT_DIFF, E2E_WORK (a scratch directory).
set -euo pipefail
: "${PLAIT_BIN:?}" "${PLAIT_SOURCE_DIR:?}" "${CKPT_DIFF:?}" "${E2E_WORK:?}"
CFG=${CFG:-$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini}
cd "$PLAIT_SOURCE_DIR"
mkdir -p "$E2E_WORK"

fail() { echo "FAIL: $*" >&2; exit 1; }

# train NAME [args...]: a run into $E2E_WORK/NAME; its output in NAME.out.
train() {
  local name=$1; shift
  case " $* " in *" --resume "*) ;; *) rm -rf "${E2E_WORK:?}/$name" ;; esac
  if ! "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$E2E_WORK/$name.out" 2>&1; then
    tail -n 30 "$E2E_WORK/$name.out" >&2
    fail "run $name ($*) failed"
  fi
}

# column NAME COL: the values of metrics column COL, one per line.
column() {
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next } { print $c }' \
    "$E2E_WORK/$1/metrics.csv"
}

# same_losses A B RTOL: the loss curves agree within RTOL relative (0 = exactly).
same_losses() {
  paste -d' ' <(column "$1" loss) <(column "$2" loss) | awk -v r="$3" -v a="$1" -v b="$2" '
    { n++; d = $1 - $2; if (d < 0) d = -d; m = ($1 < 0 ? -$1 : $1);
      if ((r == 0 && $1 != $2) || (r > 0 && d > r * m)) { printf "step %d: %s %s vs %s %s\n", n, a, $1, b, $2; bad = 1 } }
    END { if (n == 0) { print "no steps"; exit 1 } ; exit bad }' || fail "loss curves of $1 and $2 differ"
}

# last_ckpt NAME: the newest checkpoint directory of a run.
last_ckpt() { ls -d "$E2E_WORK/$1"/ckpt-* | sort | tail -n 1; }

# same_params A B RTOL | bits [FILES]: final checkpoints agree (FILES:
# model, the default, optim or all; --bits compares all). RTOL is per
# tensor: max|a-b| <= RTOL x max|a| (ckpt_diff's default mode; its
# --elementwise mode bounds every element instead, see
# tests/tools/ckpt_compare.h).
same_params() {
  if [ "$3" = bits ]; then
    "$CKPT_DIFF" "$(last_ckpt "$1")" "$(last_ckpt "$2")" --bits || fail "final checkpoints of $1 and $2 differ"
  else
    "$CKPT_DIFF" "$(last_ckpt "$1")" "$(last_ckpt "$2")" --files "${4:-model}" --rtol "$3" ||
      fail "final ${4:-model} tensors of $1 and $2 differ beyond $3"
  fi
}

# mem NAME RANK COL: a value of the run's memory.csv (per-rank bytes and mesh
# coordinates, written at the end of the run).
mem() {
  awk -F, -v r="$2" -v col="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
    $1 == r { print $c }' "$E2E_WORK/$1/memory.csv"
}

# median NAME COL [FIRST]: median of a metrics column over rows FIRST.. (default 2).
median() {
  column "$1" "$2" | tail -n +"${3:-2}" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# has_plugin KIND NAME: `plait plugins` lists it as available.
has_plugin() { "$PLAIT_BIN" plugins 2>/dev/null | grep -Eq "^$1 +$2 .*available"; }
