#!/usr/bin/env bash
# One rank per GPU under NCCL: with a device plugin that sees one device
# (sim stands in for a host with one GPU), two local ranks under
# [comm] plugin = nccl are refused before any rank starts, saying why (NCCL
# does not support two ranks on one GPU and may hang) and what to do; so
# are ranks pinned to one [device] ordinal. Over tcp the same two ranks
# share the device, their buffers staged through host memory.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
# the refusals are the nccl plugin's to make, and it is built only with CUDA
"$PLAIT_BIN" plugins 2>/dev/null | grep -Eq '^comm +nccl ' ||
  { echo "SKIP: the nccl comm plugin is not built (no CUDA toolkit and NCCL found at configure time)"; exit 77; }

# no_start NAME EXPECTED-TEXT ARGS...: plait train exits non-zero with the
# text, before any rank printed a line or wrote metrics
no_start() {
  local name=$1 want=$2 out=$E2E_WORK/$1.out rc=0
  shift 2
  rm -rf "${E2E_WORK:?}/$name"
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" >"$out" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] && grep -qF -- "$want" "$out" || fail "$name (exit $rc): expected '$want': $(cat "$out")"
  ! grep -q "^\[r[0-9]\|nccl: rank\|nccl: world" "$out" && [ ! -e "$E2E_WORK/$name/metrics.csv" ] ||
    fail "$name: a rank started: $(cat "$out")"
}

no_start shared "plait: train: 2 ranks on this host would share 1 sim device under [comm] plugin = nccl: NCCL does not support two ranks on one GPU and may hang, so no rank was started" \
  parallel.dp=2 device.plugin=sim comm.plugin=nccl
no_start pinned "2 ranks on this host would all drive sim device 0 ([device] ordinal) under [comm] plugin = nccl" \
  parallel.dp=2 device.plugin=sim device.ordinal=0 comm.plugin=nccl
grep -qF "share GPUs over [comm] plugin = tcp" "$E2E_WORK/shared.out" || fail "no way out named: $(cat "$E2E_WORK/shared.out")"

# the same two ranks over tcp share the device, its buffers staged
"$PLAIT_BIN" bench comm -n 2 --op allreduce --mem device device.plugin=sim --min 64K --max 64K --iters 2 \
  >"$E2E_WORK/tcp.out" 2>&1 || fail "2 ranks on 1 sim device over tcp: $(cat "$E2E_WORK/tcp.out")"
grep -q "Total #wrong         : 0" "$E2E_WORK/tcp.out" || fail "tcp: $(cat "$E2E_WORK/tcp.out")"
echo "nccl: 2 ranks on 1 device refused before any rank started; over tcp they share it (#wrong 0)"
