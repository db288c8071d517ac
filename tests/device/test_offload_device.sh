#!/usr/bin/env bash
# [optim] offload on a device whose memory is not host memory:
#   test_offload_device.sh        on the sim test device (host memory at
#     non-canonical addresses, its kernels queued and run late: a host read
#     of device memory faults, a copy that does not wait for the kernels
#     before it reads stale values): offload = host and nvme, with adam on
#     one rank and at dp 2 and zero2 at dp 2, bit-identical to offload = none (every
#     loss, model and optimizer checkpoints byte for byte): each chunk's
#     gradients and parameters reach the host after the backward that
#     wrote them, and the updated parameters reach the device before the
#     next forward; and ZeRO-3 on one rank with offload = host and
#     offload_params (the parameter shards in host memory, each layer's
#     slices copied to the device for its gather), and with nvme (the
#     slices read from disk one layer ahead of their gathers). offload = host's copies
#     on the communication stream (adam on one rank: from each layer's
#     after_backward) give the synchronous path's bits
#     (PLAIT_OFFLOAD_COPY=sync), and go wrong with the sim's event waits
#     switched off (the events order them). On the cpu device offload =
#     host is refused.
#   test_offload_device.sh emu    the same on cuda_emu, the cuda plugin's own
#     source on the CPU emulator (label cuda_emu), its runs of about 40 s
#     each cut to adam with offload = host (overlapped and synchronous
#     copies) and ZeRO-3's parameters on one rank, 2 steps of 2 micro-batches
#     (accumulated, as the sim's 8 are); and adam with
#     offload = host once more with the emulator eager and its copies to
#     the device slowed, its record of queued work read: the copies back
#     run beside the next forward, each layer's forward after its own.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
DEV=sim STEPS=3 layouts=("adam|" "adam2|parallel.dp=2" "zero2|parallel.dp=2 optim.plugin=zero2") modes=(host nvme)
BATCH=8
[ "${1:-}" = emu ] && DEV=cuda_emu STEPS=2 BATCH=2 layouts=("adam|") modes=(host)
mkdir -p "$E2E_WORK/disk"
D=("run.steps=$STEPS" run.eval_every=0 "run.ckpt_every=$STEPS" run.progress=off run.deterministic=true data.micro_batch=1
  "data.global_batch=$BATCH" run.precision=fp32 "device.plugin=$DEV" optim.offload_buffer=64K
  "optim.offload_path=$E2E_WORK/disk")

train_refused cpu_host "offload = host: this device's memory is host memory" run.steps=1 device.plugin=cpu \
  optim.offload=host "run.out_dir=$E2E_WORK/cpu_host"

