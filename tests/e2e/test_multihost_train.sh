#!/usr/bin/env bash
# Training across "hosts" (tests/e2e/netns.sh: network + UTS namespaces on a
# bridge, the link rate-limited with tc tbf) through the path a multi-node
# user takes: one `plait train --nnodes H --node-rank i` launcher per host,
# MASTER_ADDR = host 0's address, the same PLAIT_JOB_TOKEN everywhere.
#   2 hosts x 2 ranks, dp = 4: losses and final model bit-identical to the
#     same layout on one host (deterministic mode); the job saw 2 hosts and
#     the TCP plugin used eth0, never the same-host single copy across hosts.
#   3 hosts x 2 ranks, dp 3 x tp 2: each tp pair on one host (no warning),
#     bit-identical to the same layout on one host.
#   2 hosts x 2 ranks, tp = 4: rank placement warns that the tp group spans
#     hosts.
#   2 hosts x 2 ranks, dp = 4 with int8 gradient compression, deterministic:
#     bit-identical to one host (the ordered algorithm encodes every
#     contribution once wherever the ranks sit), a quarter of the DP bytes.
# Skipped (exit 77, with the reason) where namespaces cannot be created.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
netns_up 3 400mbit
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')

# multihost NAME HOSTS [args...]: a job of one launcher per host into
# $E2E_WORK/NAME; each host's output in NAME.h<i>.out.
multihost() {
  local name=$1 hosts=$2 i pids=() rc=0
  shift 2
  rm -rf "${E2E_WORK:?}/$name"
  for ((i = 0; i < hosts; i++)); do
    on_host $i env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=29500 PLAIT_JOB_TOKEN="$TOKEN" PLAIT_LOG_LEVEL=info,tcp=debug \
      "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" --nnodes "$hosts" --node-rank $i "$@" \
      >"$E2E_WORK/$name.h$i.out" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < hosts; i++)); do wait "${pids[$i]}" || rc=$?; done
  if [ $rc -ne 0 ]; then
    for ((i = 0; i < hosts; i++)); do echo "--- host $i" >&2; tail -n 15 "$E2E_WORK/$name.h$i.out" >&2; done
    fail "multi-host run $name ($*) failed"
  fi
}

D="run.deterministic=true run.steps=6 comm.timeout=60"
multihost dp4 2 $D parallel.dp=4
train dp4_one_host $D parallel.dp=4
same_losses dp4 dp4_one_host 0
same_params dp4 dp4_one_host bits
# the ranks were placed on 2 hosts, talked over eth0, and no byte went by
# process_vm_readv between hosts (the tcp plugin reports single-copy peers
# only among same-host ranks: 1 per rank here)
grep -q "uses interface eth0, listening on $(host_addr 0)" "$E2E_WORK/dp4.h0.out" || fail "host 0's ranks did not use eth0"
grep -q "uses interface eth0, listening on $(host_addr 1)" "$E2E_WORK/dp4.h1.out" || fail "host 1's ranks did not use eth0"
cma=$(cat "$E2E_WORK"/dp4.h*.out | grep -Eo "single copy from [0-9]+ of [0-9]+ same-host peers" | sort -u)
[ "$cma" = "single copy from 1 of 1 same-host peers" ] || fail "same-host peers seen by the tcp plugin: '$cma' (expected 1 of 1 per rank)"

B="run.deterministic=true run.steps=4 comm.timeout=60 data.global_batch=12 data.micro_batch=2 parallel.dp=3 parallel.tp=2 parallel.plugin=hybrid"
multihost dp3tp2 3 $B
train dp3tp2_one_host $B
same_losses dp3tp2 dp3tp2_one_host 0
same_params dp3tp2 dp3tp2_one_host bits
! grep -q "spans .* hosts" "$E2E_WORK"/dp3tp2.h*.out || fail "tp pairs on one host each were reported as spanning hosts"

multihost tp4 2 run.steps=1 comm.timeout=60 parallel.tp=4 parallel.plugin=hybrid
grep -q "the tp group of world rank 0 (tp = 4, order tp,dp,pp) spans 2 hosts" "$E2E_WORK/tp4.h0.out" ||
  fail "a tp group over 2 hosts was not reported: $(grep -h warn "$E2E_WORK"/tp4.h*.out)"
multihost dp4_int8 2 $D parallel.dp=4 parallel.dp.grad_compression=int8
train dp4_int8_one_host $D parallel.dp=4 parallel.dp.grad_compression=int8
same_losses dp4_int8 dp4_int8_one_host 0
same_params dp4_int8 dp4_int8_one_host bits
awk -v z="$(column dp4_int8 dp_bytes | tail -n 1)" -v f="$(column dp4 dp_bytes | tail -n 1)" \
  'BEGIN { exit !(z > 0.24 * f && z < 0.27 * f) }' ||
  fail "int8 sent $(column dp4_int8 dp_bytes | tail -n 1) DP bytes a step, float32 $(column dp4 dp_bytes | tail -n 1)"
echo "multi-host training OK: 2x2 dp=4 (float32 and int8) and 3x2 dp3 x tp2 bit-identical to one host; tp over 2 hosts warned"
