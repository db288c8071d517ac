#!/usr/bin/env bash
# `plait train` through the real nccl plugin on device-kind buffers, without
# a GPU: the stand-in CUDA runtime and NCCL (libplait_mock_gpu.so, preloaded
# into every rank) carries the collectives and sends between the ranks'
# processes, the sim test device holds the tensors (memory the host cannot
# dereference: a host loop on it faults). Layouts dp 2 (adam), dp 2 (zero2),
# pp 2 and dp 2 x pp 2 (zero3) give losses bit-identical to, and
# checkpoints byte-identical with, the same runs on the cpu device over tcp
# (every reduction here is over 2 ranks, and a + b is one IEEE number
# whatever the order). The stand-in's counters prove NCCL carried the
# gradients (and the activations), so a run falling back to anything else
# fails; a run whose stand-in corrupts one gradient allreduce must differ,
# so the comparison can fail.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
: "${MOCK_GPU_LIB:?}"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
STEPS=3
S="run.steps=$STEPS run.eval_every=0 run.ckpt_every=0 run.progress=off"
H="parallel.plugin=hybrid data.micro_batch=1"
# a sanitizer build's runtime comes after the preloaded stand-in
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"

# on_nccl NAME RANKS ARGS...: train over the stand-in, one "GPU" per rank;
# its per-process counters land in $E2E_WORK/NAME.stats/
on_nccl() {
  local name=$1 ranks=$2
  shift 2
  rm -rf "${E2E_WORK:?}/$name.stats"
  mkdir -p "$E2E_WORK/$name.stats"
  PLAIT_MOCK_NCCL_STATS=$E2E_WORK/$name.stats PLAIT_SIM_DEVICES=$ranks PLAIT_MOCK_GPUS=$ranks \
    LD_PRELOAD=$MOCK_GPU_LIB train "$name" "$@" device.plugin=sim comm.plugin=nccl
  grep -q "comm nccl" "$E2E_WORK/$name.out" || fail "$name did not run over nccl: $(head -n 20 "$E2E_WORK/$name.out")"
}

# nccl_total NAME OP calls|bytes: summed over the run's processes
nccl_total() {
  local col=2
  [ "$3" = bytes ] && col=3
  cat "$E2E_WORK/$1.stats"/nccl-stats.* | awk -v op="$2" -v c=$col '$1 == op { s += $c } END { printf "%.0f\n", s }'
}

# at_least NAME OP calls|bytes MIN: a counter reached MIN
at_least() {
  local got
  got=$(nccl_total "$1" "$2" "$3")
  [ "$got" -ge "$4" ] || fail "$1: NCCL $2 $3 = $got, expected at least $4 (did training bypass NCCL?)"
  echo "$1: NCCL $2 $3 $got (>= $4)"
}

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
# pp 2: activations forward and gradients back as grouped sends, one per
# micro-batch each way (4 micro-batches of 2 x 128 x 128 floats)
at_least pp2-nccl send calls $((2 * STEPS * 4))
at_least pp2-nccl recv bytes $((2 * STEPS * 4 * 2 * 128 * 128 * 4))
at_least dp2pp2_zero3-nccl reduce_scatter bytes $((2 * STEPS * P / 2))
at_least dp2pp2_zero3-nccl send calls $((4 * STEPS * 4))

# The comparison can fail: the stand-in adds 1.0 to one element of the first
# gradient allreduce's result on both ranks, and the run must differ.
# shellcheck disable=SC2086
PLAIT_MOCK_NCCL_CORRUPT=1 on_nccl corrupt-nccl 2 $S parallel.dp=2
if cmp -s "$(last_ckpt dp2_adam-cpu)/model.safetensors" "$(last_ckpt corrupt-nccl)/model.safetensors"; then
  fail "a corrupted gradient allreduce left the parameters identical: the comparison cannot fail"
fi
echo "corrupting one allreduce in the stand-in is caught (parameters differ from cpu/tcp)"
