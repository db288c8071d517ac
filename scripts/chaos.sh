#!/usr/bin/env bash
# Chaos: an elastic job on network-namespace "hosts" (tests/e2e/netns.sh)
# trains for as long as asked while faults are injected at random times,
# then every step's result is checked. A benchmark of recovery, not a CI
# test (tests/e2e/test_chaos_short.sh runs a bounded form of it). Needs
# root; exits 77 saying why where namespaces cannot be made.
#
#   scripts/chaos.sh [--minutes M] [--seed S] [--steps N] [--gap MIN:MAX] [--report FILE]
#
# The job: tests/e2e/tiny.ini (gpt, 2 layers of 64), deterministic mode,
# global batch 8 of micro-batches of 2, `--nnodes 1:2` with 2 ranks a host
# (3 hosts: host 0 serves the job's store, hosts 1 and 2 come and go; the
# job takes at most 2, so a third launcher waits for room), replicas in
# memory every 2 steps, a disk checkpoint every 10 steps on a tmpfs of its
# own. Jobs of N steps (default 1000) follow one another until M minutes
# (default 30) have passed, cycling through three layouts whose
# deterministic results are bit-identical to one process: dp (dp 4 / dp 2),
# pp (dp 2 x pp 2 / dp 1 x pp 2) and zero (ZeRO-1, dp 4 / dp 2).
#
# The faults, one every MIN..MAX seconds (default 4:20), each of a kind
# drawn at random (seeded: the seed is printed, and --seed repeats the
# draws, not the machine's timing):
#   kill_rank      kill -9 of one rank (any host)
#   kill_launcher  kill -9 of host 1's or 2's launcher (its ranks follow)
#   kill_host      host 1 or 2 lost: its link down, everything on it killed
#   sigstop        every process of host 1 or 2 stopped for 2 x host_timeout
#                  + 2 s (longer than the heartbeat), then continued
#   link_cut       host 1's or 2's link down for 2 x host_timeout + 2 s
#   link_slow      host 1's or 2's link limited to 2 Mbit/s (tc tbf) for 10 s
#   disk_full      the run's file system filled for 8 s (a checkpoint falls
#                  in it or not)
#   rejoin         a launcher started again on a host without one, right config
#   rejoin_wrong   a launcher started on a host without one with
#                  model.n_layer=1 or optim.lr=0.5: it must be refused alone
# The store host (host 0) is never lost: an elastic job cannot go on
# without the host that serves its store (docs/multi-node.md).
#
# At the end of each job: host 0's launcher exited 0; metrics.csv holds
# steps 1..N once each; every step's loss is bit-identical to one
# uninterrupted process (run once at the start); every checkpoint on disk
# opens and verifies (CRC32C of every file) and its model is bit-identical
# to the one process's of the same step; every wrong-config launcher was
# refused. Steps trained twice (rows dropped by a resume: "metrics: N rows
# of steps after S dropped") are counted as lost work. The time to recover
# is from a fault to the next step committed after it.
#
# Thresholds it relies on (the job's config): [run] host_timeout = 2 s (a
# host whose heartbeat stops that long is lost), [comm] timeout = 20 s (a
# rank waiting on a peer that long gives up and names it), [run]
# join_wait = 5 s, --max-restarts 1000 (restarts are what is measured).
set -euo pipefail
MINUTES=30 SEED=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ') STEPS=1000 GAP=4:20 REPORT=""
while [ $# -gt 0 ]; do
  case $1 in
    --minutes) MINUTES=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --gap) GAP=$2; shift 2 ;;
    --report) REPORT=$2; shift 2 ;;
    *) echo "chaos: unknown option '$1' (--minutes M, --seed S, --steps N, --gap MIN:MAX, --report FILE)" >&2; exit 2 ;;
  esac
