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
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
ELASTIC_PORT=$((29700 + $$ % 200))
declare -A ELASTIC_PID ELASTIC_JOB ELASTIC_SEEN

elastic_start() {
  local name=$1 i=$2 out n=1
  shift 2
  out=$E2E_WORK/$name.h$i.out
  [ -n "${ELASTIC_PID[$i]:-}" ] && [ "${ELASTIC_JOB[$i]:-}" = "$name" ] && while [ -e "$out" ]; do
    n=$((n + 1))
    out=$E2E_WORK/$name.h$i.$n.out
  done
  rm -f "$out"
  if [ -z "${ELASTIC_SEEN[$name]:-}" ]; then # a new job: an empty run directory
    rm -rf "${E2E_WORK:?}/$name"
    ELASTIC_SEEN[$name]=1
  fi
  ELASTIC_JOB[$i]=$name
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
