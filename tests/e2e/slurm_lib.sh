# A real Slurm (Debian's slurm-wlm with munge; scripts/deps.sh installs
# them) for a test, with a private configuration (its own ports, sockets,
# state and spool directories under $SLURM_RT: nothing of a system Slurm is
# touched), stopped when the test ends, also on failure; $SLURM_RT (the
# daemons' logs) is removed then unless E2E_KEEP is set. Sourced after
# lib.sh.
#
#   slurm_up NODES...       start munged and write slurm.conf for NODES, each
#                           "NAME ADDRESS" (the controller runs where the
#                           first one is); exit 77 (skipped) without root or
#                           the packages
#   slurm_daemon CMD...     start a daemon (stopped at the end); the caller
#                           places it (on a namespace host, or here)
#   slurm_wait_idle RUN...  until `RUN sinfo` says every node is idle
SLURM_PIDS=()

slurm_down() {
  local p
  for p in "${SLURM_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 0.3
  for p in "${SLURM_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  [ -n "${E2E_KEEP:-}" ] || rm -rf "${SLURM_RT:?}"
}

slurm_skip() { echo "SKIPPED: $*" >&2; exit 77; }

slurm_up() {
  [ "$(id -u)" -eq 0 ] || slurm_skip "running a Slurm controller and node daemon needs root (uid $(id -u))"
  local b
  for b in munged slurmctld slurmd srun sbatch sinfo; do
    command -v $b >/dev/null || slurm_skip "$b is not installed (scripts/deps.sh installs slurmctld, slurmd, slurm-client and munge)"
  done
  SLURM_RT=$(mktemp -d /tmp/plait-slurm.XXXXXX)
  at_exit slurm_down
  mkdir -p "$SLURM_RT/state" "$SLURM_RT/spool" "$SLURM_RT/munge"
  # munged wants its socket's directory searchable by everyone, its key private
  chmod 711 "$SLURM_RT"
  chmod 700 "$SLURM_RT/munge"
  dd if=/dev/urandom of="$SLURM_RT/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$SLURM_RT/munge/munge.key"
  munged -F --socket="$SLURM_RT/munge.sock" --key-file="$SLURM_RT/munge/munge.key" \
    --pid-file="$SLURM_RT/munge/munged.pid" --log-file="$SLURM_RT/munge/munged.log" \
    --seed-file="$SLURM_RT/munge/munged.seed" 2>"$SLURM_RT/munged.err" &
  SLURM_PIDS+=($!)
  # free ports for the controller and the node daemons
  local p1 p2
  read -r p1 p2 < <(python3 - <<'PY'
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])
PY
)
  local first=$1 name addr names=""
  export SLURM_CONF=$SLURM_RT/slurm.conf
  {
    cat <<CONF
ClusterName=plaittest
SlurmctldHost=${first% *}(${first#* })
SlurmctldPort=$p1
SlurmdPort=$p2
AuthType=auth/munge
AuthInfo=socket=$SLURM_RT/munge.sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SLURM_RT/state
SlurmdSpoolDir=$SLURM_RT/spool/%n
SlurmctldPidFile=$SLURM_RT/slurmctld.pid
SlurmdPidFile=$SLURM_RT/slurmd.%n.pid
SlurmctldLogFile=$SLURM_RT/slurmctld.log
SlurmdLogFile=$SLURM_RT/slurmd.%n.log
# a lost node is marked down within seconds: pings every SlurmdTimeout/3,
# each given up after MessageTimeout (default 10 s)
SlurmdTimeout=5
MessageTimeout=3
# sbatch --wait polls every 2 s while 2 s < MinJobAge/2, else it backs off
# to 8 s and then 32 s (default MinJobAge 300)
MinJobAge=4
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
CONF
    for b in "$@"; do
      name=${b% *} addr=${b#* }
      mkdir -p "$SLURM_RT/spool/$name"
      echo "NodeName=$name NodeAddr=$addr CPUs=4 RealMemory=1000 State=UNKNOWN"
      names="$names${names:+,}$name"
    done
    echo "PartitionName=plait Nodes=$names Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
  } >"$SLURM_CONF"
  local _
  for _ in $(seq 50); do [ -S "$SLURM_RT/munge.sock" ] && break; sleep 0.1; done
  [ -S "$SLURM_RT/munge.sock" ] ||
    fail "munged did not start: $(cat "$SLURM_RT/munged.err" "$SLURM_RT/munge/munged.log" 2>/dev/null | tail -n 5)"
}

slurm_daemon() {
  "$@" >"$SLURM_RT/$(basename "$1")-$#-$RANDOM.err" 2>&1 &
  SLURM_PIDS+=($!)
}

slurm_wait_idle() {
  local state="" _
  for _ in $(seq 150); do
    state=$("$@" sinfo -h -N -o %T 2>/dev/null | sort -u | tr '\n' ' ' || true)
    [ "$state" = "idle " ] && return 0
    sleep 0.2
  done
  fail "the Slurm nodes never became idle (states '$state'): $(tail -n 5 "$SLURM_RT"/slurm*.log 2>/dev/null)"
}