done
GAP_MIN=${GAP%:*} GAP_MAX=${GAP#*:}
cd "$(dirname "$0")/.."
ROOT=$PWD
PLAIT_BIN=$(realpath "${PLAIT_BIN:-build/bin/plait}")
CKPT_DIFF=$(realpath "${CKPT_DIFF:-build/tests/ckpt_diff}")
[ -x "$PLAIT_BIN" ] && [ -x "$CKPT_DIFF" ] || { echo "chaos: build plait first (no $PLAIT_BIN or $CKPT_DIFF)" >&2; exit 2; }
WORK=${CHAOS_WORK:-$(mktemp -d /tmp/plait-chaos.XXXXXX)}
mkdir -p "$WORK"
DISK=$WORK/disk
cleanup() {
  netns_down
  umount "$DISK" 2>/dev/null || true
  # a failed job's files stay (the run directory copied off the tmpfs)
  [ -n "${CHAOS_KEEP:-}" ] || [ "${TOTAL_BAD:-0}" != 0 ] || rm -rf "$WORK"
}
# netns.sh removes what it made through at_exit (tests/e2e/lib.sh's, for tests)
at_exit() {
  trap cleanup EXIT
  trap "exit 143" TERM INT
}
# shellcheck source=../tests/e2e/netns.sh
source tests/e2e/netns.sh
netns_up 3
mkdir -p "$DISK"
mount -t tmpfs -o size=64m tmpfs "$DISK" || netns_skip "cannot mount a tmpfs for the run's disk"
RANDOM=$SEED
echo "chaos: seed $SEED ($MINUTES min, jobs of $STEPS steps, a fault every $GAP_MIN..$GAP_MAX s); $(uptime | sed 's/^ *//')"
echo "chaos: build $(git rev-parse --short HEAD 2>/dev/null || echo '?'), work in $WORK"

TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=$((29500 + $$ % 150))
COMMON="run.deterministic=true data.global_batch=8 data.micro_batch=2 run.eval_every=0 run.progress=off"
ELASTIC="--nnodes 1:2 --max-restarts 1000 run.host_timeout=2 run.join_wait=5 comm.timeout=20 run.replica_every=2 run.ckpt_every=10 run.keep_checkpoints=20"
LAYOUTS=(dp pp zero)
layout_args() {
  case $1 in
    dp) echo "parallel.plugin=hybrid parallel.dp=4" ;;
    pp) echo "parallel.plugin=hybrid parallel.dp=2 parallel.pp=2" ;;
    zero) echo "parallel.plugin=hybrid parallel.dp=4 optim.plugin=zero1" ;;
  esac
}
now() { date +%s.%N; }
rows() { if [ -f "$1/metrics.csv" ]; then echo $(($(wc -l <"$1/metrics.csv") - 1)); else echo 0; fi; }
col() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }' "$1/metrics.csv"; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }

# the one uninterrupted process, every checkpoint kept
REF=$WORK/reference
echo "chaos: the reference, one process, $STEPS steps"
# shellcheck disable=SC2086
"$PLAIT_BIN" train tests/e2e/tiny.ini "run.out_dir=$REF" $COMMON "run.steps=$STEPS" run.ckpt_every=10 run.keep_checkpoints=1000 \
  >"$WORK/reference.out" 2>&1 || { tail -n 5 "$WORK/reference.out" >&2; exit 1; }

