# Shared helpers of the end-to-end tests (sourced). Environment from ctest:
# PLAIT_BIN, PLAIT_SOURCE_DIR, CKPT_DIFF, E2E_WORK (a scratch directory).
set -euo pipefail
: "${PLAIT_BIN:?}" "${PLAIT_SOURCE_DIR:?}" "${CKPT_DIFF:?}" "${E2E_WORK:?}"
CFG=${CFG:-$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini}
cd "$PLAIT_SOURCE_DIR"
mkdir -p "$E2E_WORK"
# plait's per-user cache (the MFU peak) lives in the build tree, not in ~
export XDG_CACHE_HOME=$(dirname "$(dirname "$E2E_WORK")")/cache

fail() { echo "FAIL: $*" >&2; exit 1; }

# COMM_TIMEOUT_WORDS: an extended regex matching what plait prints when a
# rank gave up waiting on a peer (core/comm/comm_p2p.c, core/coll/coll_p2p.c,
# the transports' "did not complete within", the rendezvous' "did not arrive
# within") or the watchdog ended a call (core/commstate/comm_watchdog.c). A
# test that a failure is noticed at once sets [comm] timeout far above its
# `timeout` bound and checks that no output matches it: no clock is read.
COMM_TIMEOUT_WORDS='timed out|did not complete within|did not arrive within|has been inside [a-z_]+\(\) for'

# free_port: a TCP port on 127.0.0.1 that nothing listens on now
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# at_exit CMD: run CMD when the test ends, however it ends (one EXIT trap
# for the test: use this, not trap). Then a test that passed (or skipped)
# removes its $E2E_WORK; a failed one keeps it for its outputs, as does
# E2E_KEEP=1.
E2E_AT_EXIT=()
at_exit() { E2E_AT_EXIT+=("$1"); }
e2e_exit() {
  local rc=$? c
  for c in "${E2E_AT_EXIT[@]}"; do eval "$c" || true; done
  if { [ $rc -eq 0 ] || [ $rc -eq 77 ]; } && [ -z "${E2E_KEEP:-}" ]; then
    cd / && rm -rf "${E2E_WORK:?}"
  fi
  exit $rc
}
trap e2e_exit EXIT

