#!/usr/bin/env bash
# `plait train` through the real nccl plugin on device-kind buffers, without
# a GPU: the stand-in CUDA runtime and NCCL (libplait_mock_gpu.so, preloaded
# into every rank) carries the collectives and sends between the ranks'
# processes, the sim test device holds the tensors (memory the host cannot
# dereference: a host loop on it faults). Layouts dp 2 (adam), dp 2 (zero2),
# pp 2 (1f1b, and gpipe and zb1 against it), tp 2 and dp 2 x pp 2 (zero3)
# give losses bit-identical to, and checkpoints byte-identical with, the
# same runs on the cpu device over tcp
# (every reduction here is over 2 ranks, and a + b is one IEEE number
# whatever the order). The stand-in's counters prove NCCL carried the
# gradients (and the activations), so a run falling back to anything else
# fails; a run whose stand-in corrupts one gradient allreduce must differ,
# so the comparison can fail. A rank killed mid-step, or stopped (alive but
# silent), ends the survivor with an error naming the step and the
# operation: the stand-in's liveness check, or [comm] timeout; never a hang.
# Interleaved pp 2 and pp 4 likewise, each pipeline link on a communicator
# of its own.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/comm_hw/nccl_lib.sh
source "$PLAIT_SOURCE_DIR/tests/comm_hw/nccl_lib.sh"
: "${MOCK_GPU_LIB:?}"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
STEPS=3
S="run.steps=$STEPS run.eval_every=0 run.ckpt_every=0 run.progress=off"
H="parallel.plugin=hybrid data.micro_batch=1"
# a sanitizer build's runtime comes after the preloaded stand-in
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# same_run NAME: the nccl run equals the cpu/tcp one, bit for bit
same_run() {
  same_losses "$1-cpu" "$1-nccl" 0
  for f in model.safetensors optim.safetensors; do
    cmp "$(last_ckpt "$1-cpu")/$f" "$(last_ckpt "$1-nccl")/$f" || fail "$1: $f differs between cpu/tcp and sim/nccl"
  done
  echo "$1: sim over nccl bit-identical to cpu over tcp (final loss $(column "$1-nccl" loss | tail -n 1))"
}

layouts=(
  "dp2_adam|2|parallel.dp=2"
  "dp2_zero2|2|parallel.dp=2 optim.plugin=zero2 data.micro_batch=2"
  "pp2|2|parallel.plugin=pp parallel.dp=1 parallel.pp=2 data.micro_batch=2"
  "tp2|2|parallel.plugin=tp parallel.dp=1 parallel.tp=2"
  "dp2pp2_zero3|4|$H parallel.dp=2 parallel.pp=2 optim.plugin=zero3"
)
for l in "${layouts[@]}"; do
  IFS='|' read -r name ranks args <<<"$l"
  # shellcheck disable=SC2086 # args are separate overrides
  train "$name-cpu" $S $args device.plugin=cpu
  # shellcheck disable=SC2086
  on_nccl "$name-nccl" "$ranks" $S $args
  same_run "$name"
done

# What NCCL carried: P = the model's bytes (every gradient, every parameter).
P=$(stat -c %s "$(last_ckpt dp2_adam-cpu)/model.safetensors")
P=$((P * 95 / 100)) # less the safetensors header
# dp 2, adam: every step allreduces every gradient on both ranks
at_least dp2_adam-nccl allreduce bytes $((2 * STEPS * P))
# zero2: gradients reduce-scattered (per micro-batch), parameters allgathered,
# not allreduced
at_least dp2_zero2-nccl reduce_scatter bytes $((2 * STEPS * P))
at_least dp2_zero2-nccl allgather bytes $((2 * STEPS * P))
[ "$(nccl_total dp2_zero2-nccl allreduce bytes)" -lt "$P" ] || fail "dp2_zero2: gradients went through allreduce"
# the run's own accounting sees it too (metrics dp_bytes: what each step
# handed the transport)
dpb=$(column dp2_adam-nccl dp_bytes | head -n 1)
awk -v b="$dpb" -v p="$P" 'BEGIN { exit !(b >= p) }' || fail "dp2_adam over nccl: dp_bytes $dpb < $P"
# pp 2: activations forward and gradients back as grouped sends, one per
# micro-batch each way (4 micro-batches of 2 x 128 x 128 floats)
at_least pp2-nccl send calls $((2 * STEPS * 4))
at_least pp2-nccl recv bytes $((2 * STEPS * 4 * 2 * 128 * 128 * 4))
# tp 2: the row-parallel layers' activations and gradients allreduced
at_least tp2-nccl allreduce bytes $((2 * STEPS * P))
at_least dp2pp2_zero3-nccl reduce_scatter bytes $((2 * STEPS * P / 2))
at_least dp2pp2_zero3-nccl send calls $((4 * STEPS * 4))

# pp 2 under the other schedules of one chunk a stage: gpipe and zb1 keep
# the rule [grouping] of plait/comm.h (docs/transport.md, "Posting order"),
# so over the stand-in, which completes a group as a whole, they end with
# pp2's bits (the micro-batches' gradients summed in the same order)
for sched in gpipe zb1; do
  # shellcheck disable=SC2086
  on_nccl "pp2_$sched-nccl" 2 $S parallel.plugin=pp parallel.dp=1 parallel.pp=2 data.micro_batch=2 \
    parallel.pp.schedule=$sched
  same_losses pp2-cpu "pp2_$sched-nccl" 0
  cmp "$(last_ckpt pp2-cpu)/model.safetensors" "$(last_ckpt "pp2_$sched-nccl")/model.safetensors" ||
    fail "pp2 $sched over nccl: the parameters differ from pp2's on cpu/tcp"
  echo "pp2 $sched: over nccl bit-identical to 1f1b on cpu/tcp"
