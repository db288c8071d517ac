# shellcheck shell=bash disable=SC2034,SC2154
# (the settings are the callers' to read; root is the caller's checkout)
# The machinery the GPU calls share (scripts/gpu-session.sh,
# scripts/gpu-issues.sh): packing, the settings, parts with time budgets,
# commands under timeout with a log each, the summary, and the readers of
# plait's and the PyTorch peers' result lines. Sourced, never run; the caller
# has set -uo pipefail. docs/gpu.md ("Verifying on a GPU") says how the calls
# are run.

# gpu_pack NAME [BUILD]: here, after building: the commit into
# BUILD/gpu-commit.txt, then scripts/gpu-bundle.sh BUILD (writes .gpu/)
gpu_pack() {
  local name=$1 build=${2:-build}
  [ -d "$build" ] || { echo "$name: no build directory '$build': build first" >&2; return 1; }
  # the commit goes inside the build directory, which travels in the
  # bundle's tree (there is no git there); the PyTorch peers are in
  # scripts/peers, which travels with the checkout
  { git rev-parse HEAD; git status --short | wc -l | sed 's/$/ files differ from that commit/'; } >"$build/gpu-commit.txt" 2>/dev/null
  bash "$root/scripts/gpu-bundle.sh" "$build" || return 1
  echo "packed: .gpu/ ($(du -sh .gpu | cut -f1)); run there: bash .gpu/on-device.sh bash scripts/$name.sh (carry .gpu)"
}

# gpu_init NAME DEFAULT_BUDGET [--dry-run | --pack [BUILD]]: the settings of
# one call (--pack: gpu_pack, then exit). NAME
# (gpu-session, gpu-issues) names the environment it reads,
# PLAIT_<NAME>_BUDGET (seconds the parts share), PLAIT_<NAME>_SKIP (part
# numbers to leave out) and PLAIT_<NAME>_DEVICE (the device plugin):
# PLAIT_GPU_SESSION_BUDGET, PLAIT_GPU_SESSION_SKIP, PLAIT_GPU_SESSION_DEVICE,
# PLAIT_GPU_ISSUES_BUDGET, PLAIT_GPU_ISSUES_SKIP, PLAIT_GPU_ISSUES_DEVICE; and
# the folder of a run here, runs/NAME[-dry]. Sets DRY, DEV, BUILD, PLAIT,
# OUT, TOTAL, SKIP, PY, PEERS, W, SUMMARY, START and NCPU; exits when
# there is no build.
gpu_init() {
  GPU_NAME=$1
  if [ "${3:-}" = --pack ]; then
    gpu_pack "$1" "${4:-build}"
    exit
  fi
  local budget=$2 prefix
  prefix=PLAIT_$(tr 'a-z-' 'A-Z_' <<<"$1")
  SKIP_VAR=${prefix}_SKIP
  local v_budget=${prefix}_BUDGET v_dev=${prefix}_DEVICE
  DRY=0
  [ "${3:-}" = --dry-run ] && DRY=1
  DEV=${!v_dev:-$([ $DRY = 1 ] && echo sim || echo cuda)}
  BUILD=${PLAIT_BUILD:-$root/build}
  PLAIT=$BUILD/bin/plait
  OUT=${OUT:-$root/runs/$GPU_NAME$([ $DRY = 1 ] && echo -dry)}
  TOTAL=${!v_budget:-$budget}
  SKIP=${!SKIP_VAR:-}
  # the GPU machine's python3 has PyTorch 2.11 with CUDA; here Debian's has 1.13 (CPU)
  PY=${PLAIT_PYTHON:-$([ $DRY = 1 ] && [ -x /usr/bin/python3 ] && echo /usr/bin/python3 || echo python3)}
  # the PyTorch peers: the same model and measurement as plait's bench train
  PEERS=${PLAIT_PEERS:-$root/scripts/peers}
  W=$OUT/work
  mkdir -p "$W"
  SUMMARY=$OUT/summary.md
  START=$(date +%s)
  [ -x "$PLAIT" ] || { echo "$GPU_NAME: no $PLAIT: build first" >&2; exit 1; }
  if [ $DRY = 1 ]; then
    # the test devices stand in for the GPU: sim (tests/device/sim_device.c,
    # fp32 only) and the CUDA emulator's cuda_emu (tests/cuda_emu)
    export PLAIT_PLUGIN_PATH=$BUILD/tests/device-plugins${PLAIT_PLUGIN_PATH:+:$PLAIT_PLUGIN_PATH}
  fi
  NCPU=$(nproc)
  [ $DRY = 1 ] && NCPU=2
  : >"$SUMMARY"
}