# sample_cases ARRAY KEEP: the long matrices' tier. `make test` (and so CI)
# runs KEEP of the array's cases, consecutive from an offset that the
# commit under test chooses, so successive commits cover the whole matrix
# and a rerun of one commit repeats its choice; `make test-all`
# (PLAIT_TEST_ALL=1) runs every case. PLAIT_TEST_SAMPLE=N picks the
# offset by hand. The cases run and left are printed.
sample_cases() {
  local -n sc_cases=$1
  local keep=$2 n=${#sc_cases[@]} seed off i kept=() left=()
  if [ -n "${PLAIT_TEST_ALL:-}" ] || [ "$keep" -ge "$n" ]; then
    echo "matrix $1: all $n cases"
    return 0
  fi
  if [ -n "${PLAIT_TEST_SAMPLE:-}" ]; then
    case $PLAIT_TEST_SAMPLE in *[!0-9]*) fail "PLAIT_TEST_SAMPLE=$PLAIT_TEST_SAMPLE is not a number" ;; esac
    seed="PLAIT_TEST_SAMPLE=$PLAIT_TEST_SAMPLE" off=$((10#$PLAIT_TEST_SAMPLE % n))
  else
    seed=$(git -C "$PLAIT_SOURCE_DIR" rev-parse --short=7 HEAD 2>/dev/null || echo 0)
    off=$((16#$seed % n)) seed="commit $seed"
  fi
  for ((i = 0; i < n; i++)); do
    if (((i - off + n) % n < keep)); then kept+=("${sc_cases[$i]}"); else left+=("${sc_cases[$i]%%|*}"); fi
  done
  sc_cases=("${kept[@]}")
  echo "matrix $1: $keep of $n cases (offset $off, from $seed); left to make test-all: ${left[*]}"
}

# train NAME [args...]: a run into $E2E_WORK/NAME; its output in NAME.out.
# The run directory starts empty unless the run resumes (--resume or
# run.resume=auto|yes).
train() {
  local name=$1; shift
  case " $* " in *" --resume "* | *" run.resume=auto "* | *" run.resume=yes "*) ;; *) rm -rf "${E2E_WORK:?}/$name" ;; esac
  printf '%s\n' "$@" >"$E2E_WORK/$name.args" # what a bitwise comparison asks of it (cuda_inexact)
  if ! "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$E2E_WORK/$name.out" 2>&1; then
    tail -n 30 "$E2E_WORK/$name.out" >&2
    fail "run $name ($*) failed"
  fi
}

# train_refused NAME EXPECTED ARGS...: plait train exits non-zero printing
# EXPECTED (its output in NAME.out).
train_refused() {
  local name=$1 want=$2; shift 2
  if "$PLAIT_BIN" train "$CFG" "$@" >"$E2E_WORK/$name.out" 2>&1; then
    fail "$name: plait train $* succeeded: $(tail -n 3 "$E2E_WORK/$name.out")"
  fi
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: unclear refusal: $(tail -n 3 "$E2E_WORK/$name.out")"
}

# joined: waits for every run started in the background (`train NAME ... &`:
# runs of one process side by side, where each uses a core or so, as the
# emulator's do); fails once all have ended if any failed (train printed
# the failed run's output tail).
joined() {
  local pid bad=0 n=0
  for pid in $(jobs -p); do
    n=$((n + 1))
    wait "$pid" || bad=$((bad + 1))
  done
  [ "$bad" = 0 ] || fail "$bad of the $n runs started side by side failed"
}

# column NAME COL: the values of metrics column COL, one per line.
column() {
  awk -F, -v col="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next } { print $c }' \
    "$E2E_WORK/$1/metrics.csv"
}

# cuda_inexact NAME: run NAME (started by train) ran on a cuda device, the
# GPU or the emulator, outside deterministic mode: there the device times
# cuBLASLt's candidates for each product and keeps the fastest, so two
# runs may differ in the last bits (plugins/device/cuda/gemm.c), and
# comparing them bit for bit proves nothing on a GPU.
cuda_inexact() {
  local f=$E2E_WORK/$1.args a dev="" det=false
  [ -f "$f" ] || return 1
  grep -Eq '^deterministic *= *true' "$CFG" 2>/dev/null && det=true
  while IFS= read -r a; do
    case $a in device.plugin=*) dev=${a#device.plugin=} ;; run.deterministic=*) det=${a#run.deterministic=} ;; esac
  done <"$f"
  [[ $dev == cuda* ]] && [ "$det" != true ]
}

# exact_comparable A B: fails the test where a bitwise comparison of runs A
# and B could pass on the emulator and fail on a GPU (cuda_inexact).
exact_comparable() {
  local r
  for r in "$1" "$2"; do
    if cuda_inexact "$r"; then fail "run $r is compared bit for bit but ran on a cuda device outside deterministic mode (give it run.deterministic=true)"; fi
  done
}

# same_losses A B RTOL: the loss curves agree within RTOL relative (0 = exactly).
same_losses() {
  [ "$3" != 0 ] || exact_comparable "$1" "$2"
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
    exact_comparable "$1" "$2"
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

# rank_logs NAME RANKS: every rank wrote $E2E_WORK/NAME/rank-<r>.log holding
# its own lines, each prefixed [r<r>] (ranks other than 0 say little below
# debug level: run with run.log_level=debug).
rank_logs() {
  local r log
  for ((r = 0; r < $2; r++)); do
    log=$E2E_WORK/$1/rank-$r.log
    [ -s "$log" ] || fail "$1: rank $r wrote no lines to $log"
    ! grep -vq "^\[r$r\] " "$log" || fail "$1: $log holds lines of another rank: $(grep -v "^\[r$r\] " "$log" | sed -n 1p)"
  done
}

# has_plugin KIND NAME: `plait plugins` lists it as available.
has_plugin() { local list; list=$("$PLAIT_BIN" plugins 2>/dev/null) && grep -Eq "^$1 +$2 .*available" <<<"$list"; }

# kill_midstep NAME RANKS VICTIM AFTER_ROWS TIMEOUT [args...]: the failure
# contract, "a rank killed with SIGKILL mid-step makes every
# other rank exit non-zero by itself with a message naming the
# lost rank and the operation; the launcher exits non-zero". Starts a job of
# RANKS ranks into $E2E_WORK/NAME (output NAME.out; ARGS make it train long,
# with no checkpoint or evaluation to come) with comm.timeout=TIMEOUT and the
# launcher's grace period far above it (so the launcher cannot stop a hung
# rank and hide it), SIGKILLs world rank VICTIM once metrics.csv has more than
# AFTER_ROWS lines (steps are progressing, so the kill lands in a step's
# compute or communication), then checks: the launcher exits non-zero naming
# VICTIM; every other rank exited 1 by itself (not stopped by the launcher), logged
# in its rank-<r>.log an error naming world rank VICTIM and the operation
# (op #seq), and ended with an error naming the training step it was in.
# A survivor still running after 2400 polls of 0.1 s (4 minutes or more,
# past the launcher's grace of 20 x TIMEOUT) is a hang. Prints the
# operations the survivors were in; sets KILL_ELAPSED (seconds, for the log).
kill_midstep() {
  local name=$1 ranks=$2 victim=$3 after=$4 timeout=$5
  shift 5
  local out=$E2E_WORK/$name log=$E2E_WORK/$name.out
  case " $* " in *" --resume "*) ;; *) rm -rf "$out" ;; esac
  PLAIT_LAUNCH_GRACE=$((timeout * 20)) "$PLAIT_BIN" train "$CFG" "run.out_dir=$out" "comm.timeout=$timeout" "$@" \
    >"$log" 2>&1 &
  local launcher=$! rows=0
  for _ in $(seq 600); do
    rows=0
    [ -f "$out/metrics.csv" ] && rows=$(wc -l <"$out/metrics.csv")
    [ "$rows" -gt "$after" ] && break
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
  done
  [ "$rows" -gt "$after" ] || { kill $launcher 2>/dev/null; tail -n 20 "$log" >&2; fail "$name: training did not get past $after metrics lines"; }
  local victim_pid="" pid
  for pid in $(pgrep -P $launcher); do
    if grep -zqx "PLAIT_RANK=$victim" /proc/$pid/environ 2>/dev/null; then victim_pid=$pid; fi
  done
  [ -n "$victim_pid" ] || { kill $launcher; fail "$name: rank $victim not found"; }
  local killed_at polls=0
  killed_at=$(date +%s.%N)
  kill -9 "$victim_pid"
  while kill -0 $launcher 2>/dev/null; do
    polls=$((polls + 1))
    if [ $polls -gt 2400 ]; then
      kill $launcher
      wait $launcher || true
      tail -n 20 "$log" >&2
      fail "$name: ranks still running 2400 polls after rank $victim was killed (comm.timeout $timeout s): a hang"
    fi
    sleep 0.1
  done
  local rc=0
  wait $launcher || rc=$?
  KILL_ELAPSED=$(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  tail -n 4 "$log"
  [ $rc -ne 0 ] || fail "$name: the launcher exited 0 after rank $victim was killed"
  grep -q "^plait: rank $victim was killed by SIGKILL" "$log" || fail "$name: the launcher did not name rank $victim"
  local others r survivors=0 op="(allreduce|reduce_scatter|allgather|broadcast|reduce|gather|scatter|alltoall|barrier|send|recv) #[0-9]+"
  others=$(grep "^plait: also ended abnormally:" "$log" || true)
  for ((r = 0; r < ranks; r++)); do
    [ $r -eq "$victim" ] && continue
    survivors=$((survivors + 1))
    grep -Eq "[:,] rank $r \(exit 1\)" <<<"$others" ||
      fail "$name: rank $r did not exit 1 by itself (launcher: ${others:-nothing})"
    [ -s "$out/rank-$r.log" ] || fail "$name: rank $r wrote no $out/rank-$r.log"
    # (no grep -q in a pipeline: quitting early would SIGPIPE the writer, failing it under pipefail)
    grep -F "(world rank $victim)" "$out/rank-$r.log" | grep -E " error: " | grep -E "$op" >/dev/null ||
      fail "$name: rank $r logged no error naming world rank $victim and the operation: $(grep ' error: ' "$out/rank-$r.log" | tail -n 1)"
  done
  local in_step
  in_step=$(grep -Ec "^plait: error: train: step [0-9]+: " "$log" || true)
  [ "$in_step" = $survivors ] ||
    fail "$name: $in_step of $survivors ranks ended with an error naming the training step they were in"
  # the console names the failure once per rank: a rank that lost the
  # victim itself says so in full, one that stopped because of another
  # says so in one short line naming that rank, whose own line is there;
  # no chain of relayed errors, no per-layer log lines repeating it
  ! grep -Eq "is going down|stopped after .* stopped after|^\[r[0-9]+\] .* (comm|tcp) error: " "$log" ||
    fail "$name: the console repeats the failure: $(grep -E "is going down|stopped after|(comm|tcp) error: " "$log" | head -n 2)"
  local line origin
  while IFS= read -r line; do
    if [[ $line =~ stopped\ after\ world\ rank\ ([0-9]+)\ failed ]]; then
      origin=${BASH_REMATCH[1]}
      grep -F "(world rank $origin)" "$log" | grep "^plait: error: train: .*(world rank $victim)" >/dev/null ||
        fail "$name: a rank stopped after rank $origin, whose error does not name the lost rank $victim: $line"
    else
      grep -qF "(world rank $victim)" <<<"$line" || fail "$name: an error that names neither the lost rank nor the rank it stopped after: $line"
    fi
  done < <(grep "^plait: error: train: " "$log")
  # what the survivors were doing when they lost the victim (for the log)
  grep -h " error: " "$out"/rank-*.log | grep -Eo "$op ('[^']*'|from rank [0-9]+|to rank [0-9]+)" | sort -u |
    sed 's/^/killed during: /'
}
