#!/usr/bin/env bash
# Elastic jobs (`plait train --nnodes MIN:MAX`) given bad input or hit by
# faults: each ends in a clear message or a correct recovery, never a hang.
# On this machine's loopback (several launchers, MASTER_ADDR=127.0.0.1):
#   - MIN > MAX, on the command line and as [run] nnodes;
#   - sizes that give no layout (deterministic mode, dp 3 and dp 2);
#   - MIN larger than the hosts that ever join: the round gives up after
#     [run] join_timeout naming who came;
#   - a checkpoint that cannot fit the smaller world's memory: zero3 at dp 4
#     on 2 launchers (a sim device of 38 MiB per rank), one launcher lost:
#     refused before any rank restarts, naming the memory and what fits (2
#     hosts);
#   - a third launcher for a 1:2 job: it waits for room, the ranks never
#     regroup for it, and it leaves when the job is over;
#   - hosts whose configurations differ (n_layer): the job ends at once on
#     every host naming the key, with restarts left (none could mend it).
# On 3 network-namespace hosts x 2 ranks (dp 3 x pp 2 at 3 hosts):
#   - two failures during one recovery: host 1 lost, then host 2 while the
#     job regroups; stage 1's copies were on those two hosts, so the job
#     goes on with host 0 from the disk checkpoint;
#   - a host that flaps: host 1 comes back, the job grows to 2 hosts, and
#     host 1 dies again right after joining: the job goes on with host 0
#     and finishes;
#   - a damaged replica: host 2's copies of stage 1 are damaged, host 1 is
#     lost: the damage is found by the CRC32C and the disk checkpoint is used;
#   - a rank that stops progressing (SIGSTOP): the ranks waiting for it time
#     out naming it, its host is dropped, the job finishes on 2 hosts;
#   - a host that comes back with another model or optim key: refused
#     alone, naming the key, the job going on without regrouping for it;
#   - the store host lost: the other launchers stop their ranks and exit
#     within seconds naming it (the one host an elastic job cannot lose).
source "$(dirname "$0")/lib.sh"
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')