# gpu_started TITLE: the summary's first lines
gpu_started() {
  say "# $1"
  say ""
  say "started $(date -u '+%F %T') UTC on $(hostname), ${TOTAL}s budget; logs: $W (and all.tar.gz)"
}

left() { echo $((START + TOTAL - $(date +%s))); }
say() { echo "$*" | tee -a "$SUMMARY"; }

# part TITLE BUDGET: starts a part that may take BUDGET seconds (less if less
# is left); returns 1 (skip it) when under 20 s would be left for it.
part() {
  local l
  l=$(left)
  PART_END=$(($(date +%s) + ($2 < l ? $2 : l)))
  say ""
  say "## $1"
  # PLAIT_<NAME>_SKIP="7 8": parts a shorter call leaves out, by number
  if [[ " $SKIP " = *" ${1%%.*} "* ]]; then
    say "not run: left out by $SKIP_VAR"
    return 1
  fi
  if [ "$l" -lt 20 ]; then
    say "not run: only ${l}s of the call's ${TOTAL}s were left"
    return 1
  fi
  echo "(budget $2 s, $l s left in the call)" >>"$SUMMARY"
  return 0
}

# run LOG SECONDS CMD...: CMD with its output in $W/LOG, stopped after
# min(SECONDS, what is left of the part); prints the exit status (124: timed out).
run() {
  local log=$W/$1 limit=$2 rc=0
  shift 2
  local l=$((PART_END - $(date +%s)))
  [ "$limit" -gt "$l" ] && limit=$l
  if [ "$limit" -lt 5 ]; then
    echo "not started: the part's time is spent" >"$log"
    echo 124
    return
  fi
  { echo "\$ $*"; echo "(timeout ${limit}s, $(date -u +%T))"; } >"$log"
  timeout -k 5 "$limit" "$@" >>"$log" 2>&1 || rc=$?
  echo "(exit $rc, $(date -u +%T))" >>"$log"
  echo $rc
}

# ctest_counts LOG: "P passed, S skipped, F failed of N" (ctest's own
# percentage counts a skipped test as passed; with none failed, ctest
# writes "100% tests passed out of N", without the failed count)
ctest_counts() {
  awk '/% tests passed, [0-9]+ tests failed out of [0-9]+$/ { f = $4; n = $NF }
       /% tests passed out of [0-9]+$/ { f = 0; n = $NF }
       / Passed / { p++ } /\*\*\*Skipped/ { s++ }
       END { if (n == "") print "no ctest summary (stopped?)"; else printf "%d passed, %d skipped, %d failed of %d\n", p, s, f, n }' "$W/$1"
}

status_word() { case $1 in 0) echo ok ;; 77) echo skipped ;; 124 | 137) echo "TIMED OUT" ;; *) echo "FAILED (exit $1)" ;; esac; }
# a peer's status: 77 is its "no PyTorch here" (scripts/peers)
peer_status() { if [ "$1" = 77 ]; then echo "skipped: $(grep -m1 '^SKIP' "$W/$2" | cut -c7-)"; else status_word "$1"; fi; }