done
# several chunks a stage (interleaved): each link of the pipeline is a
# communicator of its own (docs/transport.md, "Posting order"); over the pp
# group alone the ranks waited for each other until [comm] timeout (pp 2
# from 4 micro-batches a step). 8 micro-batches at pp 2, and pp 4 (6
# blocks: 8 chunks), end with the bits of the same runs over tcp, the
# boundaries carried by NCCL's sends (3 boundaries of 8 micro-batches each
# way a step at pp 2)
IL="parallel.plugin=pp parallel.dp=1 data.micro_batch=1 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2"
for l in "interleaved_pp2|2|" "interleaved_pp4|4|model.n_layer=6"; do
  IFS='|' read -r name ranks extra <<<"$l"
  # shellcheck disable=SC2086
  train "$name-cpu" $S $IL parallel.pp=$ranks $extra device.plugin=cpu
  # shellcheck disable=SC2086
  on_nccl "$name-nccl" "$ranks" $S $IL parallel.pp=$ranks $extra comm.timeout=20
  same_run "$name"
done
at_least interleaved_pp2-nccl send calls $((2 * 3 * STEPS * 8))

# The comparison can fail: the stand-in adds 1.0 to one element of the first
# gradient allreduce's result on both ranks, and the run must differ.
# shellcheck disable=SC2086
PLAIT_MOCK_NCCL_CORRUPT=1 on_nccl corrupt-nccl 2 $S parallel.dp=2
if cmp -s "$(last_ckpt dp2_adam-cpu)/model.safetensors" "$(last_ckpt corrupt-nccl)/model.safetensors"; then
  fail "a corrupted gradient allreduce left the parameters identical: the comparison cannot fail"
fi
echo "corrupting one allreduce in the stand-in is caught (parameters differ from cpu/tcp)"

# lose_peer NAME SIGNAL TIMEOUT GRACE EXPECTED: dp 2 over the stand-in
# ([comm] timeout = TIMEOUT, the launcher's grace GRACE s); once steps are
# running, rank 1 gets SIGNAL; rank 0 must exit 1 by itself with EXPECTED in
# its error, and no rank may be left. A job still running after 1800 polls of
# 0.1 s (3 minutes or more) is a hang.
lose_peer() {
  local name=$1 sig=$2 timeout=$3 grace=$4 want=$5 out=$E2E_WORK/$1 log=$E2E_WORK/$1.out
  rm -rf "$out"
  pretend_driver 2
  PLAIT_LAUNCH_GRACE=$grace PLAIT_SIM_DEVICES=2 PLAIT_MOCK_GPUS=2 LD_PRELOAD=$MOCK_GPU_LIB \
    "$PLAIT_BIN" train "$CFG" "run.out_dir=$out" run.steps=1000 run.eval_every=0 run.ckpt_every=0 run.progress=off \
    parallel.dp=2 device.plugin=sim comm.plugin=nccl "comm.timeout=$timeout" >"$log" 2>&1 &
  local launcher=$! victim="" pid
  for _ in $(seq 600); do
    [ -f "$out/metrics.csv" ] && [ "$(wc -l <"$out/metrics.csv")" -gt 2 ] && break
    kill -0 $launcher 2>/dev/null || break
    sleep 0.1
  done
  for pid in $(pgrep -P $launcher); do
    if grep -zqx "PLAIT_RANK=1" /proc/"$pid"/environ 2>/dev/null; then victim=$pid; fi
  done
  [ -n "$victim" ] || { kill $launcher; fail "$name: rank 1 not found running: $(tail -n 5 "$log")"; }
  kill -"$sig" "$victim"
  local t0=$SECONDS rc=0 polls=0
  while kill -0 $launcher 2>/dev/null; do
    polls=$((polls + 1))
    if [ $polls -gt 1800 ]; then
      kill $launcher
      kill -9 "$victim" 2>/dev/null || true
      fail "$name: still running 1800 polls after rank 1 got SIG$sig: a hang"
    fi
    sleep 0.1
  done
  wait $launcher || rc=$?
  [ $rc -ne 0 ] || fail "$name: the launcher exited 0"
  grep -q "also ended abnormally: rank 0 (exit 1)\|rank 0 failed" "$log" || fail "$name: rank 0 did not exit 1: $(tail -n 4 "$log")"
  grep -E "^plait: error: train: step [0-9]+: .*(allreduce|reduce_scatter|allgather|broadcast) #" "$log" | grep -qF "$want" ||
    fail "$name: rank 0's error names no step, operation or '$want': $(grep 'error' "$log" | tail -n 1)"
  ! kill -0 "$victim" 2>/dev/null || fail "$name: rank 1 (pid $victim) is still there"
  echo "$name: rank 1 got SIG$sig; rank 0 ended in $((SECONDS - t0)) s: $(grep -o "step [0-9]*: [a-z_]* #[0-9]*" "$log" | head -n 1) ... $want"
}
# a peer killed: noticed at once, not at [comm] timeout (an hour), nor by
# the launcher stopping rank 0 (its grace is an hour too)
lose_peer killed KILL 3600 3600 "exited without leaving it"
# a peer stopped: rank 0's wait times out by itself (2 s); the launcher then
# stops rank 1 after a grace of 1 s
lose_peer stopped STOP 2 1 "did not finish within 2 s"
