#!/usr/bin/env bash
# Launch mistakes of a job on several hosts, made with one launcher per
# "host" on this machine (MASTER_ADDR=127.0.0.1): each is detected at the
# rendezvous and named at once, never waited out or blamed on a rank that
# merely could not join ([comm] timeout is an hour: a launcher that waited for
# it would meet `timeout 120`, exit 124, and its ranks would say they timed
# out):
#  - two launchers given different layouts (dp = 2 against dp = 4): every
#    rank stops naming both world sizes and the layout to fix;
#  - two launchers given the same --node-rank: the second of them stops
#    naming the world rank joined twice and the --node-rank;
#  - host 1's launcher names its ranks by their world ranks (2 and 3), not
#    by their index on the host (0 and 1).
source "$(dirname "$0")/lib.sh"
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')

# hosts NAME NNODES "NODE_RANK DP" ...: one launcher per pair, started together;
# each launcher's output in NAME.<i>.out, its exit status in NAME.<i>.rc.
hosts() {
  local name=$1 nnodes=$2 port i=0 spec pids=()
  shift 2
  port=$(free_port)
  for spec in "$@"; do
    set -- $spec
    (rc=0
     MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PLAIT_JOB_TOKEN=$TOKEN timeout 120 "$PLAIT_BIN" train "$CFG" \
       "run.out_dir=$E2E_WORK/$name.$i" --nnodes "$nnodes" --node-rank "$1" "parallel.dp=$2" comm.timeout=3600 \
       run.steps=4 "data.global_batch=$((2 * $2))" >"$E2E_WORK/$name.$i.out" 2>&1 || rc=$?
     echo $rc >"$E2E_WORK/$name.$i.rc") &
    pids+=($!)
    i=$((i + 1))
    sleep 0.2 # the later launchers join while the first ones wait
  done
  wait "${pids[@]}" || true
}

# at_once NAME N WHAT: each of the N launchers of NAME ended non-zero by
# itself (not by `timeout`), and no output says a rank timed out.
at_once() {
  local i rc
  for ((i = 0; i < $2; i++)); do
    rc=$(cat "$E2E_WORK/$1.$i.rc")
    [ "$rc" != 0 ] || fail "host $i's launcher exited 0 with $3"
    [ "$rc" != 124 ] || fail "$3: host $i's launcher still ran after 120 s ([comm] timeout = 3600 s): $(tail -n 3 "$E2E_WORK/$1.$i.out")"
    ! grep -Eq "$COMM_TIMEOUT_WORDS" "$E2E_WORK/$1.$i.out" ||
      fail "$3: host $i waited for a timeout: $(grep -E "$COMM_TIMEOUT_WORDS" "$E2E_WORK/$1.$i.out" | head -n 1)"
  done
}

# --- different layouts on the two hosts
start=$SECONDS
hosts sizes 2 "0 2" "1 4"
took=$((SECONDS - start))
at_once sizes 2 "a layout unlike the other host's"
for i in 0 1; do
  grep -q "world rank [23] (from 127.0.0.1:[0-9]*) joins a job of 4 ranks, world rank 0 (from 127.0.0.1:[0-9]*) counts 2: every host's launcher must be given the same layout" \
    "$E2E_WORK/sizes.$i.out" || fail "host $i did not name both world sizes: $(tail -n 3 "$E2E_WORK/sizes.$i.out")"
done
# host 1 ran world ranks 2 and 3
grep -q "^plait: rank [23] failed: " "$E2E_WORK/sizes.1.out" || fail "host 1's launcher did not name world rank 2 or 3: $(grep '^plait: rank' "$E2E_WORK/sizes.1.out")"
! grep -Eq "^plait: rank [01] |also ended abnormally: rank [01] " "$E2E_WORK/sizes.1.out" ||
  fail "host 1's launcher named its ranks by their index on the host: $(grep '^plait:' "$E2E_WORK/sizes.1.out")"
echo "different layouts: named in $took s"

# --- one --node-rank given to two launchers (3 hosts: 0, 1, 1)
start=$SECONDS
hosts twice 3 "0 6" "1 6" "1 6"
took=$((SECONDS - start))
at_once twice 3 "a --node-rank given twice"
grep -q "two processes joined as world rank [23] (world rank [23] from 127.0.0.1:[0-9]*, and world rank [23] from 127.0.0.1:[0-9]*): was one --node-rank given to two hosts' launchers?" "$E2E_WORK"/twice.*.out ||
  fail "the duplicate --node-rank was not named: $(tail -qn 2 "$E2E_WORK"/twice.*.out)"
for i in 0 1 2; do
  ! grep -q "never joined\|no connection from" "$E2E_WORK/twice.$i.out" || fail "launcher $i blamed a missing rank: $(tail -n 2 "$E2E_WORK/twice.$i.out")"
done
echo "a --node-rank given twice: named in $took s"
echo "ok"
