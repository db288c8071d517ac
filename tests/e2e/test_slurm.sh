#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm with munge; scripts/deps.sh installs them)
# on this machine: the test starts munged, slurmctld and slurmd with a
# private configuration (its own ports, socket and state directory: nothing
# of a system Slurm is touched), then
#   srun -N1 -n4 plait train ...     every task one rank; the job's ranks find
#                                     each other with no address or token given;
#                                     losses and model bit-identical to the
#                                     same layout under plait's own launcher
#   sbatch scripts/slurm-train.sbatch the documented batch script (one launcher
#                                     per node, --nnodes, --max-restarts),
#                                     bit-identical too
# and stops everything it started, also on failure. Skipped (exit 77, with
# the reason) without root or without the packages.
source "$(dirname "$0")/lib.sh"
skip() { echo "SKIPPED: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "running a Slurm controller and node daemon needs root (uid $(id -u))"
for b in munged slurmctld slurmd srun sbatch sinfo; do
  command -v $b >/dev/null || skip "$b is not installed (scripts/deps.sh installs slurmctld, slurmd, slurm-client and munge)"
done

RT=$(mktemp -d /tmp/plait-slurm.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$RT"
}
at_exit cleanup
mkdir -p "$RT/state" "$RT/spool" "$RT/munge"
# munged wants its socket's directory searchable by everyone, its key private
chmod 711 "$RT"
chmod 700 "$RT/munge"
dd if=/dev/urandom of="$RT/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$RT/munge/munge.key"
munged -F --socket="$RT/munge.sock" --key-file="$RT/munge/munge.key" --pid-file="$RT/munge/munged.pid" \
  --log-file="$RT/munge/munged.log" --seed-file="$RT/munge/munged.seed" 2>"$RT/munged.err" &
PIDS+=($!)

NODE=$(hostname -s)
# free ports for the controller and the node daemon
read -r P1 P2 < <(python3 - <<'PY'
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
)
export SLURM_CONF=$RT/slurm.conf
cat >"$SLURM_CONF" <<CONF
ClusterName=plaittest
SlurmctldHost=$NODE
SlurmctldPort=$P1
SlurmdPort=$P2
AuthType=auth/munge
AuthInfo=socket=$RT/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$RT/state
SlurmdSpoolDir=$RT/spool
SlurmctldPidFile=$RT/slurmctld.pid
SlurmdPidFile=$RT/slurmd.pid
SlurmctldLogFile=$RT/slurmctld.log
SlurmdLogFile=$RT/slurmd.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName=$NODE CPUs=4 RealMemory=1000 State=UNKNOWN
PartitionName=plait Nodes=$NODE Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
for _ in $(seq 50); do [ -S "$RT/munge.sock" ] && break; sleep 0.1; done
[ -S "$RT/munge.sock" ] || fail "munged did not start: $(cat "$RT/munged.err" "$RT/munge/munged.log" 2>/dev/null | tail -n 5)"
slurmctld -D -i >"$RT/slurmctld.err" 2>&1 &
PIDS+=($!)
slurmd -D -N "$NODE" >"$RT/slurmd.err" 2>&1 &
PIDS+=($!)
state=""
for _ in $(seq 150); do
  state=$(sinfo -h -N -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.2
done
[ "$state" = idle ] || fail "the Slurm node never became idle (state '$state'): $(tail -n 5 "$RT/slurmctld.log" "$RT/slurmd.log" 2>/dev/null)"

D="run.deterministic=true run.steps=6 parallel.dp=4 comm.timeout=60"
train local_dp4 $D

# srun: 4 tasks, each a rank; no MASTER_ADDR, no token
rm -rf "$E2E_WORK/srun"
# shellcheck disable=SC2086
timeout 300 srun -N1 -n4 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/srun" $D run.log_level=info,job=debug \
  >"$E2E_WORK/srun.out" 2>&1 ||
  { tail -n 20 "$E2E_WORK/srun.out" >&2; fail "srun -N1 -n4 plait train failed"; }
for r in 0 1 2 3; do # each task joined as one rank through Slurm's variables
  grep -q "joined as rank $r of 4 .* via srun" "$E2E_WORK/srun/rank-$r.log" ||
    fail "task $r did not join as rank $r through srun: $(grep -h joined "$E2E_WORK/srun/rank-$r.log")"
done
same_losses srun local_dp4 0
same_params srun local_dp4 bits

# sbatch: the documented script, one launcher per node
rm -rf "$E2E_WORK/sbatch"
# shellcheck disable=SC2086
PLAIT=$PLAIT_BIN timeout 300 sbatch --wait -N1 -o "$E2E_WORK/sbatch.out" scripts/slurm-train.sbatch "$CFG" \
  "run.out_dir=$E2E_WORK/sbatch" $D >"$E2E_WORK/sbatch.submit" 2>&1 ||
  { cat "$E2E_WORK/sbatch.submit" >&2; tail -n 20 "$E2E_WORK/sbatch.out" >&2; fail "sbatch scripts/slurm-train.sbatch failed"; }
same_losses sbatch local_dp4 0
same_params sbatch local_dp4 bits
echo "slurm OK: $(slurmctld -V) on $NODE; srun -N1 -n4 and sbatch scripts/slurm-train.sbatch bit-identical to plait's own launcher"
