#!/usr/bin/env bash
# Context parallelism over the nccl plugin without a GPU: ring attention's
# K|V blocks and their dK|dV sums carried by the stand-in NCCL
# (libplait_mock_gpu.so, preloaded into every rank), whose sends, as NCCL's,
# are held until their receive runs, with sends and receives run in posting
# order on the communicator's stream; the sim test device (its ring
# attention asked for with PLAIT_SIM_RING=1) holds the tensors. Asserts, in
# float32, that cp 2 on a 1-block GPT (learned positions) and on a 1-block
# Llama (grouped-query attention, rotary positions), and cp 4 on the GPT,
# train 3 steps with the losses of the same layout on the cpu device over
# tcp within 1e-5 (relative), and that NCCL carried the ring: at least the
# ring's sends of the 3 steps (per layer and micro-batch, each rank sends
# cp - 1 K|V blocks forward, cp - 1 backward and cp dK|dV sums). A transfer that
# never comes fails the run at [comm] timeout (20 s here), naming the ring
# attention's layer and the operation, rather than hanging the test.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/comm_hw/nccl_lib.sh
source "$PLAIT_SOURCE_DIR/tests/comm_hw/nccl_lib.sh"
: "${MOCK_GPU_LIB:?}"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
export PLAIT_SIM_RING=1
STEPS=3
S=("run.steps=$STEPS" run.eval_every=0 run.ckpt_every=0 run.progress=off run.precision=fp32 model.n_layer=1
  model.block_size=32 data.micro_batch=1 comm.timeout=20)

# cp_case NAME CONFIG CP: cp CP over nccl on sim against the cpu over tcp
cp_case() {
  local name=$1 cp=$3 mb=2
  export CFG=$2
  train "$name-cpu" "${S[@]}" data.global_batch=$mb parallel.cp="$cp" device.plugin=cpu comm.plugin=tcp
  on_nccl "$name-nccl" "$cp" "${S[@]}" data.global_batch=$mb parallel.cp="$cp"
  same_losses "$name-cpu" "$name-nccl" 1e-5
  # per step: mb micro-batches x cp ranks x 3cp - 2 sends of the 1 layer
  at_least "$name-nccl" send calls $((STEPS * mb * cp * (3 * cp - 2)))
  at_least "$name-nccl" recv calls $((STEPS * mb * cp * (3 * cp - 2)))
  echo "$name: cp $cp over nccl on sim follows cp $cp over tcp on cpu (final loss $(column "$name-nccl" loss | tail -n 1))"
}
cp_case gpt_cp2 "$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini" 2
cp_case llama_cp2 "$PLAIT_SOURCE_DIR/tests/e2e/llama.ini" 2
cp_case gpt_cp4 "$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini" 4