for l in "${layouts[@]}"; do
  name=${l%%|*} arg=${l#*|}
  for mode in none "${modes[@]}"; do
    # shellcheck disable=SC2086 # $arg may hold several overrides
    train "$name-$mode" "${D[@]}" $arg optim.offload=$mode
  done
  grep -q 'optimizer state 0.0 MB' "$E2E_WORK/$name-host.out" || fail "$name-host kept its state on the device"
  for mode in "${modes[@]}"; do
    same_losses "$name-none" "$name-$mode" 0
    same_params "$name-none" "$name-$mode" bits
    echo "$name offload=$mode on $DEV: bit-identical to none (final loss $(column "$name-$mode" loss | tail -n 1))"
  done
done
# offload = host's copies run on the communication stream beside the host's
# update, ordered by events: the same bits as each chunk copied in and out
# in turn (PLAIT_OFFLOAD_COPY=sync); another value is refused.
grep -q 'copied on the communication stream beside' "$E2E_WORK/adam-host.out" ||
  fail "adam-host did not overlap its copies: $(grep -m 1 'offload:' "$E2E_WORK/adam-host.out")"
PLAIT_OFFLOAD_COPY=sync train adam-host-sync "${D[@]}" optim.offload=host
grep -q 'copied on the communication stream beside' "$E2E_WORK/adam-host-sync.out" &&
  fail "PLAIT_OFFLOAD_COPY=sync still overlapped the copies"
same_losses adam-host adam-host-sync 0
same_params adam-host adam-host-sync bits
echo "adam offload=host on $DEV: the overlapped copies give the synchronous path's bits"
PLAIT_OFFLOAD_COPY=bogus train_refused copy-bogus "PLAIT_OFFLOAD_COPY = bogus: not a way" "${D[@]}" \
  optim.offload=host "run.out_dir=$E2E_WORK/copy-bogus"
# On one rank a layer's gradients are copied from its after_backward, beside
# the backward of the layers before it, ordered by an event: with the sim's
# event waits switched off those copies read the gradients before the
# backward kernels ran, so the run must go wrong (while the synchronous
# path, which uses no events, stays right). The emulator needs no switch:
# its streams run only when waited for, so a missing wait fails the
# comparisons above.
if [ "$DEV" = sim ]; then
  PLAIT_SIM_DEBUG_SKIP_WAITS=1 PLAIT_OFFLOAD_COPY=sync train skip-sync "${D[@]}" optim.offload=host
  same_params adam-none skip-sync bits
  # stale gradients give other values, or a non-finite norm that stops the
  # run: either shows; only a run matching offload = none would not
  rm -rf "${E2E_WORK:?}/skip-overlap"
  if PLAIT_SIM_DEBUG_SKIP_WAITS=1 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/skip-overlap" "${D[@]}" \
    optim.offload=host >"$E2E_WORK/skip-overlap.out" 2>&1 &&
    "$CKPT_DIFF" "$(last_ckpt adam-none)" "$(last_ckpt skip-overlap)" --bits >/dev/null 2>&1; then
    fail "with the sim's event waits off the overlapped copies still match: the test cannot see a missing wait"
  fi
  echo "without the event waits the copies started in the backward go wrong; the synchronous path does not"
fi

# ZeRO-3 on one rank with its parameter shards in host memory: each layer's
# gather copies its slice to the device, the update runs on the host
train zero3-params "${D[@]}" optim.plugin=zero3 optim.offload=host optim.offload_params=true
same_losses adam-none zero3-params 0
same_params adam-none zero3-params bits
echo "zero3 dp 1 offload=host offload_params on $DEV: bit-identical to adam without offload"
# with them on disk, each layer's slices read ahead into host memory and
# copied to the device from there at its gather
if [ "$DEV" = sim ]; then
  train zero3-params-nvme "${D[@]}" optim.plugin=zero3 optim.offload=nvme optim.offload_params=true
  same_losses adam-none zero3-params-nvme 0
  same_params adam-none zero3-params-nvme bits
  echo "zero3 dp 1 offload=nvme offload_params on $DEV: bit-identical to adam without offload"
fi

# With adam the copies back of step 1's updated parameters run beside step
# 2's forward, each layer's forward waiting for its own. On the emulator,
# with every copy from page-locked memory to the device slowed
# (PLAIT_CUDA_EMU_PINNED_H2D_DELAY_US) so that the copy thread falls behind
# the forward: still offload = none's bits (a forward that did not wait for
# its layer's copies would read step 1's parameters before their update);
# and the emulator's record of what was queued (PLAIT_CUDA_EMU_LOG) shows
# the next forward's kernels queued on the compute stream between copies
# back on the communication stream, once a layer at least, not all the
# copies back first.
if [ "$DEV" = cuda_emu ]; then
  PLAIT_CUDA_EMU_EAGER=1 PLAIT_CUDA_EMU_LOG="$E2E_WORK/queued.log" PLAIT_CUDA_EMU_PINNED_H2D_DELAY_US=2000 \
    train adam-host-slow "${D[@]}" optim.offload=host
  same_losses adam-none adam-host-slow 0
  same_params adam-none adam-host-slow bits
  # the compute stream queues the most kernels; the communication stream
  # is the other one with copies to the device
  switches=$(awk '
    { kind[NR] = $2; sid[NR] = $1; if ($2 == "kernel") kernels[$1]++ }
    END {
      for (s in kernels) if (kernels[s] > kernels[comp] || comp == "") comp = s
      for (i = 1; i <= NR; i++) if (kind[i] == "copy_h2d" && sid[i] != comp) { h2d[sid[i]]++ }
      for (s in h2d) if (h2d[s] > h2d[comm] || comm == "") comm = s
      # a copy back queued after a kernel of the compute stream that was
      # queued after the copy back before it
      for (i = 1; i <= NR; i++) {
        if (sid[i] == comp && kind[i] == "kernel") k = 1
        else if (sid[i] == comm && kind[i] == "copy_h2d") { if (k) n++; k = 0 }
      }
      print n + 0
    }' "$E2E_WORK/queued.log")
  n_layer=$(sed -n 's/^n_layer *= *\([0-9]*\).*/\1/p' "$CFG")
  [ "$switches" -ge "$n_layer" ] ||
    fail "the copies back did not interleave with the next forward: $switches switch(es) from compute kernels to copies back, fewer than the $n_layer blocks"
  echo "adam offload=host on $DEV with the copies back slowed: offload = none's bits; the copies back and the next forward's kernels interleave ($switches switches)"
fi
