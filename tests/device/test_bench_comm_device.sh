#!/usr/bin/env bash
# `plait bench comm --mem device` on the sim device (memory the host cannot
# dereference): every operation over the in-process transport and over tcp
# with real processes has #wrong 0, its results copied back to be checked,
# the buffers staged through pinned host memory (the device's alloc_pinned,
# every block given back); a flipped result is caught after the copy back; a
# device whose memory is host memory and a bad --mem are refused; --mem cuda
# selects the cuda device (here: its clean "no CUDA device found" failure).
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
mkdir -p "$E2E_WORK"
B=("$PLAIT_BIN" bench comm --iters 2 --warmup 1 --factor 16 device.plugin=sim comm.staging_chunk=65536)

check_clean() { # check_clean NAME: every row #wrong 0, the header names sim memory
  local out=$E2E_WORK/$1.out
  grep -q "sim memory (results copied back to be checked)" "$out" || fail "$1: header: $(head -n 1 "$out")"
  awk '$1 ~ /^[0-9]+$/ && NF == 10 { rows++; if ($8 != 0) bad = 1 } END { exit (bad || rows < 2) }' "$out" ||
    fail "$1: $(cat "$out")"
  grep -q "Total #wrong         : 0" "$out" || fail "$1: $(tail -n 2 "$out")"
}

for op in allreduce reduce_scatter allgather broadcast alltoall sendrecv; do
  "${B[@]}" --comm threads --threads 3 --op "$op" --mem device --min 1K --max 4M >"$E2E_WORK/threads-$op.out" 2>&1 ||
    fail "threads $op: $(cat "$E2E_WORK/threads-$op.out")"
  check_clean "threads-$op"
done
for op in allreduce reduce_scatter sendrecv; do
  "${B[@]}" -n 2 --op "$op" --mem device --min 4K --max 1M >"$E2E_WORK/tcp-$op.out" 2>&1 ||
    fail "tcp $op: $(cat "$E2E_WORK/tcp-$op.out")"
  check_clean "tcp-$op"
done

# the staging pool's host buffers are the device's page-locked memory
# (alloc_pinned; the sim device counts it and says so at close), all given back
pinned_used() { # pinned_used NAME: every rank's device saw alloc_pinned calls and got them all back
  local out=$E2E_WORK/$1.out
  grep -Eq "sim: closed: [1-9][0-9]* page-locked allocations \(alloc_pinned\), 0 still live" "$out" ||
    fail "$1: the staging pool did not use the device's page-locked memory: $(grep "sim: closed" "$out")"
  ! grep -E "sim: closed: .* [1-9][0-9]* still live" "$out" || fail "$1: page-locked memory left at close"
}
PLAIT_LOG_LEVEL=info "${B[@]}" --comm threads --threads 2 --op allreduce --mem device --min 64K --max 1M \
  >"$E2E_WORK/pinned-threads.out" 2>&1 || fail "pinned threads: $(cat "$E2E_WORK/pinned-threads.out")"
pinned_used pinned-threads
PLAIT_LOG_LEVEL=info "${B[@]}" -n 2 --op sendrecv --mem device --min 4K --max 64K \
  >"$E2E_WORK/pinned-tcp.out" 2>&1 || fail "pinned tcp: $(cat "$E2E_WORK/pinned-tcp.out")"
pinned_used pinned-tcp
[ "$(grep -c "sim: closed: [1-9]" "$E2E_WORK/pinned-tcp.out")" -eq 2 ] || fail "pinned tcp: not every rank: $(cat "$E2E_WORK/pinned-tcp.out")"

# a wrong result is seen after the copy back
if "${B[@]}" --comm threads --threads 2 --op allreduce --mem device --min 4K --max 4K --corrupt \
  >"$E2E_WORK/corrupt.out" 2>&1; then
  fail "--corrupt on device memory exited 0"
fi
grep -q "Total #wrong         : 4" "$E2E_WORK/corrupt.out" || fail "corrupt: $(cat "$E2E_WORK/corrupt.out")"

# refusals
if "$PLAIT_BIN" bench comm --comm threads --op allreduce --mem device device.plugin=cpu >"$E2E_WORK/cpu.out" 2>&1; then
  fail "--mem device on the cpu device ran"
