#!/usr/bin/env bash
# Expert parallelism over the nccl plugin without a GPU: the experts' rows
# traded between the ep ranks as device pointers handed to the stand-in
# NCCL (libplait_mock_gpu.so, preloaded into every rank), whose sends, as
# NCCL's, are held until their receive runs, with sends and receives run in
# posting order on the communicator's stream; the sim test device (its
# mixture-of-experts entries asked for with PLAIT_SIM_MOE=1) holds the
# tensors, so a host load or store of them would fault. Asserts, in
# float32, that moe-tiny cut to 2 blocks (8 experts, top 2) at dp 2 with ep
# 2, and at dp 4 with ep 4, trains 3 steps with the losses of the same
# layout on the cpu device over tcp within 1e-5 (relative) and its final
# parameters within 1e-5 of each tensor's largest value (NCCL's own
# all-reduce sums the dp gradients, in its order: deterministic mode's
# ordered algorithm reduces in host memory, which NCCL's device buffers
# never are; the trades themselves move the rows unchanged); and that NCCL
# carried the trades: at least the rows' sends of the 3 steps (per sparse
# block and micro-batch, each rank sends to each of its ep - 1 peers in 4
# trades: the dispatch and combine, and their gradients' in the backward;
# a peer given no rows is sent none, and here every peer is given some: 32
# tokens a micro-batch, 2 routes each, over 8 experts).
# A transfer that never comes fails the run at [comm] timeout (20 s here),
# naming the block and the trade, rather than hanging the test.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/comm_hw/nccl_lib.sh
source "$PLAIT_SOURCE_DIR/tests/comm_hw/nccl_lib.sh"
: "${MOCK_GPU_LIB:?}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export PLAIT_SIM_MOE=1
CFG=$PLAIT_SOURCE_DIR/configs/moe-tiny.ini
STEPS=3
S=("run.steps=$STEPS" run.eval_every=0 run.ckpt_every=$STEPS run.progress=off run.precision=fp32 model.n_layer=2
  model.block_size=32 data.micro_batch=1 comm.timeout=20)

# ep_case NAME EP: dp EP x ep EP over nccl on sim against the cpu over tcp
ep_case() {
  local name=$1 ep=$2
  train "$name-cpu" "${S[@]}" data.global_batch="$ep" parallel.dp="$ep" parallel.ep="$ep" device.plugin=cpu \
    comm.plugin=tcp
  on_nccl "$name-nccl" "$ep" "${S[@]}" data.global_batch="$ep" parallel.dp="$ep" parallel.ep="$ep"
  same_losses "$name-cpu" "$name-nccl" 1e-5
  same_params "$name-cpu" "$name-nccl" 1e-5
  # per step: 2 sparse blocks x ep ranks x (ep - 1) peers x 4 trades
  at_least "$name-nccl" send calls $((STEPS * 2 * ep * (ep - 1) * 4))
  at_least "$name-nccl" recv calls $((STEPS * 2 * ep * (ep - 1) * 4))
  echo "$name: ep $ep over nccl on sim follows ep $ep over tcp on cpu (final loss $(column "$name-nccl" loss | tail -n 1))"
}
ep_case ep2 2
ep_case ep4 4
