#!/usr/bin/env bash
# Collectives across "hosts" on this machine: network namespaces joined by a
# bridge, each host's link rate-limited with tc tbf (tests/e2e/netns.sh),
# one `plait bench comm --nnodes` launcher per host, as on a cluster.
# Prints each algorithm's table for one operation, interleaved over ROUNDS
# so every algorithm sees the same load. Needs root.
#
#   scripts/bench-multihost.sh [HOSTS] [RANKS_PER_HOST] [RATE] [OP] [SIZE] [ROUNDS] [ALGOS]
#   scripts/bench-multihost.sh 2 2 200mbit allreduce 16M 3 "hier ring rhd tree auto"
set -euo pipefail
HOSTS=${1:-2} PER=${2:-2} RATE=${3:-200mbit} OP=${4:-allreduce} SIZE=${5:-16M} ROUNDS=${6:-3}
ALGOS=${7:-hier ring rhd tree auto}
cd "$(dirname "$0")/.."
PLAIT_BIN=${PLAIT_BIN:-build/bin/plait}
fail() { echo "bench-multihost: $*" >&2; exit 1; }
# netns.sh removes what it made through at_exit (tests/e2e/lib.sh's, for tests)
at_exit() { trap "$1" EXIT; }
# shellcheck source=../tests/e2e/netns.sh
source tests/e2e/netns.sh
netns_up "$HOSTS" "$RATE"
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=29700
echo "# $HOSTS hosts x $PER ranks, each host's link limited to $RATE (tc tbf), $OP of $SIZE; $(uptime)"
for ((round = 1; round <= ROUNDS; round++)); do
  for algo in $ALGOS; do
    PORT=$((PORT + 1))
    pids=()
    for ((i = 0; i < HOSTS; i++)); do
      on_host $i env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$PORT PLAIT_JOB_TOKEN="$TOKEN" \
        "$PLAIT_BIN" bench comm -n "$PER" --nnodes "$HOSTS" --node-rank $i --op "$OP" --min "$SIZE" --max "$SIZE" \
        --warmup 1 --iters 5 --algo "$algo" comm.timeout=120 >"/tmp/bench-multihost.$$.h$i" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || fail "a launcher failed: $(tail -n 3 /tmp/bench-multihost.$$.h*)"; done
    printf "round %d  --algo %-5s" "$round" "$algo"
    awk '/^ +[0-9]+ +[0-9]+ / { printf "  size %s  time %s us  algbw %s  busbw %s GB/s  #wrong %s  ran %s\n", $1, $5, $6, $7, $8, $9 }' \
      "/tmp/bench-multihost.$$.h0"
  done
done
rm -f /tmp/bench-multihost.$$.h*
