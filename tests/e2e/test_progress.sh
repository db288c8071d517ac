#!/usr/bin/env bash
# The progress line of `plait train` when piped: plain lines with step, loss,
# lr, tokens/s, MFU and ETA. With [run] mfu_peak the MFU is tokens/s x FLOPs
# per token (6N + 12·L·C·T, N = parameters without the position embedding)
# over that peak; with mfu_peak = 0 rank 0 measures the SGEMM peak at start and
# says so, and the measurement's 48 MB of operands do not count in the run's
# peak RSS; with progress off nothing is measured or shown.
source "$(dirname "$0")/lib.sh"
A="run.steps=6 run.eval_every=2"
LINE='^step +[0-9]+/6 \| loss [0-9]+\.[0-9]{4}( val [0-9]+\.[0-9]{4})? \| lr [0-9]\.[0-9]{2}e[-+][0-9]{2} \| +[0-9]+ tok/s \| MFU +[0-9]+\.[0-9]% \| ETA [0-9]+m[0-9]{2}s$'

# progress_lines NAME: the run's progress lines; each must match LINE.
progress_lines() {
  local out=$E2E_WORK/$1.out
  grep '^step ' "$out" >"$E2E_WORK/$1.lines" || fail "$1: no progress lines: $(cat "$out")"
  if grep -Evq "$LINE" "$E2E_WORK/$1.lines"; then
    fail "$1: malformed progress line: $(grep -Ev "$LINE" "$E2E_WORK/$1.lines" | sed -n 1p)"
  fi
  # evaluations (steps 2, 4, 6) are always shown, besides at most one line a second
  for s in 2 4 6; do grep -Eq "^step +$s/6 .* val " "$E2E_WORK/$1.lines" || fail "$1: no line for step $s"; done
}

# mfu_matches NAME PEAK_GFLOPS: every line's MFU is tok/s x FLOPs per token / peak (1% + rounding).
mfu_matches() {
  # tiny.ini: n_layer 2, n_embd 64, block 32, vocab 256; GPT-2 block = 12C² + 13C, ln_f 2C, wte V·C (tied head)
  local L=2 C=64 T=32 V=256
  local flops=$(( 6 * (V * C + L * (12 * C * C + 13 * C) + 2 * C) + 12 * L * C * T ))
  sed -E 's/.*\| +([0-9]+) tok\/s \| MFU +([0-9.]+)%.*/\1 \2/' "$E2E_WORK/$1.lines" |
    awk -v f="$flops" -v peak="$2" -v name="$1" '
      { want = 100 * $1 * f / (peak * 1e9); d = $2 - want; if (d < 0) d = -d
        if (d > 0.01 * want + 0.06) { printf "%s: MFU %s%% at %s tok/s, expected %.2f%%\n", name, $2, $1, want; bad = 1 } }
      END { exit bad }' || fail "$1: MFU does not follow tokens/s and the peak"
}

# a given peak: no measurement, MFU against it (a small peak makes MFU large and exact to check)
train given $A --progress plain run.mfu_peak=1
progress_lines given
! grep -q "measured SGEMM peak" "$E2E_WORK/given.out" || fail "measured a peak although [run] mfu_peak was given"
mfu_matches given 1

# peak 0 (the default) and [run] progress = plain: measured once at start, and the lines use it
train measured $A run.progress=plain
progress_lines measured
peak=$(sed -nE 's/^plait: MFU against a measured SGEMM peak of ([0-9.]+) GFLOP\/s.*/\1/p' "$E2E_WORK/measured.out")
[ -n "$peak" ] || fail "no measured peak announced: $(head -n 10 "$E2E_WORK/measured.out")"
awk -v p="$peak" 'BEGIN { exit !(p > 0.1) }' || fail "implausible measured peak $peak GFLOP/s"
mfu_matches measured "$peak"

# progress off (what the other tests use): nothing shown, nothing measured
train quiet $A run.progress=off
! grep -q '^step ' "$E2E_WORK/quiet.out" || fail "progress off printed progress lines"
! grep -q "SGEMM" "$E2E_WORK/quiet.out" || fail "progress off measured the SGEMM peak"
# the measurement is not part of the run's memory: peak RSS as without it (48 MB operands; 8 MB slack)
rss_measured=$(column measured peak_rss_mb | tail -n 1)
rss_quiet=$(column quiet peak_rss_mb | tail -n 1)
awk -v a="$rss_measured" -v b="$rss_quiet" 'BEGIN { exit !(a < b + 8) }' ||
  fail "peak RSS $rss_measured MB with the SGEMM measurement, $rss_quiet MB without"
# under an external launcher "auto" means plain lines even on a terminal:
# mpirun gives rank 0 a pseudo-terminal while the job's output goes to a log
# (script(1) gives the torchrun-style rank one; its pty turns \n into \r\n)
in_place() { sed 's/\r$//' "$1" | grep -c $'\r\|\x1b' || true; }
rm -rf "${E2E_WORK:?}/launched"
script -qec "PLAIT_JOB_TOKEN=e2e-progress-token RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 \
  MASTER_PORT=$((20000 + RANDOM % 20000)) $PLAIT_BIN train $CFG run.out_dir=$E2E_WORK/launched $A run.progress=auto" \
  /dev/null >"$E2E_WORK/launched.out" 2>&1 || fail "torchrun-style run failed: $(tail -n 3 "$E2E_WORK/launched.out")"
[ "$(in_place "$E2E_WORK/launched.out")" = 0 ] || fail "torchrun-style rank on a terminal drew the progress in place"
grep -q "^step .*/6 " "$E2E_WORK/launched.out" || fail "torchrun-style rank printed no plain progress lines"
if command -v mpirun >/dev/null; then
  rm -rf "${E2E_WORK:?}/mpi-progress"
  mpirun --allow-run-as-root --oversubscribe -np 1 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/mpi-progress" $A \
    run.progress=auto >"$E2E_WORK/mpi-progress.out" 2>&1 || fail "mpirun run failed: $(tail -n 3 "$E2E_WORK/mpi-progress.out")"
  [ "$(in_place "$E2E_WORK/mpi-progress.out")" = 0 ] || fail "under mpirun the redirected log holds in-place progress"
  grep -q "^step " "$E2E_WORK/mpi-progress.out" || fail "under mpirun no plain progress lines"
fi
echo "progress OK"
