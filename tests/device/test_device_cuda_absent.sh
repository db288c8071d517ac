#!/usr/bin/env bash
# The clean failure without hardware: on a machine with no GPU or no
# NVIDIA driver, `plait plugins` lists cuda as unavailable with its reason,
# and `[device] plugin = cuda` stops `plait train` before any rank starts
# (one process and the launcher's path: no run directory, not even a log)
# with "no CUDA device found (...)". Skipped (77) where the cuda plugin is
# not built or a GPU is present.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
"$PLAIT_BIN" plugins >"$E2E_WORK/plugins.out" 2>&1 || fail "plait plugins failed"
line=$(grep -E '^device +cuda ' "$E2E_WORK/plugins.out" || true)
[ -n "$line" ] || { echo "SKIP: the cuda device plugin is not built"; exit 77; }
case "$line" in *" available "*) echo "SKIP: a CUDA device is present here"; exit 77 ;; esac
grep -A1 -E '^device +cuda ' "$E2E_WORK/plugins.out" | grep -qF -- "-> no CUDA device found (" ||
  fail "plait plugins does not give cuda's reason: $(cat "$E2E_WORK/plugins.out")"
for dp in 1 2; do
  name=cuda_dp$dp
  rm -rf "${E2E_WORK:?}/$name"
  if "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" device.plugin=cuda "parallel.dp=$dp" >"$E2E_WORK/$name.out" 2>&1; then
    fail "$name: trained without a GPU"
  fi
  grep -qF "[device] plugin = cuda: no CUDA device found (" "$E2E_WORK/$name.out" || fail "$name: $(cat "$E2E_WORK/$name.out")"
  grep -qF "no rank was started" "$E2E_WORK/$name.out" || fail "$name: $(cat "$E2E_WORK/$name.out")"
  [ ! -e "$E2E_WORK/$name" ] || fail "$name: a rank started ($(ls "$E2E_WORK/$name"))"
done
echo "no GPU: cuda listed unavailable with its reason; plait train refused before any rank (1 and 2 ranks)"
