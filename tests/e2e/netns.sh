# A multi-host harness on one machine (sourced after lib.sh): H "hosts",
# each a network namespace with its own UTS namespace (host name
# plait-h<i>), loopback and one veth interface eth0 with address
# 10.77.<id>.<i+1>/24, joined by a bridge that lives in a namespace of its
# own, so nothing is created in, or routed through, the machine's own
# network namespace. With RATE the inter-host link is rate-limited: a tc tbf
# qdisc on every host's eth0 shapes what the host sends (netem is not
# available in every kernel; tbf is).
#
#   netns_up H [RATE]     create the hosts (RATE e.g. 200mbit); exit 77
#                         (skipped) with the reason where namespaces cannot be
#                         created or entered (not root, no CAP_SYS_ADMIN, no
#                         ip/tc, a chroot or container whose / is not a mount
#                         point, which `ip netns exec` must make a slave)
#   on_host I CMD...      run CMD on host I (its namespaces, its host name)
#   host_addr I           host I's address
#   netns_down            delete everything netns_up made (also when the test
#                         ends, via lib.sh's at_exit: a failed test cleans up)
#
# Only addresses inside these namespaces (10.77.<id>.0/24) and loopback are
# ever used; <id> is derived from the test's process id, so two tests running
# at once use distinct names and subnets.
NETNS_ID=$(($$ % 200 + 20))
NETNS_P=pl$$
NETNS_HOSTS=0

netns_down() {
  local i p
  # what still runs on a host goes with it (a namespace outlives its deletion while a process holds it)
  for ((i = 0; i < NETNS_HOSTS; i++)); do
    for p in $(ip netns pids "${NETNS_P}h$i" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  for ((i = 0; i < NETNS_HOSTS; i++)); do ip netns del "${NETNS_P}h$i" 2>/dev/null || true; done
  ip netns del "${NETNS_P}br" 2>/dev/null || true
  NETNS_HOSTS=0
}

netns_skip() { echo "SKIPPED: $*" >&2; exit 77; }

netns_up() {
  local h=$1 rate=${2:-} i
  command -v ip >/dev/null || netns_skip "the ip command (iproute2) is not installed"
  [ -z "$rate" ] || command -v tc >/dev/null || netns_skip "the tc command (iproute2) is not installed"
  command -v unshare >/dev/null || netns_skip "unshare (util-linux) is not installed"
  [ "$(id -u)" -eq 0 ] || netns_skip "network namespaces need root (running as uid $(id -u))"
  at_exit netns_down
  local err
  err=$(ip netns add "${NETNS_P}br" 2>&1) || netns_skip "cannot create a network namespace here: $err"
  # `ip netns exec` remounts / as a slave in a mount namespace of its own,
  # which fails where / is not a mount point (a chroot, some containers)
  err=$(ip netns exec "${NETNS_P}br" true 2>&1) ||
    netns_skip "cannot enter a network namespace here (is / a mount point? a chroot's is not): $err"
  unshare --uts true 2>/dev/null || netns_skip "cannot create a UTS namespace here"
  ip -n "${NETNS_P}br" link set lo up
  ip -n "${NETNS_P}br" link add br0 type bridge
  ip -n "${NETNS_P}br" link set br0 up
  for ((i = 0; i < h; i++)); do
    ip netns add "${NETNS_P}h$i"
    NETNS_HOSTS=$((i + 1))
    ip -n "${NETNS_P}h$i" link set lo up
    ip -n "${NETNS_P}h$i" link add eth0 type veth peer name vh$i netns "${NETNS_P}br"
    ip -n "${NETNS_P}br" link set vh$i master br0
    ip -n "${NETNS_P}br" link set vh$i up
    ip -n "${NETNS_P}h$i" addr add "$(host_addr $i)/24" dev eth0
    ip -n "${NETNS_P}h$i" link set eth0 up
    if [ -n "$rate" ]; then
      ip netns exec "${NETNS_P}h$i" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 200ms ||
        netns_skip "tc cannot add a tbf qdisc here"
    fi
  done
  # (no wait for the bridge: ranks retry their connections until [comm] timeout)
}

host_addr() { echo "10.77.$NETNS_ID.$(($1 + 1))"; }

on_host() {
  local i=$1
  shift
  ip netns exec "${NETNS_P}h$i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "plait-h$i" "$@"
}
