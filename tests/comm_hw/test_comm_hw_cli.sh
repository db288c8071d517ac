#!/usr/bin/env bash
# The hardware comm plugins as a user meets them on a machine without the
# hardware: `plait plugins` lists them as unavailable with the reason, and
# `plait bench comm` / `plait train` with them end quickly with exit code 1
# and the reason (no crash, no hang, no sanitizer report), and a bad
# [comm.nccl] / [comm.verbs] value is a configuration error naming the key.
# On a machine that has the hardware, the plugin must be listed available.
set -u
: "${PLAIT_BIN:?}" "${PLAIT_SOURCE_DIR:?}"
P=$PLAIT_BIN
PLUGDIR=$(dirname "$P")/../lib/plait
WORK=${TMPDIR:-/tmp}/plait-comm-hw-cli.$$
mkdir -p "$WORK"
trap 'rm -rf "$WORK"' EXIT
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini

fail() { echo "FAIL: $*" >&2; exit 1; }

# run_fails NAME CMD...: must exit 1 within 60 s with one clear line, no crash
run_fails() {
  local name=$1; shift
  timeout -k 5 60 "$@" >"$WORK/$name.out" 2>&1
  local rc=$?
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && fail "$name hung: $*"
  [ $rc -eq 1 ] || fail "$name exited $rc (expected 1): $(tail -n 5 "$WORK/$name.out")"
  if grep -Eq "Segmentation|core dumped|AddressSanitizer|runtime error:|Aborted" "$WORK/$name.out"; then
    fail "$name crashed: $(cat "$WORK/$name.out")"
  fi
}

plugins=$("$P" plugins) || fail "plait plugins failed"
checked=0

if [ -e "$PLUGDIR/libplait-comm-nccl.so" ]; then
  checked=$((checked + 1))
  if [ -e /proc/driver/nvidia ] || [ -e /dev/nvidia0 ]; then
    grep -Eq "^comm +nccl +[0-9.]+ +1\.[0-9]+ +available" <<<"$plugins" || fail "nccl not available on a GPU machine: $plugins"
  else
    grep -Eq "^comm +nccl +[0-9.]+ +1\.[0-9]+ +unavailable" <<<"$plugins" || fail "nccl not listed unavailable: $plugins"
    grep -Eq -- "-> no CUDA device found \(no NVIDIA driver: " <<<"$plugins" || fail "no reason for nccl: $plugins"
    why="\[comm\] plugin = nccl cannot run here: no CUDA device found"
    run_fails bench_nccl "$P" bench comm -n 2 --op allreduce --comm nccl --min 4K --max 4K
    grep -q "$why" "$WORK/bench_nccl.out" || fail "bench: $(cat "$WORK/bench_nccl.out")"
    run_fails train_nccl "$P" train "$CFG" comm.plugin=nccl run.steps=1 "run.out_dir=$WORK/train_nccl"
    grep -q "$why" "$WORK/train_nccl.out" || fail "train: $(cat "$WORK/train_nccl.out")"
    [ "$(wc -l <"$WORK/train_nccl.out")" -eq 1 ] || fail "train printed more than one line: $(cat "$WORK/train_nccl.out")"
    run_fails train_nccl_n2 "$P" train "$CFG" comm.plugin=nccl run.steps=1 parallel.dp=2 "run.out_dir=$WORK/train_nccl2" -n 2
    grep -q "rank [01] failed: train: $why" "$WORK/train_nccl_n2.out" || fail "train -n 2: $(cat "$WORK/train_nccl_n2.out")"
  fi
  printf '[comm]\nplugin = nccl\n[comm.nccl]\ndevice = -3\n' >"$WORK/bad_nccl.ini"
  run_fails config_nccl "$P" config check "$WORK/bad_nccl.ini"
  grep -q "bad_nccl.ini:4: key 'device' in \[comm.nccl\]: value '-3' is out of range \[-1, 1023\]" "$WORK/config_nccl.out" ||
    fail "config check: $(cat "$WORK/config_nccl.out")"
  run_fails override_nccl "$P" train "$CFG" comm.plugin=nccl comm.nccl.device=-3 run.steps=1
  grep -q "key 'device' in \[comm.nccl\]" "$WORK/override_nccl.out" || fail "override: $(cat "$WORK/override_nccl.out")"
  shown=$("$P" config show "$CFG" comm.plugin=nccl) && grep -q "^\[comm.nccl\]" <<<"$shown" || fail "config show lacks [comm.nccl]"
fi

if [ -e "$PLUGDIR/libplait-comm-verbs.so" ]; then
  checked=$((checked + 1))
  if [ -n "$(ls /sys/class/infiniband 2>/dev/null)" ]; then
    grep -Eq "^comm +verbs +[0-9.]+ +1\.[0-9]+ +(available|unavailable)" <<<"$plugins" || fail "verbs not listed: $plugins"
  else
    grep -Eq "^comm +verbs +[0-9.]+ +1\.[0-9]+ +unavailable" <<<"$plugins" || fail "verbs not listed unavailable: $plugins"
    grep -Eq -- "-> no RDMA device found \(ibv_get_device_list: " <<<"$plugins" || fail "no reason for verbs: $plugins"
    why="\[comm\] plugin = verbs cannot run here: no RDMA device found"
    run_fails bench_verbs "$P" bench comm -n 2 --op allreduce --comm verbs --min 4K --max 4K
    grep -q "$why" "$WORK/bench_verbs.out" || fail "bench: $(cat "$WORK/bench_verbs.out")"
    run_fails train_verbs "$P" train "$CFG" comm.plugin=verbs run.steps=1 "run.out_dir=$WORK/train_verbs"
    grep -q "$why" "$WORK/train_verbs.out" || fail "train: $(cat "$WORK/train_verbs.out")"
    [ "$(wc -l <"$WORK/train_verbs.out")" -eq 1 ] || fail "train printed more than one line: $(cat "$WORK/train_verbs.out")"
  fi
  printf '[comm]\nplugin = verbs\n[comm.verbs]\nport = 300\n' >"$WORK/bad_verbs.ini"
  run_fails config_verbs "$P" config check "$WORK/bad_verbs.ini"
  grep -q "bad_verbs.ini:4: key 'port' in \[comm.verbs\]: value '300' is out of range \[0, 255\]" "$WORK/config_verbs.out" ||
    fail "config check: $(cat "$WORK/config_verbs.out")"
fi

[ $checked -gt 0 ] || fail "neither the nccl nor the verbs plugin was built, yet this test was registered"
echo "comm_hw cli OK ($checked plugin(s))"
