#!/usr/bin/env bash
# The progress line of `plait train` when piped: plain lines with step, loss,
# lr, tokens/s, MFU and ETA. With [run] mfu_peak the MFU is tokens/s x FLOPs
# per token (6N + 12·L·C·T, N = parameters without the position embedding)
# over that peak; with mfu_peak = 0 rank 0 measures its threads' GEMM rate at
# start (the best of 5 tries), caches it per machine and says where the peak
# came from, the next run takes the same figure from the cache, and the
# measurement's 48 MB of operands do not count in the run's peak RSS; an MFU
# above 100% is shown as an error, never as a figure, and left out of
# metrics.csv; a step longer than 5 s shows where it is; with progress off
# nothing is measured or shown.
source "$(dirname "$0")/lib.sh"
A="run.steps=6 run.eval_every=2"
LINE='^step +[0-9]+/6 \| loss [0-9]+\.[0-9]{4}( val [0-9]+\.[0-9]{4})? \| lr [0-9]\.[0-9]{2}e[-+][0-9]{2} \| +[0-9]+ tok/s \| MFU( +[0-9]+\.[0-9]%| error: [0-9]+% of the peak) \| ETA [0-9]+m[0-9]{2}s$'

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

# mfu_matches NAME PEAK_GFLOPS: every line's MFU figure is tok/s x FLOPs per
# token / peak (1% + rounding), and a line says "error" exactly when that is
# above 100%.
mfu_matches() {
  # tiny.ini: n_layer 2, n_embd 64, block 32, vocab 256; GPT-2 block = 12C² + 13C, ln_f 2C, wte V·C (tied head)
  local L=2 C=64 T=32 V=256
  local flops=$(( 6 * (V * C + L * (12 * C * C + 13 * C) + 2 * C) + 12 * L * C * T ))
  sed -E 's/.*\| +([0-9]+) tok\/s \| MFU( +([0-9.]+)%| (error)).*/\1 \3\4/' "$E2E_WORK/$1.lines" |
    awk -v f="$flops" -v peak="$2" -v name="$1" '
      { want = 100 * $1 * f / (peak * 1e9)
        if ($2 == "error") { if (want < 99) { printf "%s: MFU error at %.2f%%\n", name, want; bad = 1 } next }
        d = $2 - want; if (d < 0) d = -d
        if (d > 0.01 * want + 0.06) { printf "%s: MFU %s%% at %s tok/s, expected %.2f%%\n", name, $2, $1, want; bad = 1 } }
      END { exit bad }' || fail "$1: MFU does not follow tokens/s and the peak"
}

# a given peak: no measurement, MFU against it, in the progress lines and metrics.csv
train given $A --progress plain run.mfu_peak=200
progress_lines given
grep -q "^plait: MFU against 200.0 GFLOP/s: 1 rank x 200.0 GFLOP/s from \[run\] mfu_peak" "$E2E_WORK/given.out" ||
  fail "the given peak is not announced with its source: $(grep MFU "$E2E_WORK/given.out" | head -n 1)"
! grep -q "measured" "$E2E_WORK/given.out" || fail "measured a peak although [run] mfu_peak was given"
mfu_matches given 200
! grep -q "MFU error" "$E2E_WORK/given.lines" || fail "given: an MFU error against a 200 GFLOP/s peak"
paste -d' ' <(column given mfu) <(column given tokens_per_s) | awk '
  { if ($1 == "" || $1 <= 0 || $1 > 1) { print "mfu cell " $1; bad = 1 } } END { exit bad }' ||
  fail "metrics.csv's mfu column is not a fraction on every row"

# a peak below what the run achieves: a measurement error, shown as such
train low $A --progress plain run.mfu_peak=0.001
grep -Eq '^step .*\| MFU error: [0-9]+% of the peak \|' "$E2E_WORK/low.out" ||
  fail "an MFU above 100% was not reported as an error: $(grep '^step' "$E2E_WORK/low.out" | head -n 1)"
! grep -Eq 'MFU [0-9]+\.[0-9]%' "$E2E_WORK/low.out" || fail "an MFU above 100% was printed as a figure"
[ "$(column low mfu | grep -vc '^$')" = 0 ] || fail "an MFU above 100% went into metrics.csv"

# peak 0 (the default) and [run] progress = plain: measured at start with
# this rank's threads, cached per machine (here in a fresh cache directory),
# and the lines use it
shared_cache=$XDG_CACHE_HOME
export XDG_CACHE_HOME=$E2E_WORK/cache
rm -rf "$XDG_CACHE_HOME"
train measured $A run.progress=plain run.threads=2
progress_lines measured
src=$(grep '^plait: MFU against' "$E2E_WORK/measured.out") || fail "no peak announced: $(head -n 10 "$E2E_WORK/measured.out")"
grep -q "1 rank x the GEMM rate of one rank's 2 threads, fp32 on this machine, .*(measured now, best of 5 tries, cached in $XDG_CACHE_HOME/plait/peak.tsv\(; the cores were busy (the measurement had [0-9]*% of its threads' time), so the next run measures again\)\?)$" <<<"$src" ||
  fail "the measured peak's source: $src"
