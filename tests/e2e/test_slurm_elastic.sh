#!/usr/bin/env bash
# A real Slurm of 3 nodes on this machine: each node a network-namespace
# host (tests/e2e/netns.sh) running its own slurmd with its own host name
# (plait-h0..2, in a private /etc/hosts), the controller on plait-h0, one
# munged for all (its socket is a file). On it:
#   sbatch -N 3 scripts/slurm-train-elastic.sbatch (one launcher per node,
#   --nnodes 2:, replicas in memory every 2 steps), then node plait-h2 fails
#   as a machine does: its link taken down, everything on it (its slurmd,
#   the step's task, the launcher and its rank) killed with SIGKILL. Slurm
#   reports the node failure and marks it down; the job goes on with 2 nodes
#   from the replicas in memory and finishes; sbatch --wait exits 0.
# What a single machine cannot show: a real network (a bridge here), nodes
# with cores of their own (all share 2), and a node that comes back through
# Slurm (a step cannot take a new node; docs/multi-node.md says how a grow
# happens under Slurm). Skipped (exit 77, with the reason) without root, the
# packages or network namespaces.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
source "$(dirname "$0")/slurm_lib.sh"
netns_up 3
slurm_up "plait-h0 $(host_addr 0)" "plait-h1 $(host_addr 1)" "plait-h2 $(host_addr 2)"
{ echo "127.0.0.1 localhost"; for i in 0 1 2; do echo "$(host_addr $i) plait-h$i"; done; } >"$SLURM_RT/hosts"
# node I CMD...: CMD on node I: its network namespace (entered without
# remounting /sys, so slurmd finds the machine's cgroups), its host name,
# the nodes' /etc/hosts
node() {
  local i=$1
  shift
  nsenter --net="/run/netns/${NETNS_P}h$i" unshare --uts --mount \
    sh -c 'mount --bind "$1" /etc/hosts && hostname "$0" && shift && exec "$@"' "plait-h$i" "$SLURM_RT/hosts" "$@"
}
slurm_daemon node 0 slurmctld -D -i
for i in 0 1 2; do slurm_daemon node $i slurmd -D -N plait-h$i; done
slurm_wait_idle node 0
[ "$(node 0 srun -N3 hostname | sort | tr '\n' ' ')" = "plait-h0 plait-h1 plait-h2 " ] || fail "srun -N3 did not run on the 3 nodes"

out=$E2E_WORK/job
rm -rf "$out"
D="parallel.dp=3 data.global_batch=12 data.micro_batch=2 run.steps=30 run.replica_every=2 run.ckpt_every=10"
D="$D run.host_timeout=2 run.join_wait=10 comm.timeout=30 run.debug_compute_sleep_ms=30"
# shellcheck disable=SC2086
node 0 env PLAIT="$PLAIT_BIN" PLAIT_MIN_NODES=2 timeout 300 sbatch --wait -N3 -o "$E2E_WORK/job.out" \
  scripts/slurm-train-elastic.sbatch "$CFG" "run.out_dir=$out" $D >"$E2E_WORK/submit.out" 2>&1 &
sbatch=$!
for _ in $(seq 1200); do [ -f "$out/metrics.csv" ] && [ "$(wc -l <"$out/metrics.csv")" -gt 8 ] && break; sleep 0.1; done
[ "$(wc -l <"$out/metrics.csv" 2>/dev/null || echo 0)" -gt 8 ] || fail "the job did not train: $(tail -n 5 "$E2E_WORK/job.out")"
ip -n "${NETNS_P}h2" link set eth0 down
for p in $(ip netns pids "${NETNS_P}h2"); do kill -9 "$p" 2>/dev/null || true; done
rc=0
wait $sbatch || rc=$?
[ $rc -eq 0 ] || fail "sbatch --wait exited $rc: $(cat "$E2E_WORK/submit.out"; tail -n 10 "$E2E_WORK/job.out")"
grep -q "Node failure on plait-h2" "$E2E_WORK/job.out" || fail "Slurm did not see the node fail: $(grep srun "$E2E_WORK/job.out")"
node 0 sinfo -h -N -o "%N %T" | grep -q "plait-h2 down" || fail "Slurm did not mark plait-h2 down: $(node 0 sinfo -N)"
grep -q "round 2: node 0 of 2 (plait-h0,plait-h1), dp 2, accumulation 3; host plait-h2 lost" "$E2E_WORK/job.out" ||
  fail "the job did not go on with 2 nodes: $(grep elastic "$E2E_WORK/job.out")"
grep -q "resuming at step [0-9]* from the replicas of step [0-9]* in memory" "$out/rank-0.log" ||
  fail "not resumed from memory: $(grep -h resuming "$out/rank-0.log")"
[ "$(column job step | tr '\n' ' ')" = "$(seq 1 30 | tr '\n' ' ')" ] || fail "metrics.csv steps: $(column job step | tr '\n' ' ')"
[ "$(column job hosts | uniq | tr '\n' ' ')" = "3 2 " ] || fail "hosts column: $(column job hosts | uniq | tr '\n' ' ')"
[ -f "$out/ckpt-00000030/COMPLETE" ] || fail "no complete final checkpoint"
echo "slurm elastic OK: $(slurmctld -V), 3 nodes in network namespaces; node plait-h2 failed, the job finished on 2 from memory"
