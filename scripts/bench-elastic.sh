#!/usr/bin/env bash
# Losing a host of an elastic job and taking it back, on this machine: 3
# "hosts" (network namespaces joined by a bridge, tests/e2e/netns.sh) x 2
# ranks, gpt-small as dp 6 at 3 hosts (global batch 12 of micro-batches of
# 1: dp 4 x accumulation 3 on 2 hosts), one `plait train --nnodes 2:3`
# launcher per host, as on a cluster. For each source of the restart:
#   memory  [run] replica_every = K (the disk checkpoint only at the end)
#   disk    [run] ckpt_every = K (no replicas)
# the job trains; when step KILL is done, host 2 is lost as a machine is
# (its link taken down, then its launcher and ranks killed with SIGKILL);
# the script reports the time from the kill to the first step after it,
# where the job resumed and the steps lost; then host 2's launcher starts
# again and the script reports when the job trains on 3 hosts again. The
# final checkpoint is checked complete and metrics.csv holds every step
# once. Needs root.
#
#   scripts/bench-elastic.sh [K] [KILL] [STEPS] [HOST_TIMEOUT] [SOURCES]
#   scripts/bench-elastic.sh 4 7 20 2 "memory disk"
set -euo pipefail
K=${1:-4} KILL=${2:-7} STEPS=${3:-20} HOST_TIMEOUT=${4:-2} SOURCES=${5:-memory disk}
cd "$(dirname "$0")/.."
PLAIT_BIN=$(realpath "${PLAIT_BIN:-build/bin/plait}")
fail() { echo "bench-elastic: $*" >&2; exit 1; }
WORK=$(mktemp -d /tmp/bench-elastic.XXXXXX)
cleanup() { netns_down; rm -rf "$WORK"; }
# netns.sh removes what it made through at_exit (tests/e2e/lib.sh's, for tests)
at_exit() { trap cleanup EXIT; }
# shellcheck source=../tests/e2e/netns.sh
source tests/e2e/netns.sh
netns_up 3
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=29690
now() { date +%s.%N; }
rows() { if [ -f "$1/metrics.csv" ]; then echo $(($(wc -l <"$1/metrics.csv") - 1)); else echo 0; fi; }
# col DIR NAME: the values of metrics column NAME
col() { awk -F, -v c="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == c) k = i; next } { print $k }' "$1/metrics.csv"; }
# until_true TIMEOUT CMD...: poll CMD every 20 ms
until_true() {
  local t=$1 _
  shift
  for _ in $(seq $((t * 50))); do "$@" && return 0; sleep 0.02; done
  return 1
}
# a row with `restarts` at least N (the first step of a later attempt)
restarted() { [ -f "$1/metrics.csv" ] && col "$1" restarts | awk -v n="$2" '$1 >= n { f = 1 } END { exit !f }'; }
# a row of the latest attempt trained on H hosts
on_hosts() { [ -f "$1/metrics.csv" ] && [ "$(col "$1" hosts | tail -n 1)" = "$2" ] && [ "$(col "$1" restarts | tail -n 1)" -ge "$3" ]; }
past() { [ "$(rows "$1")" -ge "$2" ]; }

echo "# 3 hosts x 2 ranks, gpt-small (configs/gpt-small.ini), --nnodes 2:3, K = $K, host 2 lost after step $KILL,"
echo "# [run] host_timeout = $HOST_TIMEOUT s; $(uptime | sed 's/^ *//'); build $(git rev-parse --short HEAD)"
for source in $SOURCES; do
  PORT=$((PORT + 1))
  out=$WORK/$source
  if [ "$source" = memory ]; then KEEP="run.replica_every=$K run.ckpt_every=0"; else KEEP="run.ckpt_every=$K run.replica_every=0"; fi
  start() {
    on_host "$1" env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$PORT PLAIT_JOB_TOKEN="$TOKEN" \
      "$PLAIT_BIN" train configs/gpt-small.ini "run.out_dir=$out" parallel.dp=6 data.global_batch=12 \
      data.micro_batch=1 "run.steps=$STEPS" run.eval_every=0 run.progress=off "run.host_timeout=$HOST_TIMEOUT" \
      run.join_wait=30 comm.timeout=120 $KEEP --nnodes 2:3 --max-restarts 4 >>"$WORK/$source.h$1.out" 2>&1 &
    pid[$1]=$!
  }
  for i in 0 1 2; do start $i; done
  until_true 900 past "$out" "$KILL" || fail "$source: no step $KILL: $(tail -n 5 "$WORK/$source.h0.out")"
  ip -n "${NETNS_P}h2" link set eth0 down
  for p in $(ip netns pids "${NETNS_P}h2"); do kill -9 "$p" 2>/dev/null || true; done
  killed=$(now)
  done_before=$(rows "$out")
  until_true 600 grep -q "round 2:" "$WORK/$source.h0.out" || fail "$source: no new round: $(tail -n 5 "$WORK/$source.h0.out")"
  regrouped=$(now)
  until_true 600 restarted "$out" 1 || fail "$source: no step after the kill: $(tail -n 5 "$WORK/$source.h0.out")"
  back=$(now)
  first_ms=$(col "$out" step_ms | tail -n 1)
  resume=$(grep -o "resuming at step [0-9]* from .*" "$out/rank-0.log" | tail -n 1)
  step=${resume#resuming at step }
  step=${step%% *}
  printf "%-6s  host 2 lost after step %d: new round %.1f s after the kill, training again at %.1f s (from %s), " \
    "$source" "$done_before" "$(echo "$regrouped - $killed" | bc)" "$(echo "$back - $killed - $first_ms / 1000" | bc)" \
    "${resume#resuming at step $step from }"
  printf "its first step done at %.1f s; %d step%s lost\n" "$(echo "$back - $killed" | bc)" \
    $((done_before - step)) "$([ $((done_before - step)) = 1 ] || echo s)"
  # host 2 comes back: the job grows at its next boundary
  until_true 600 past "$out" $((step + 2)) || fail "$source: the 2 hosts did not train"
  ip -n "${NETNS_P}h2" link set eth0 up
  t=$(now)
  start 2
  until_true 900 on_hosts "$out" 3 2 || fail "$source: the job did not grow back: $(tail -n 5 "$WORK/$source.h0.out")"
  grown=$(now)
  at=$(grep -o "resuming at step [0-9]* from .*" "$out/rank-0.log" | tail -n 1)
  printf "%-6s  host 2 back: first step on 3 hosts %.1f s after its launcher started (the job regrouped after step %s, %s)\n" \
    "$source" "$(echo "$grown - $t" | bc)" "$(echo "$at" | grep -o "step [0-9]*" | head -n 1 | cut -d' ' -f2)" \
    "${at#resuming at step * from }"
  wait "${pid[0]}" || fail "$source: host 0's launcher failed: $(tail -n 5 "$WORK/$source.h0.out")"
  [ "$(col "$out" step | tr '\n' ' ')" = "$(seq 1 "$STEPS" | tr '\n' ' ')" ] ||
    fail "$source: metrics.csv steps are not 1..$STEPS once each: $(col "$out" step | tr '\n' ' ')"
  [ -f "$out/ckpt-$(printf %08d "$STEPS")/COMPLETE" ] || fail "$source: no complete final checkpoint"
  printf "%-6s  finished: steps 1..%d once each in metrics.csv, hosts %s, final checkpoint complete; median step %s ms on 3 hosts, %s ms on 2\n" \
    "$source" "$STEPS" "$(col "$out" hosts | uniq | tr '\n' ' ' | sed 's/ $//')" \
    "$(paste -d, <(col "$out" hosts) <(col "$out" step_ms) | awk -F, '$1 == 3 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f", v[int((NR + 1) / 2)] }')" \
    "$(paste -d, <(col "$out" hosts) <(col "$out" step_ms) | awk -F, '$1 == 2 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { printf "%.0f", v[int((NR + 1) / 2)] }')"
done
