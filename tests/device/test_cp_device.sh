#!/usr/bin/env bash
# Context parallelism ([parallel] cp) on the cuda device: ring attention's
# block kernels on the device, K/V blocks and their gradients carried by
# the comm plugin's point-to-point requests after compute-stream events.
#   test_cp_device.sh emu   on cuda_emu, the cuda plugin's own source on the
#     CPU emulator (tests/cuda_emu; label cuda_emu): a 1-block gpt-tiny and a
#     1-block Llama (grouped-query attention: 4 query heads on 2 key/value
#     heads, rotary positions) at a sequence of 32, float32, 2 steps of 2
#     sequences. cp 2 on the emulated device follows cp 1 on it and cp 2 on
#     the cpu device with losses within 1e-5 (relative); final parameters
#     within 1e-5 of each tensor's largest value against its cp 1 (GPT; the
#     Llama 2e-4, its v_proj moving 4e-5 between cp 1 and 2 on the cpu device
#     alone after 2 Adam steps) and 1e-4 against the cpu device's cp 2
#     (test_gpu_training's bound between the devices); the cp group's sends in
#     the cp 2 run's traced step are the ring's blocks (K|V forward and
#     backward, dK|dV), byte for byte. And a device whose kernel table lacks
#     ring attention (the sim test device) is refused, naming the keys.
#   test_cp_device.sh gpu   the same comparisons on the cuda device (label
#     gpu); exits 77 (skipped) where no CUDA device is found.
# Nothing here measures speed or how much of a transfer the compute hides.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
cuda_device "${1:-}" "test_cp_device.sh emu|gpu"
S=(run.steps=2 run.eval_every=0 run.ckpt_every=2 run.progress=off run.precision=fp32 model.n_layer=1
  model.block_size=32 data.global_batch=2 data.micro_batch=1 comm.plugin=tcp)
# ring_bytes NAME: the bytes of the cp group's sends inside NAME's traced
# step span on each rank (the validation passes after the last step send too)
ring_bytes() {
  python3 - "$E2E_WORK/$1/trace.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
steps = {e["pid"]: (e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step" and e.get("ph") == "X"}
print(sum(e["args"]["bytes"] for e in ev
          if e.get("cat") == "p2p" and e.get("name") == "send" and e.get("args", {}).get("comm") == "cp"
          and steps[e["pid"]][0] <= e["ts"] <= steps[e["pid"]][1]))
PY
}
for m in gpt llama; do
  if [ $m = gpt ]; then CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini; else CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini; fi
  export CFG
  train ${m}_dev1 "${S[@]}" "device.plugin=$DEV" &
  train ${m}_cpu2 "${S[@]}" device.plugin=cpu parallel.cp=2 &
  joined
  train ${m}_dev2 "${S[@]}" "device.plugin=$DEV" parallel.cp=2 run.trace=2
  # parameters: the Llama's v_proj after Adam's first steps (elements with
  # near-zero gradients) moves 4e-5 between cp 1 and cp 2 on the cpu device
  # itself, 9e-5 between the two devices' cp 1, 1.2e-4 between cp 1 and 2
  # here; the losses hold 1e-5
  case $m in gpt) ptol=1e-5 ;; llama) ptol=2e-4 ;; esac
  same_losses ${m}_dev2 ${m}_dev1 1e-5
  same_params ${m}_dev2 ${m}_dev1 "$ptol"
  same_losses ${m}_dev2 ${m}_cpu2 1e-5
  same_params ${m}_dev2 ${m}_cpu2 1e-4 # the devices' products round otherwise (test_gpu_training's bound)
  # the ring's transfers of the traced step, over both ranks: per layer and
  # micro-batch (2 a rank) a rank sends 1 K|V block in the forward, 1 in the
  # backward and 2 dK|dV sums (cp 2), a block being T·2·NKV·HS float32
  # values of its T = 16 rows
  case $m in gpt) kvw=256 ;; llama) kvw=64 ;; esac
  want=$((2 * 2 * 4 * 16 * kvw * 4))
  sent=$(ring_bytes ${m}_dev2)
  [ "$sent" = "$want" ] || fail "${m}_dev2: the ring sent $sent bytes in the traced step, not $want"
  echo "$m: cp 2 on $DEV follows its own cp 1 and the cpu device's cp 2; the ring sent $sent bytes in a step"
done
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini train_refused sim_cp "context parallelism needs ring attention in the device's kernel table" \
  "${S[@]}" run.out_dir="$E2E_WORK/sim_cp" device.plugin=sim parallel.cp=2
echo "a device without ring attention: refused"