declare -A LPID FAULTS STARTS
TOTAL_REPLAYED=0 TOTAL_BAD=0 TOTAL_RECOVERIES=0 JOBS_OK=0
declare -a RECOVER
WRONG=() # "pid:host:key=value:output"
JOB=0 OUT="" RUN="" JOB_LAYOUT=""
start_launcher() { # host [extra args]
  local i=$1 n
  shift
  n=${STARTS[$i]:-0}
  STARTS[$i]=$((n + 1))
  local out=$WORK/job$JOB.h$i.$n.out
  # shellcheck disable=SC2046,SC2086
  on_host "$i" env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$PORT PLAIT_JOB_TOKEN="$TOKEN" \
    "$PLAIT_BIN" train tests/e2e/tiny.ini "run.out_dir=$RUN" $COMMON $(layout_args "$JOB_LAYOUT") $ELASTIC \
    "run.steps=$STEPS" "$@" >"$out" 2>&1 &
  LAST_PID=$! LAST_OUT=$out
}
free_hosts() { local i; for i in 1 2; do alive "${LPID[$i]:-}" || echo $i; done; }
busy_hosts() { local i; for i in 1 2; do ! alive "${LPID[$i]:-}" || echo $i; done; }
# pick WORDS...: PICK gets one at random (no subshell: the seeded sequence goes on)
pick() {
  local a=("$@")
  PICK=""
  [ ${#a[@]} -gt 0 ] || return 1
  PICK=${a[RANDOM % ${#a[@]}]}
}
rank_pids() { # host: pids of its ranks
  local p
  for p in $(ip netns pids "${NETNS_P}h$1" 2>/dev/null); do
    grep -zq "^PLAIT_RANK=" /proc/"$p"/environ 2>/dev/null && echo "$p"
  done
}

inject() { # kind: FAULT says what it did ("" when it had no target)
  local kind=$1 h p key
  FAULT=""
  case $kind in
    kill_rank)
      pick 0 $(busy_hosts) || return 0
      h=$PICK
      pick $(rank_pids "$h") || return 0
      p=$PICK
      kill -9 "$p" 2>/dev/null && FAULT="kill -9 of rank pid $p on host $h" ;;
    kill_launcher)
      pick $(busy_hosts) || return 0
      h=$PICK
      kill -9 "${LPID[$h]}" 2>/dev/null && FAULT="kill -9 of host $h's launcher" ;;
    kill_host)
      pick $(busy_hosts) || return 0
      h=$PICK
      ip -n "${NETNS_P}h$h" link set eth0 down
      for p in $(ip netns pids "${NETNS_P}h$h"); do kill -9 "$p" 2>/dev/null || true; done
      ip -n "${NETNS_P}h$h" link set eth0 up
      FAULT="host $h lost: link down, everything on it killed" ;;
    sigstop)
      pick $(busy_hosts) || return 0
      h=$PICK
      for p in $(ip netns pids "${NETNS_P}h$h"); do kill -STOP "$p" 2>/dev/null || true; done
      sleep 6
      for p in $(ip netns pids "${NETNS_P}h$h"); do kill -CONT "$p" 2>/dev/null || true; done
      FAULT="host $h stopped (SIGSTOP) for 6 s, then continued" ;;
    link_cut)
      pick $(busy_hosts) || return 0
      h=$PICK
      ip -n "${NETNS_P}h$h" link set eth0 down
      sleep 6
      ip -n "${NETNS_P}h$h" link set eth0 up
      FAULT="host $h's link cut for 6 s" ;;
    link_slow)
      pick $(busy_hosts) || return 0
      h=$PICK
      ip netns exec "${NETNS_P}h$h" tc qdisc add dev eth0 root tbf rate 2mbit burst 32kb latency 400ms 2>/dev/null || return 0
      sleep 10
      ip netns exec "${NETNS_P}h$h" tc qdisc del dev eth0 root 2>/dev/null || true
      FAULT="host $h's link limited to 2 Mbit/s for 10 s" ;;
    disk_full)
      dd if=/dev/zero of="$DISK/filler" bs=1M 2>/dev/null || true
      sleep 8
      rm -f "$DISK/filler"
      FAULT="the run's file system full for 8 s" ;;
    rejoin)
      pick $(free_hosts) || return 0
      h=$PICK
      start_launcher "$h"
      LPID[$h]=$LAST_PID
      FAULT="host $h's launcher started again" ;;
    rejoin_wrong)
      pick $(free_hosts) || return 0
      h=$PICK
      pick model.n_layer=1 optim.lr=0.5
      key=$PICK
      start_launcher "$h" "$key"
      WRONG+=("$LAST_PID:$h:$key:$LAST_OUT")
      FAULT="host $h's launcher started with $key" ;;
  esac
}
KINDS=(kill_rank kill_launcher kill_host sigstop link_cut link_slow disk_full rejoin rejoin_wrong)

