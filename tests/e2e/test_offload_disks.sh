#!/usr/bin/env bash
# offload = nvme on disks that cannot hold the state (plugins/optim/README.md),
# real file systems rather than injected faults, each refused before step 1
# naming the path, its free space and what the state needs:
#  - a file size limit (`ulimit -f`, RLIMIT_FSIZE) below the rank's state
#    file: the launcher's check sees a disk with room, the optimizer's
#    reservation of the file fails with "File too large";
#  - a full disk (a 1 MiB tmpfs for 6.4 MB of moments) and a read-only one
#    (a tmpfs remounted ro), each through `plait config check` and through
#    the optimizer's own check (`run.memory_check = false`). These mount
#    their file systems in a user and mount namespace of their own
#    (`unshare -rm`); where namespaces are not allowed that half says so and
#    is skipped.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
S=(run.steps=1 run.eval_every=0 run.progress=off)
W=$E2E_WORK
mkdir -p "$W/disk" "$W/full" "$W/ro"

# 1. RLIMIT_FSIZE of 2 MiB (plait ignores SIGXFSZ: the write fails with EFBIG)
if (ulimit -f 2048 && "$PLAIT_BIN" train "$CFG" "${S[@]}" optim.offload=nvme "optim.offload_path=$W/disk" \
  "run.out_dir=$W/fsize" >"$W/fsize.out" 2>&1); then
  fail "a run whose state file exceeds the file size limit started: $(tail -n 3 "$W/fsize.out")"
fi
grep -qE "offload_path: reserving [0-9.]+ GiB for $W/disk/plait-adam-state-[0-9]+-rank0\.bin \([0-9.]+ GiB free there\): File too large" "$W/fsize.out" ||
  fail "the file size limit's refusal does not name the file, the free space and the need: $(tail -n 3 "$W/fsize.out")"
grep -q 'step 1' "$W/fsize.out" && fail "the run reached step 1: $(tail -n 3 "$W/fsize.out")"
[ -z "$(ls -A "$W/disk")" ] || fail "the refused run left a file in offload_path: $(ls -A "$W/disk")"

# 2. a full and a read-only file system, mounted in a namespace of their own
if ! unshare -rm true 2>/dev/null; then
  echo "no user and mount namespace here (unshare -rm refused): the full and read-only disks are not checked"
  echo "offload disks: ok"
  exit 0
fi
# shellcheck disable=SC2016 # expanded in the namespace's shell
unshare -rm bash -c '
  set -u
  W=$1 CFG=$2; shift 2
  mount -t tmpfs -o size=1m tmpfs "$W/full" || exit 3
  mount -t tmpfs -o size=64m tmpfs "$W/ro" && mount -o remount,ro "$W/ro" || exit 3
  for d in full ro; do
    "$PLAIT_BIN" config check "$CFG" optim.offload=nvme "optim.offload_path=$W/$d" >"$W/$d-check.out" 2>&1
    echo $? >"$W/$d-check.rc"
    "$PLAIT_BIN" train "$CFG" "$@" optim.offload=nvme "optim.offload_path=$W/$d" run.memory_check=false \
      "run.out_dir=$W/$d-train" >"$W/$d-train.out" 2>&1
    echo $? >"$W/$d-train.rc"
  done
' _ "$W" "$CFG" "${S[@]}" || fail "mounting the test's file systems in the namespace failed"
for f in full-check full-train ro-check ro-train; do
  [ "$(cat "$W/$f.rc")" != 0 ] || fail "$f: accepted: $(tail -n 3 "$W/$f.out")"
  grep -q 'step 1' "$W/$f.out" && fail "$f: reached step 1: $(tail -n 3 "$W/$f.out")"
done
grep -qE "offload_path = $W/full has [0-9.]+ [KMGT]?i?B free and the optimizer state of the 1 rank\(s\) on this host needs [0-9.]+ [KMGT]?i?B there" "$W/full-check.out" ||
  fail "config check's full-disk refusal is unclear: $(tail -n 3 "$W/full-check.out")"
grep -qE "offload_path = $W/full has [0-9.]+ GiB free; this rank's optimizer state needs [0-9.]+ GiB" "$W/full-train.out" ||
  fail "the optimizer's full-disk refusal is unclear: $(tail -n 3 "$W/full-train.out")"
grep -qE "offload_path = $W/ro: a read-only file system" "$W/ro-check.out" ||
  fail "config check's read-only refusal is unclear: $(tail -n 3 "$W/ro-check.out")"
grep -qE "offload_path = $W/ro is on a read-only file system \([0-9.]+ GiB free; the state needs [0-9.]+ GiB\)" "$W/ro-train.out" ||
  fail "the optimizer's read-only refusal is unclear: $(tail -n 3 "$W/ro-train.out")"
echo "offload disks: ok"
