#!/usr/bin/env bash
# `plait bench comm` across "hosts" (tests/e2e/netns.sh), one launcher per
# host as a multi-node user starts it: every operation on 2 hosts x 2 ranks
# and 3 hosts x 2 ranks has #wrong 0 at every size, with the automatic
# choice (hierarchical from 64 KiB across hosts, the algo column shows it)
# and with the flat and hierarchical algorithms forced. Timings are not
# asserted (docs/multi-node.md has the measured table).
# Skipped (exit 77, with the reason) where namespaces cannot be created.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
netns_up 3 400mbit
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
PORT=29600

# bench HOSTS NAME [bench args...]: host 0's table in NAME.out.
bench() {
  local hosts=$1 name=$2 i pids=() rc=0
  shift 2
  PORT=$((PORT + 1))
  for ((i = 0; i < hosts; i++)); do
    on_host $i env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$PORT PLAIT_JOB_TOKEN="$TOKEN" \
      "$PLAIT_BIN" bench comm -n 2 --nnodes "$hosts" --node-rank $i --warmup 1 --iters 2 "$@" comm.timeout=60 \
      >"$E2E_WORK/$name.h$i.out" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < hosts; i++)); do wait "${pids[$i]}" || rc=$?; done
  [ $rc -eq 0 ] || { tail -n 20 "$E2E_WORK/$name".h*.out >&2; fail "bench $name ($*) exited $rc"; }
  cp "$E2E_WORK/$name.h0.out" "$E2E_WORK/$name.out"
  # every row: #wrong (column 8) is 0; the summary agrees
  local rows bad
  rows=$(grep -Ec '^ +[0-9]+ +[0-9]+ ' "$E2E_WORK/$name.out" || true)
  [ "$rows" -gt 0 ] || fail "bench $name printed no rows: $(tail -n 5 "$E2E_WORK/$name.out")"
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / && $8 != 0' "$E2E_WORK/$name.out")
  [ -z "$bad" ] || fail "bench $name has wrong elements: $bad"
  grep -q "^# Total #wrong *: 0" "$E2E_WORK/$name.out" || fail "bench $name: total #wrong is not 0"
}

for h in 2 3; do
  for op in allreduce reduce_scatter allgather broadcast alltoall sendrecv; do
    bench $h "$op-${h}x2" --op $op --min 4K --max 1M --factor 16
  done
  for op in allreduce reduce_scatter allgather; do
    bench $h "$op-${h}x2-hier" --op $op --min 1K --max 256K --factor 16 --algo hier
    awk '/^ +[0-9]+ +[0-9]+ / && $9 != "hier" { exit 1 }' "$E2E_WORK/$op-${h}x2-hier.out" ||
      fail "$op forced hier on $h hosts ran: $(awk '/^ +[0-9]+ +[0-9]+ / { print $9 }' "$E2E_WORK/$op-${h}x2-hier.out" | sort -u)"
    bench $h "$op-${h}x2-ring" --op $op --min 64K --max 1M --factor 16 --algo ring
  done
  # auto: flat below 64 KiB, hierarchical from there on (allreduce sizes are the whole vector)
  awk '/^ +[0-9]+ +[0-9]+ / { if (($1 < 65536) == ($9 == "hier")) exit 1 }' "$E2E_WORK/allreduce-${h}x2.out" ||
    fail "auto allreduce on $h hosts x 2: $(awk '/^ +[0-9]+ +[0-9]+ / { print $1, $9 }' "$E2E_WORK/allreduce-${h}x2.out" | tr '\n' ';')"
done
echo "multi-host bench OK: 6 operations on 2x2 and 3x2, auto/hier/ring, #wrong 0 everywhere"
