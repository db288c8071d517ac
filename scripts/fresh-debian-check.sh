#!/usr/bin/env bash
# The README's two commands on a fresh Debian 12 (bookworm) that has nothing
# but git and make: builds a minimal root with debootstrap, clones this
# checkout's HEAD into /root/plait inside it (root's home is 0700 there, as
# on a real machine), and runs `make demo`, then `make test`, in it through
# chroot, as root. Reports each command's result and, for a failure, the
# tail of its log and the tests that failed. Run it when a dependency
# (scripts/deps.sh, a test's tool) changes; it takes half an hour or more on a
# small machine, so it is no ctest test.
#
#   scripts/fresh-debian-check.sh [DIR]
#
# DIR (default /var/tmp/plait-fresh-debian) is emptied first; it then holds
# the root (DIR/root) and the logs (DIR/demo.log, DIR/test.log), kept for a
# look afterwards (rm -rf DIR removes them). Needs root, and Debian's mirror
# (DEBIAN_MIRROR, default http://deb.debian.org/debian) for debootstrap and
# for what scripts/deps.sh installs inside; debootstrap itself is installed
# with apt-get when missing. proc, sys and dev are mounted into the root
# while the commands run, and unmounted when the script ends, however it
# ends. Exit status: 0 when both commands passed, 1 when one failed, 2 when
# the root could not be made.
set -euo pipefail
dir=${1:-/var/tmp/plait-fresh-debian}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
repo=$(cd "$(dirname "$0")/.." && pwd)
say() { echo "fresh-debian-check: $*"; }
die() { say "$*" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap and chroot), running as uid $(id -u)"
case $dir in /) die "DIR is /" ;; esac
commit=$(git -C "$repo" rev-parse HEAD) || die "$repo is not a git checkout"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null ||
    { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends debootstrap >/dev/null; } ||
    die "cannot install debootstrap"
fi

root=$dir/root
# every mount point under the root, deepest first: the three mounted here
# and what the tests left (`ip netns add` inside binds the root's /run/netns,
# in the machine's mount table since chroot makes no namespace of its own)
mounts_below() { awk -v r="$root/" 'index($2 "/", r) == 1 { print $2 }' /proc/self/mounts | sort -r; }
unmount_all() {
  local m
  for m in $(mounts_below); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}
trap unmount_all EXIT
trap 'exit 130' INT TERM HUP

# a DIR left mounted by a run that was killed: unmount before emptying it
unmount_all
rm -rf --one-file-system "${dir:?}"
mkdir -p "$dir"

say "debootstrap bookworm (minbase, with git and make) into $root from $mirror"
debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$root" "$mirror" >"$dir/debootstrap.log" 2>&1 ||
  die "debootstrap failed: $(tail -n 5 "$dir/debootstrap.log")"
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true

say "cloning $commit into /root/plait"
git -C "$repo" bundle create "$root/tmp/plait.bundle" HEAD >/dev/null 2>&1 || die "git bundle failed"
chroot "$root" git -c advice.detachedHead=false clone -q /tmp/plait.bundle /root/plait || die "git clone inside the root failed"
chroot "$root" git -C /root/plait -c advice.detachedHead=false checkout -q "$commit" || die "checkout of $commit inside the root failed"
rm -f "$root/tmp/plait.bundle"

mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"

# in_root LOG CMD: CMD in /root/plait as root, with a clean environment
in_root() {
  local log=$1
  shift
  chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    bash -c 'cd /root/plait && exec "$@"' bash "$@" >"$log" 2>&1
}

result=0
for cmd in demo test; do
  say "make $cmd (log: $dir/$cmd.log)"
  start=$SECONDS
  if in_root "$dir/$cmd.log" make "$cmd"; then
    say "make $cmd: passed ($(((SECONDS - start) / 60)) min)"
  else
    result=1
    say "make $cmd: FAILED ($(((SECONDS - start) / 60)) min); the end of its log:"
    tail -n 40 "$dir/$cmd.log" | sed 's/^/    /'
    if [ $cmd = test ]; then
      say "failed tests:"
      sed -n '/The following tests FAILED/,$p' "$dir/test.log" | sed 's/^/    /'
    fi
  fi
done
unmount_all
[ $result -eq 0 ] && say "both commands passed on a fresh Debian 12 at $commit" ||
  say "a command failed on a fresh Debian 12 at $commit (logs in $dir)"
exit $result