peak=$(sed -nE 's/^plait: MFU against ([0-9.]+) GFLOP\/s.*/\1/p' <<<"$src")
awk -v p="$peak" 'BEGIN { exit !(p > 0.1) }' || fail "implausible measured peak $peak GFLOP/s"
# (on a busy machine the measurement can catch a slow moment: the lines then
# say "error" rather than print a figure above 100%)
mfu_matches measured "$peak"
grep -q "fp32" "$XDG_CACHE_HOME/plait/peak.tsv" || fail "nothing cached: $(cat "$XDG_CACHE_HOME/plait/peak.tsv")"
# the cache line: key, GFLOP/s, when, tries, the share of its threads'
# time the measurement had; the source line says busy exactly when that
# share is under 0.8
IFS=$'\t' read -r key _ _ _ share <"$XDG_CACHE_HOME/plait/peak.tsv"
[ -n "$share" ] || fail "the cache line has no share: $(cat "$XDG_CACHE_HOME/plait/peak.tsv")"
quiet() { awk -v s="$1" 'BEGIN { exit !(s >= 0.8) }'; }
if quiet "$share"; then ! grep -q "the cores were busy" <<<"$src" || fail "a quiet measurement ($share) said busy: $src"
else grep -q "the cores were busy" <<<"$src" || fail "a busy measurement ($share) did not say so: $src"; fi
# the next run uses a quiet cached figure as it is, without measuring: the
# same peak, so MFU compares across runs, with when it was measured; a busy
# one it measures again, keeping the higher figure
train cached $A run.progress=plain run.threads=2
again=$(grep '^plait: MFU against' "$E2E_WORK/cached.out") || fail "the second run announced no peak"
peak2=$(sed -nE 's/^plait: MFU against ([0-9.]+) GFLOP\/s.*/\1/p' <<<"$again")
if quiet "$share"; then
  grep -Eq "\(measured [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2} UTC, best of 5 tries, cached in $XDG_CACHE_HOME/plait/peak.tsv\)$" <<<"$again" ||
    fail "the second run did not use the cache: $again"
  [ "$peak2" = "$peak" ] || fail "the peak moved between two runs: $src / $again"
else
  grep -q "(measured now, best of 5 tries, cached in $XDG_CACHE_HOME/plait/peak.tsv" <<<"$again" ||
    fail "the second run did not measure a busy figure again: $again"
  awk -v a="$peak2" -v b="$peak" 'BEGIN { exit !(a >= b) }' || fail "a busy figure replaced by a lower one: $src / $again"
fi
[ "$(wc -l <"$XDG_CACHE_HOME/plait/peak.tsv")" = 1 ] || fail "the cache holds more than one line for one key"
# a figure cached while the cores were busy (share 0.3), far too low: the
# next run measures again and replaces it; a line from before shares were
# recorded counts as quiet and is used as it is
printf '%s\t0.500\t1700000000\t5\t0.30\n' "$key" >"$XDG_CACHE_HOME/plait/peak.tsv"
train rebusy $A run.progress=plain run.threads=2
re=$(grep '^plait: MFU against' "$E2E_WORK/rebusy.out") || fail "no peak announced after a busy cache line"
grep -q "(measured now, best of 5 tries, cached in " <<<"$re" || fail "a busy cache line was used as it is: $re"
awk -v a="$(sed -nE 's/^plait: MFU against ([0-9.]+) GFLOP\/s.*/\1/p' <<<"$re")" 'BEGIN { exit !(a > 0.5) }' ||
  fail "the busy 0.5 GFLOP/s stayed: $re"
printf '%s\t0.500\t1700000000\t5\n' "$key" >"$XDG_CACHE_HOME/plait/peak.tsv"
train old $A run.progress=plain run.threads=2
grep -q '^plait: MFU against 0.5 GFLOP/s.*(measured 2023-11-14 22:13 UTC, best of 5 tries, cached in ' "$E2E_WORK/old.out" ||
  fail "a cache line without a share was not used as it is: $(grep '^plait: MFU against' "$E2E_WORK/old.out")"
export XDG_CACHE_HOME=$shared_cache

# a long step shows where it is: piped, a line every 10 s once the step has
# run 5 s (debug_compute_sleep_ms: a forward sleeps 1.5 s, a backward 3 s;
# two micro-batches make a 9 s step whose second half is past 5 s)
train longstep run.steps=1 run.progress=plain run.mfu_peak=200 run.debug_compute_sleep_ms=1500 data.micro_batch=4 data.val_fraction=0
grep -Eq '^step +1/1 \| (forward|backward), layer [0-9]+/[0-9]+, micro-batch 2/2 \| [5-9] s into the step$' \
  "$E2E_WORK/longstep.out" || fail "a 9 s step showed no progress within it: $(grep '^step' "$E2E_WORK/longstep.out")"
[ "$(grep -c 'into the step' "$E2E_WORK/longstep.out")" -eq 1 ] || fail "more than one line within 10 s of a step"

# progress off (what the other tests use): nothing shown, nothing measured
train quiet $A run.progress=off
! grep -q '^step ' "$E2E_WORK/quiet.out" || fail "progress off printed progress lines"
! grep -q "MFU" "$E2E_WORK/quiet.out" || fail "progress off measured the peak"
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
# bench train with a peak below what the step reaches: no figure, and what to do
"$PLAIT_BIN" bench train "$CFG" run.mfu_peak=0.001 --steps 1 --warmup 0 >"$E2E_WORK/bench-low.out" 2>&1 ||
  fail "bench train failed: $(tail -n 3 "$E2E_WORK/bench-low.out")"
grep -Eq " error: [0-9]+% of the peak " "$E2E_WORK/bench-low.out" || fail "bench train showed a figure above 100%: $(cat "$E2E_WORK/bench-low.out")"
grep -q "plait doctor --peak" "$E2E_WORK/bench-low.out" || fail "bench train did not say how to measure the peak again: $(cat "$E2E_WORK/bench-low.out")"
echo "progress OK"