# gpu_peer_args ARGS...: PEER_RUN, a GPU peer's arguments (scripts/peers)
# as this call runs them: unchanged on the GPU; in the dry run on the CPU
# (--device cpu, its value replaced or the option added) and without
# --compile, which takes minutes on two loaded cores, so that the peer's
# code and its RESULT line are exercised within the parts' budgets
# (docs/gpu.md says how the compiled form is checked on the CPU); PEER_NOTE,
# what the peer's row in the summary adds to say so
gpu_peer_args() {
  PEER_RUN=() PEER_NOTE=
  [ "$DRY" = 1 ] && PEER_NOTE=" (dry run: on the CPU, eager)"
  local x prev=
  for x in "$@"; do
    if [ "$DRY" = 1 ]; then
      [ "$x" = --compile ] && continue
      [ "$prev" = --device ] && x=cpu
    fi
    PEER_RUN+=("$x")
    prev=$x
  done
  if [ "$DRY" = 1 ] && [[ " ${PEER_RUN[*]} " != *" --device "* ]]; then PEER_RUN+=(--device cpu); fi
  return 0
}

# gpu-memory sampler: the largest memory.used nvidia-smi reports while a
# command runs (the process's whole footprint, CUDA context included)
smi_peak_start() {
  SMI_LOG=$W/smi-$1.csv
  SMI_PID=
  command -v nvidia-smi >/dev/null || return 0
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 >"$SMI_LOG" 2>/dev/null &
  SMI_PID=$!
}
smi_peak_stop() {
  [ -n "${SMI_PID:-}" ] || { echo "n/a"; return; }
  kill "$SMI_PID" 2>/dev/null
  wait "$SMI_PID" 2>/dev/null
  sort -n "$SMI_LOG" | tail -n 1 | awk '{ printf "%.1f GB", $1 * 1048576 / 1e9 }'
}

# bench_row LOG: "ms/step tokens/s" from a `plait bench train` table
bench_row() { awk '/^# +ms\/step/ { getline; print $1, $2; exit }' "$W/$1"; }
# comm_row LOG: the largest size's row of a `plait bench comm` table
comm_row() { awk '$1 ~ /^[0-9]+$/ && NF >= 8 { last = $0 } END { print last }' "$W/$1"; }
# the allocator's peak from bench train's '# device' line, in GB (1e9 bytes,
# as PyTorch's max_memory_allocated is printed beside): no CUDA context
alloc_peak() { awk 'match($0, /: peak device memory [0-9.]+ MiB/) { split(substr($0, RSTART, RLENGTH), f, " "); printf "%.2f GB allocated", f[5] * 1048576 / 1e9; exit }' "$W/$1"; }
peer_field() { sed -n "s/.*RESULT .*$2=\([^ ]*\).*/\1/p" "$W/$1" | tail -n 1; }

# gpu_machine_line: the commit that runs (on the GPU machine what --pack
# recorded beside the build, since a checkout there may carry a .git of
# another commit; here, git), the GPU and the CPU, into the summary
gpu_machine_line() {
  local commit
  commit=$({ [ "$DRY" = 0 ] && head -n 1 "$BUILD/gpu-commit.txt" 2>/dev/null; } || git rev-parse HEAD 2>/dev/null || echo "commit unknown")
  say "commit: $commit"
  say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo none)"
  say "CPU: $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p'), $(nproc) cores"
}

# gpu_finish LOG...: the closing line, every part's log in all.tar.gz and
# the named logs beside it: what comes back from the device is at most 8
# files, 2 folders down
gpu_finish() {
  say ""
  say "finished $(date -u '+%T') UTC after $(($(date +%s) - START)) s"
  tar -C "$OUT" -czf "$OUT/all.tar.gz" work 2>/dev/null
  local f
  for f in "$@"; do [ -f "$W/$f" ] && cp "$W/$f" "$OUT/"; done
  rm -rf "${W:?}"
  echo "summary: $SUMMARY"
}