# refused NAME WANT CMD...: exits non-zero within 60 s, saying WANT
refused() {
  local name=$1 want=$2 rc=0
  shift 2
  timeout 60 "$@" >"$E2E_WORK/$name.out" 2>&1 || rc=$?
  [ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "$name: exit $rc: $(tail -n 3 "$E2E_WORK/$name.out")"
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: no '$want' in: $(cat "$E2E_WORK/$name.out")"
}
export PLAIT_JOB_TOKEN=$TOKEN MASTER_ADDR=127.0.0.1
MASTER_PORT=$(free_port)
export MASTER_PORT
refused min_max "MIN is larger than MAX" "$PLAIT_BIN" train "$CFG" parallel.dp=2 --nnodes 3:2
{ cat "$CFG"; printf '[run]\nnnodes = 3:2\n'; } >"$E2E_WORK/nnodes.ini"
refused min_max_key "[run] nnodes = '3:2' ($E2E_WORK/nnodes.ini:$(($(wc -l <"$CFG") + 2))): MIN:MAX: MIN is larger than MAX" \
  "$PLAIT_BIN" train "$E2E_WORK/nnodes.ini" parallel.dp=2
refused sizes "with 2 hosts (dp 2) each rank would accumulate 3 micro-batches, and [run] deterministic = true" \
  "$PLAIT_BIN" train "$CFG" parallel.dp=3 run.deterministic=true data.global_batch=12 --nnodes 1:3
refused too_few "only 1 host joined within 3 s ([run] join_timeout), fewer than the 2 --nnodes 2:3 needs: $(hostname)" \
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/too_few" parallel.dp=3 data.global_batch=12 --nnodes 2:3 \
  run.join_timeout=3
[ ! -e "$E2E_WORK/too_few/metrics.csv" ] || fail "too_few: a rank trained"

# --- a layout that no longer fits: 2 launchers on loopback, one lost
export PLAIT_PLUGIN_PATH=$(dirname "$CKPT_DIFF")/device-plugins
BIG="device.plugin=sim optim.plugin=zero3 parallel.dp=4 model.n_embd=256 model.n_layer=4 data.global_batch=8 data.micro_batch=2"
rm -rf "$E2E_WORK/fit"
for i in 0 1; do
  PLAIT_SIM_MEMORY_MB=38 setsid "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/fit" $BIG --nnodes 1:2 --max-restarts 2 \
    run.host_timeout=2 run.join_wait=20 run.steps=200 run.debug_compute_sleep_ms=20 >"$E2E_WORK/fit.$i.out" 2>&1 &
  pid[$i]=$!
  sleep 0.3
done
for _ in $(seq 600); do [ "$(wc -l <"$E2E_WORK/fit/metrics.csv" 2>/dev/null || echo 0)" -gt 3 ] && break; sleep 0.1; done
kill -9 -- -"${pid[1]}"
rc=0
timeout 60 tail --pid="${pid[0]}" -f /dev/null || fail "fit: the launcher still runs 60 s after the loss"
wait "${pid[0]}" || rc=$?
[ $rc -eq 1 ] || fail "fit: exit $rc: $(tail -n 3 "$E2E_WORK/fit.0.out")"
for want in "the job cannot continue: on 1 host (dp 2), host $(hostname): " "this layout needs more memory than there is" \
  "its device (sim (host memory at non-canonical addresses)) has 38 MiB" "; with 2 hosts (dp 4) it fits; no rank was started"; do
  grep -qF -- "$want" "$E2E_WORK/fit.0.out" || fail "fit: no '$want' in: $(grep error "$E2E_WORK/fit.0.out")"
done
[ "$(column fit restarts | sort -u)" = 0 ] || fail "fit: a restarted rank trained"
unset PLAIT_PLUGIN_PATH

# --- a launcher too many: a third for a 1:2 job waits for room; the ranks
# never regroup for it, and it leaves when the job is over
MASTER_PORT=$(free_port)
rm -rf "$E2E_WORK/full"
for i in 0 1 2; do
  [ $i -lt 2 ] || sleep 2
  timeout 90 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/full" parallel.dp=2 --nnodes 1:2 --max-restarts 3 \
    run.host_timeout=2 run.join_wait=10 run.replica_every=2 run.ckpt_every=4 run.steps=60 \
    run.debug_compute_sleep_ms=20 >"$E2E_WORK/full.$i.out" 2>&1 &
  pid[$i]=$!
  sleep 0.3
done
for i in 0 1 2; do wait "${pid[$i]}" || fail "full: launcher $i exited $?: $(tail -n 3 "$E2E_WORK/full.$i.out")"; done
grep -q "waits to join: the job has its --nnodes maximum of 2 hosts" "$E2E_WORK/full.0.out" ||
  fail "full: the third launcher's wait is not said: $(grep elastic "$E2E_WORK/full.0.out")"
[ "$(column full restarts | sort -u)" = 0 ] || fail "full: the ranks regrouped for a host with no room"
grep -q "this host did not train in it" "$E2E_WORK/full.2.out" || fail "full: $(tail -n 2 "$E2E_WORK/full.2.out")"

# --- hosts whose configurations differ: the job ends at once naming the
# key on every host, the restarts it has left unused (none can mend it)
MASTER_PORT=$(free_port)
rm -rf "$E2E_WORK/differ"
for i in 0 1; do
  extra=""
  [ $i -eq 0 ] || extra=model.n_layer=1
  # shellcheck disable=SC2086
  timeout 90 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/differ" parallel.dp=2 --nnodes 2:2 --max-restarts 3 \
    run.host_timeout=2 run.join_wait=10 run.steps=20 $extra >"$E2E_WORK/differ.$i.out" 2>&1 &
  pid[$i]=$!
  sleep 0.3
done
for i in 0 1; do
  rc=0
  wait "${pid[$i]}" || rc=$?
  [ $rc -eq 1 ] || fail "differ: launcher $i exited $rc: $(tail -n 3 "$E2E_WORK/differ.$i.out")"
  grep -q "the job ends: .*rank 1's configuration differs from rank 0's .*: model.n_layer=1 where rank 0 has model.n_layer=2 (a restart cannot mend it)" \
    "$E2E_WORK/differ.$i.out" || fail "differ: launcher $i does not name the key: $(tail -n 3 "$E2E_WORK/differ.$i.out")"
done
! grep -q "restart 1 of" "$E2E_WORK"/differ.*.out || fail "differ: the job was restarted"
unset MASTER_ADDR MASTER_PORT PLAIT_JOB_TOKEN
echo "bad input OK: MIN > MAX, sizes without a layout, too few hosts, a layout that no longer fits, a launcher too many, configurations that differ"

source "$(dirname "$0")/netns.sh"
source "$(dirname "$0")/elastic_lib.sh"
netns_up 3
J="data.global_batch=12 data.micro_batch=2 parallel.plugin=hybrid parallel.pp=2 parallel.dp=3 --nnodes 1:3 --max-restarts 8"
J="$J run.join_wait=10 run.host_timeout=2 comm.timeout=20 run.debug_compute_sleep_ms=15 run.replica_every=2 run.ckpt_every=4"

# --- two failures during one recovery, then a host that flaps
# (snapshots every 4 steps: the ranks of round 2 are killed before they take one)
for i in 0 1 2; do elastic_start twice $i $J run.steps=24 run.replica_every=4; done
wait_rows twice 5
host_kill 1
wait_line "$E2E_WORK/twice.h0.out" "round 2: node 0 of 2" "twice: no round after host 1's loss"
host_kill 2
wait_line "$E2E_WORK/twice.h0.out" "round 3: node 0 of 1 \(plait-h0\)" "twice: no round of host 0 alone"
resumed twice 2
step=$RESUMED_STEP from=$RESUMED_FROM
grep -q "the replicas of step [0-9]* lack stage 1: every copy of it is gone or damaged" "$E2E_WORK/twice/rank-0.log" ||
  fail "twice: the lost replicas were not named: $(grep -h 'replica' "$E2E_WORK/twice/rank-0.log")"
[ "$from" = disk ] && [ $((step % 4)) -eq 0 ] || fail "twice: resumed at step $step from $from (expected a disk checkpoint)"
wait_rows twice $((step + 1)) "training on host 0 alone"
host_back 1
elastic_start twice 1 $J run.steps=24 run.replica_every=4
wait_line "$E2E_WORK/twice.h1.2.out" "round [0-9]*: node 1 of 2" "flap: host 1 did not join again"
host_kill 1
elastic_wait twice
out=$E2E_WORK/twice.h0.out
grep -Eq "round [0-9]+: node 0 of 1 \(plait-h0\), dp 1, accumulation 6; host plait-h1 lost" "$out" ||
  fail "flap: no round without host 1 after it flapped: $(grep elastic "$out")"
[ "$(column twice step | tr '\n' ' ')" = "$(seq 1 24 | tr '\n' ' ')" ] ||
  fail "twice: metrics.csv steps are not 1..24 once each: $(column twice step | tr '\n' ' ')"
[ "$(column twice hosts | uniq | tr '\n' ' ')" = "3 1 2 1 " ] || [ "$(column twice hosts | uniq | tr '\n' ' ')" = "3 1 " ] ||
  fail "twice: hosts column $(column twice hosts | uniq | tr '\n' ' ')"
echo "faults OK: two hosts lost in one recovery (resumed at step $step from disk), a host that flapped"

# --- a damaged replica
host_back 1
host_back 2
for i in 0 1 2; do elastic_start damaged $i $J run.steps=12 run.ckpt_every=2 run.debug_corrupt_replica=2; done
# row 7: the replica of step 6 is complete (a step's row comes before its own replica)
wait_rows damaged 6
host_kill 1
elastic_wait damaged
resumed damaged 1
step=$RESUMED_STEP from=$RESUMED_FROM
[ "$from" = disk ] || fail "damaged: resumed at step $step from $from, not from the disk checkpoint"
grep -Eq "the replica of stage 1 at step $step on this host is damaged: its CRC32C is [0-9a-f]{8}, its header says [0-9a-f]{8}; it is not used" \
  "$E2E_WORK"/damaged/rank-*.log || fail "damaged: the damage was not found: $(grep -h 'replica' "$E2E_WORK"/damaged/rank-*.log)"
echo "damaged replica OK: found by its CRC32C, resumed at step $step from disk"

# --- a rank that stops progressing
host_back 1
for i in 0 1 2; do elastic_start stuck $i $J run.steps=12 comm.timeout=4; done
wait_rows stuck 3
victim=""
for p in $(ip netns pids "${NETNS_P}h2"); do grep -zqx "PLAIT_RANK=5" /proc/"$p"/environ 2>/dev/null && victim=$p; done
[ -n "$victim" ] || fail "stuck: rank 5 not found on host 2"
kill -STOP "$victim"
elastic_wait stuck
rc=0
wait "${ELASTIC_PID[2]}" || rc=$?
[ $rc -ne 0 ] || fail "stuck: host 2's launcher exited 0 after being dropped"
grep -q "this host was dropped from the job: world rank 5 on host plait-h2 stopped progressing" "$E2E_WORK/stuck.h2.out" ||
  fail "stuck: host 2 was not told why: $(tail -n 3 "$E2E_WORK/stuck.h2.out")"
grep -q "node 0 of 2 (plait-h0,plait-h1), dp 2, accumulation 3; world rank 5 on host plait-h2 stopped progressing" \
  "$E2E_WORK/stuck.h0.out" || fail "stuck: no round without host 2: $(grep elastic "$E2E_WORK/stuck.h0.out")"
echo "stuck rank OK: world rank 5 stopped, host 2 dropped, the job finished on 2 hosts"

# --- hosts that come back with another config (a model key, an optim key):
# each is refused alone, the job going on without a restart for it
host_back 2
for i in 0 1 2; do elastic_start rejoin $i $J run.steps=80; done
wait_rows rejoin 3
host_kill 1
wait_line "$E2E_WORK/rejoin.h0.out" "round 2: node 0 of 2" "rejoin: no round after host 1's loss"
host_back 1
n=2
for bad in model.n_layer=1 optim.lr=0.5; do
  elastic_start rejoin 1 $J run.steps=80 "$bad"
  rc=0
  timeout 60 tail --pid="${ELASTIC_PID[1]}" -f /dev/null || fail "rejoin: the launcher with $bad still runs after 60 s"
  wait "${ELASTIC_PID[1]}" || rc=$?
  [ $rc -ne 0 ] || fail "rejoin: the launcher with $bad exited 0"
  grep -q "this host was dropped from the job: host plait-h1's configuration differs from the job's in a key that must be equal on every host: $bad where the job has ${bad%=*}=" \
    "$E2E_WORK/rejoin.h1.$n.out" || fail "rejoin: $bad not named: $(tail -n 3 "$E2E_WORK/rejoin.h1.$n.out")"
  n=$((n + 1))
done
elastic_wait rejoin
! grep -q "round 3" "$E2E_WORK/rejoin.h0.out" || fail "rejoin: the job regrouped for a refused host: $(grep elastic "$E2E_WORK/rejoin.h0.out")"
! grep -q "cannot mend" "$E2E_WORK"/rejoin.h*.out || fail "rejoin: the job ended for a refused host"
[ "$(column rejoin step | tr '\n' ' ')" = "$(seq 1 80 | tr '\n' ' ')" ] ||
  fail "rejoin: metrics.csv steps are not 1..80 once each: $(column rejoin step | tr '\n' ' ')"
echo "rejoin OK: hosts back with model.n_layer=1 and optim.lr=0.5 refused alone, the job finished on 2 hosts"

# --- the store host lost: the job cannot go on, and says so within seconds
host_back 2
for i in 0 1 2; do elastic_start anchor $i $J run.steps=800; done
wait_rows anchor 3
host_kill 0
start=$SECONDS
for i in 1 2; do
  rc=0
  timeout 60 tail --pid="${ELASTIC_PID[$i]}" -f /dev/null || fail "anchor: host $i's launcher still runs 60 s after the store host was lost"
  wait "${ELASTIC_PID[$i]}" || rc=$?
  [ $rc -ne 0 ] || fail "anchor: host $i's launcher exited 0"
  grep -q "the job's store host $(host_addr 0) is lost (.*); an elastic job cannot go on without the host that serves its store" \
    "$E2E_WORK/anchor.h$i.out" || fail "anchor: host $i did not name the lost store host: $(tail -n 3 "$E2E_WORK/anchor.h$i.out")"
done
echo "store host lost OK: the other launchers ended within $((SECONDS - start)) s, naming it"
