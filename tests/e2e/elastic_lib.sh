# Elastic jobs on network-namespace hosts (sourced after lib.sh and
# netns.sh): one `plait train --nnodes MIN:MAX` launcher per host, host 0's
# address as MASTER_ADDR (host 0 serves the job's store), and ways to lose
# a host as a machine is lost: its link taken down, then every process in
# it killed with SIGKILL.
#
#   elastic_start NAME I ARGS...   start host I's launcher of job NAME
#                                  (output NAME.h<I>.out, a second start of
#                                  the host NAME.h<I>.2.out, ...; pid in
#                                  ELASTIC_PID[I])
#   elastic_wait NAME              wait for host 0's launcher; fail unless 0
#   host_kill I                    link down, SIGKILL everything on host I
#   host_back I                    link up again (start a launcher after)
#   rows NAME                      rows of NAME's metrics.csv so far
#   wait_rows NAME N [WHAT]        until metrics.csv has more than N rows
#   wait_line FILE REGEX [WHAT]    until FILE has a line matching REGEX
#   resumed NAME C                 RESUMED_STEP and RESUMED_FROM (memory,
#                                  disk) of job NAME's restart after C
#                                  membership changes, from rank 0's log
#                                  (waiting for it)
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
ELASTIC_PORT=$((29700 + $$ % 200))
declare -A ELASTIC_PID ELASTIC_STARTS ELASTIC_SEEN

elastic_start() {
  local name=$1 i=$2 out
  shift 2
  if [ -z "${ELASTIC_SEEN[$name]:-}" ]; then # a new job: an empty run directory
    rm -rf "${E2E_WORK:?}/$name" "$E2E_WORK/$name".h*.out
    ELASTIC_SEEN[$name]=1
  fi
  ELASTIC_STARTS[$name.$i]=$((${ELASTIC_STARTS[$name.$i]:-0} + 1))
  out=$E2E_WORK/$name.h$i.out
  [ "${ELASTIC_STARTS[$name.$i]}" -eq 1 ] || out=$E2E_WORK/$name.h$i.${ELASTIC_STARTS[$name.$i]}.out
  on_host "$i" env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$ELASTIC_PORT PLAIT_JOB_TOKEN="$TOKEN" \
    "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$out" 2>&1 &
  ELASTIC_PID[$i]=$!
}

elastic_wait() {
  local rc=0
  wait "${ELASTIC_PID[0]}" || rc=$?
  if [ $rc -ne 0 ]; then
    tail -n 25 "$E2E_WORK/$1".h*.out >&2
    fail "$1: host 0's launcher exited $rc"
  fi
}

host_kill() {
  ip -n "${NETNS_P}h$1" link set eth0 down
  local p
  for p in $(ip netns pids "${NETNS_P}h$1"); do kill -9 "$p" 2>/dev/null || true; done
}

host_back() { ip -n "${NETNS_P}h$1" link set eth0 up; }

rows() { if [ -f "$E2E_WORK/$1/metrics.csv" ]; then echo $(($(wc -l <"$E2E_WORK/$1/metrics.csv") - 1)); else echo 0; fi; }

wait_rows() {
  local _
  for _ in $(seq 1200); do
    [ "$(rows "$1")" -gt "$2" ] && return 0
    sleep 0.05
  done
  tail -n 20 "$E2E_WORK/$1".h*.out >&2
  fail "$1: ${3:-training} did not get past step $2"
}

wait_line() {
  local _
  for _ in $(seq 1200); do
    grep -Eq "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  tail -n 20 "$1" >&2
  fail "${3:-$1 never said /$2/}"
}

resumed() {
  local log=$E2E_WORK/$1/rank-0.log line
  wait_line "$log" "membership changes so far: $2\).*resuming at step" "$1: no restart after $2 membership changes in rank 0's log"
  line=$(grep "membership changes so far: $2)" "$log" | grep -o "resuming at step [0-9]* from .*" | tail -n 1)
  RESUMED_STEP=${line#resuming at step }
  RESUMED_STEP=${RESUMED_STEP%% *}
  case $line in *"in memory"*) RESUMED_FROM=memory ;; *ckpt-*) RESUMED_FROM=disk ;; *) RESUMED_FROM="?" ;; esac
}