# run_job: one job of STEPS steps with faults until it ends; verifies it.
run_job() {
  JOB=$((JOB + 1))
  JOB_LAYOUT=${LAYOUTS[$(((JOB - 1) % 3))]}
  RUN=$DISK/job$JOB
  PORT=$((PORT + 1))
  WRONG=()
  LPID=()
  STARTS=()
  local i t0 last fault
  for i in 0 1 2; do
    start_launcher $i
    LPID[$i]=$LAST_PID
  done
  echo "chaos: job $JOB ($JOB_LAYOUT), $STEPS steps"
  for _ in $(seq 600); do [ "$(rows "$RUN")" -gt 1 ] && break; alive "${LPID[0]}" || break; sleep 0.1; done
  while alive "${LPID[0]}" && [ "$SECONDS" -lt "$DEADLINE" ]; do
    sleep $((GAP_MIN + RANDOM % (GAP_MAX - GAP_MIN + 1)))
    alive "${LPID[0]}" || break
    # a host whose launcher ended (lost, dropped) is free for a rejoin
    kind=${KINDS[RANDOM % ${#KINDS[@]}]}
    last=$(tail -n 1 "$RUN/metrics.csv" 2>/dev/null || true)
    t0=$(now)
    inject "$kind" || true
    fault=$FAULT
    [ -n "$fault" ] || continue
    FAULTS[$kind]=$((${FAULTS[$kind]:-0} + 1))
    printf "chaos: %6.1f s  %-13s %s\n" "$(echo "$(now) - $START" | bc)" "$kind" "$fault"
    # the time to the next step committed after the fault (the job not ended)
    for _ in $(seq 1800); do
      alive "${LPID[0]}" || break
      cur=$(tail -n 1 "$RUN/metrics.csv" 2>/dev/null || true)
      if [ -n "$cur" ] && [ "$cur" != "$last" ]; then RECOVER+=("$(echo "$(now) - $t0" | bc)"); break; fi
      sleep 0.1
    done
  done
  local rc=0
  wait "${LPID[0]}" || rc=$?
  for i in 1 2; do alive "${LPID[$i]:-}" && { timeout 60 tail --pid="${LPID[$i]}" -f /dev/null || kill -9 "${LPID[$i]}"; }; done
  wait || true
  verify_job "$rc"
}

verify_job() {
  local rc=$1 bad=0 n steps replayed restarts c step w
  echo "chaos: job $JOB ($JOB_LAYOUT) ended, host 0's launcher exit $rc"
  [ "$rc" -eq 0 ] || { echo "chaos: LOST: job $JOB failed: $(grep 'error' "$WORK/job$JOB".h0.0.out | tail -n 2)"; bad=1; }
  steps=$(col "$RUN" step 2>/dev/null | tr '\n' ' ' || true)
  [ "$steps" = "$(seq 1 "$STEPS" | tr '\n' ' ')" ] || { echo "chaos: LOST: job $JOB's metrics.csv steps are not 1..$STEPS once each: $steps"; bad=1; }
  # by step: a missing or doubled row is counted above, not here
  n=$(awk -F, 'FNR == 1 { for (i = 1; i <= NF; i++) if ($i == "loss") c = i; next }
    NR == FNR { ref[$1] = $c; next } $c != ref[$1] { n++ } END { print n + 0 }' \
    "$REF/metrics.csv" "$RUN/metrics.csv" 2>/dev/null || true)
  [ "$n" = 0 ] || { echo "chaos: LOST: job $JOB: $n steps' losses differ from the one process's"; bad=1; }
  for c in "$RUN"/ckpt-*; do
    [ -d "$c" ] || continue
    step=${c##*/}
    if ! "$CKPT_DIFF" "$c" "$c" --bits >/dev/null 2>&1; then echo "chaos: LOST: $c does not verify"; bad=1; continue; fi
    if [ -d "$REF/$step" ] && ! "$CKPT_DIFF" "$c" "$REF/$step" --files model --rtol 0 >/dev/null 2>&1; then
      echo "chaos: LOST: $c's model differs from the one process's"; bad=1
    fi
  done
  for w in "${WRONG[@]+"${WRONG[@]}"}"; do
    IFS=: read -r pid host key out <<<"$w"
    # refused for its configuration, or come after the job's end (the
    # fault fell on its last seconds): either way it trained in no step
    if alive "$pid" || ! grep -qE "configuration differs from the job's.*${key%=*}|the job is over \(training is complete\); this host did not train in it" "$out"; then
      echo "chaos: LOST: host $host's launcher with $key was not refused: $(tail -n 2 "$out")"; bad=1
    fi
  done
  replayed=$(grep -ho "metrics: [0-9]* rows\? of steps after" "$RUN/rank-0.log" 2>/dev/null | awk '{ s += $2 } END { print s + 0 }' || true)
  restarts=$(grep -c "resuming at step" "$RUN/rank-0.log" 2>/dev/null || true)
  TOTAL_REPLAYED=$((TOTAL_REPLAYED + replayed)) TOTAL_RECOVERIES=$((TOTAL_RECOVERIES + restarts))
  if [ $bad = 0 ]; then JOBS_OK=$((JOBS_OK + 1)); else TOTAL_BAD=$((TOTAL_BAD + 1)); fi
  echo "chaos: job $JOB: $([ $bad = 0 ] && echo "nothing lost" || echo "FAILED"): steps 1..$STEPS once each, losses and checkpoints checked, $restarts restarts, $replayed steps trained again"
  if [ $bad = 0 ]; then rm -rf "$RUN" "$WORK/job$JOB".h*.out; else cp -a "$RUN" "$WORK/failed-job$JOB" && rm -rf "$RUN"; fi
}

START=$(now)
DEADLINE=$((SECONDS + MINUTES * 60))
while [ "$SECONDS" -lt "$DEADLINE" ]; do run_job; done

total=0
summary=""
for k in "${KINDS[@]}"; do
  total=$((total + ${FAULTS[$k]:-0}))
  summary="$summary $k ${FAULTS[$k]:-0},"
done
# (no recovery at all: a short run whose faults hit nothing that restarts)
med=$(printf "%s\n" "${RECOVER[@]:-}" | { grep . || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", v[int((NR + 1) / 2)]; else print "-" }')
worst=$(printf "%s\n" "${RECOVER[@]:-}" | { grep . || true; } | sort -g | tail -n 1)
result="chaos: seed $SEED, $(printf '%.0f' "$(echo "($(now) - $START) / 60" | bc -l)") min, $JOB jobs ($JOBS_OK nothing lost, $TOTAL_BAD failed), $total faults:${summary%,}; $TOTAL_RECOVERIES restarts; time from a fault to the next step: median ${med} s, worst $(printf "%.1f" "${worst:-0}") s; $TOTAL_REPLAYED steps trained twice"
echo "$result"
[ -z "$REPORT" ] || echo "$result" >>"$REPORT"
[ "$TOTAL_BAD" = 0 ]