fi
grep -q "keeps its memory in host memory" "$E2E_WORK/cpu.out" || fail "cpu: $(cat "$E2E_WORK/cpu.out")"
rc=0
"$PLAIT_BIN" bench comm --op allreduce --mem gpu >"$E2E_WORK/badmem.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--mem gpu: exit $rc, not a usage error (2)"
grep -q -- "--mem is host, cuda or device, not 'gpu'" "$E2E_WORK/badmem.out" || fail "badmem: $(cat "$E2E_WORK/badmem.out")"

# --mem cuda (a second spelling) is --mem device with [device] plugin = cuda:
# without a GPU it stops with the cuda device's reason, on a GPU it runs
rc=0
"$PLAIT_BIN" bench comm --comm threads --threads 2 --op allreduce --mem cuda --min 4K --max 64K --iters 2 --warmup 1 \
  >"$E2E_WORK/cuda.out" 2>&1 || rc=$?
cuda_line=$("$PLAIT_BIN" plugins 2>/dev/null | grep -E '^device +cuda ' || true)
if [ -z "$cuda_line" ]; then
  [ $rc -eq 1 ] || fail "--mem cuda without the cuda plugin: exit $rc: $(cat "$E2E_WORK/cuda.out")"
  grep -qF "key 'plugin' in [device]: 'cuda' cannot be loaded" "$E2E_WORK/cuda.out" ||
    fail "--mem cuda without the cuda plugin: $(cat "$E2E_WORK/cuda.out")"
elif [[ $cuda_line == *" available "* ]]; then
  [ $rc -eq 0 ] || fail "--mem cuda on a GPU: exit $rc: $(cat "$E2E_WORK/cuda.out")"
  grep -q "Total #wrong         : 0" "$E2E_WORK/cuda.out" || fail "--mem cuda on a GPU: $(cat "$E2E_WORK/cuda.out")"
else
  [ $rc -eq 1 ] || fail "--mem cuda without a GPU: exit $rc: $(cat "$E2E_WORK/cuda.out")"
  for want in "plait: error: bench comm: --mem cuda: " "[device] plugin = cuda: no CUDA device found ("; do
    grep -qF -- "$want" "$E2E_WORK/cuda.out" || fail "--mem cuda without a GPU: $(cat "$E2E_WORK/cuda.out")"
  done
  [ "$(wc -l <"$E2E_WORK/cuda.out")" -eq 1 ] || fail "--mem cuda printed more than one line: $(cat "$E2E_WORK/cuda.out")"
  # with -n the launcher says it once, before any rank, with advice for a benchmark
  rc=0
  "$PLAIT_BIN" bench comm -n 2 --op allreduce --mem cuda --min 4K --max 64K >"$E2E_WORK/cuda2.out" 2>&1 || rc=$?
  [ $rc -eq 1 ] || fail "--mem cuda -n 2 without a GPU: exit $rc: $(cat "$E2E_WORK/cuda2.out")"
  [ "$(wc -l <"$E2E_WORK/cuda2.out")" -eq 1 ] || fail "--mem cuda -n 2 printed more than one line: $(cat "$E2E_WORK/cuda2.out")"
  for want in "plait: error: bench comm: --mem cuda: [device] plugin = cuda: no CUDA device found (" \
    "(--mem host measures host buffers); no rank was started"; do
    grep -qF -- "$want" "$E2E_WORK/cuda2.out" || fail "--mem cuda -n 2 without a GPU: $(cat "$E2E_WORK/cuda2.out")"
  done
  ! grep -q "train on the CPU" "$E2E_WORK/cuda.out" "$E2E_WORK/cuda2.out" || fail "a benchmark advised training on the CPU"
fi
# it names the device itself: another [device] plugin beside it is a usage error
rc=0
"$PLAIT_BIN" bench comm --op allreduce --mem cuda device.plugin=sim >"$E2E_WORK/cudasim.out" 2>&1 || rc=$?
[ $rc -eq 2 ] || fail "--mem cuda device.plugin=sim: exit $rc, not a usage error (2)"
grep -qF -- "--mem cuda puts the buffers on the GPU ([device] plugin = cuda), but command line 'device.plugin=sim' names [device] plugin = sim; use --mem device" \
  "$E2E_WORK/cudasim.out" || fail "cudasim: $(cat "$E2E_WORK/cudasim.out")"
echo "bench comm --mem device: 6 ops over threads, 3 over tcp, #wrong 0; staging pool page-locked; corrupt and refusals caught; --mem cuda: $(head -c 120 "$E2E_WORK/cuda.out")"
