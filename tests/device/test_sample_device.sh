#!/usr/bin/env bash
# `plait sample` chooses its device and precision as `plait train` does:
# [device] plugin / ordinal and [run] precision from the run's config file
# (--config), PLAIT_* variables and device.* / run.* overrides. On the sim
# test device (memory the host cannot dereference) it writes what the cpu
# device writes; the sim device really was opened (its debug line), its
# fp32-only refusal of bf16 and its single ordinal are reached (so precision
# and ordinal get there), tf32 on the cpu is refused naming the key,
# [model] overrides are usage errors (the model is the checkpoint's), and a
# device call that changes the process stops sampling at that token.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
train sampled run.steps=6 run.ckpt_every=6
CK=$(last_ckpt sampled)
S=(--prompt "LOVE, n." --tokens 12 --temperature 0)

# sample_ok NAME ARGS...: exit 0, stdout in NAME, stderr (debug log) in NAME.err
sample_ok() {
  local name=$1; shift
  PLAIT_LOG_LEVEL=debug "$PLAIT_BIN" sample "$CK" "${S[@]}" "$@" >"$E2E_WORK/$name" 2>"$E2E_WORK/$name.err" ||
    fail "sample $name ($*): $(cat "$E2E_WORK/$name.err")"
}
# sample_fails NAME CODE TEXT ARGS...: exits CODE, TEXT in its output
sample_fails() {
  local name=$1 code=$2 text=$3 rc=0; shift 3
  "$PLAIT_BIN" sample "$CK" "${S[@]}" "$@" >"$E2E_WORK/$name" 2>&1 || rc=$?
  [ $rc -eq "$code" ] || fail "sample $name ($*): exit $rc, not $code: $(cat "$E2E_WORK/$name")"
  grep -qF -- "$text" "$E2E_WORK/$name" || fail "sample $name: expected '$text' in: $(cat "$E2E_WORK/$name")"
}
opened() { grep -q "opened $2 device " "$E2E_WORK/$1.err" || fail "$1 did not open the $2 device: $(cat "$E2E_WORK/$1.err")"; }

sample_ok cpu
opened cpu cpu
sample_ok sim_override device.plugin=sim
opened sim_override sim
cmp "$E2E_WORK/cpu" "$E2E_WORK/sim_override" || fail "sim sampled other text than cpu"
printf '[model]\nn_layer = 7\n[device]\nplugin = sim\n[run]\nprecision = fp32\n' >"$E2E_WORK/run.ini"
sample_ok sim_config --config "$E2E_WORK/run.ini"
opened sim_config sim
cmp "$E2E_WORK/cpu" "$E2E_WORK/sim_config" || fail "--config: sim sampled other text than cpu"
PLAIT_DEVICE_PLUGIN=sim sample_ok sim_env
opened sim_env sim
sample_ok cpu_wins --config "$E2E_WORK/run.ini" device.plugin=cpu # the command line beats the file
opened cpu_wins cpu

sample_fails bf16 1 "the sim test device computes in fp32 only" device.plugin=sim run.precision=bf16
sample_fails ordinal 1 "key 'ordinal' in [device]: 1, but this process sees 1 sim device" device.plugin=sim device.ordinal=1
sample_fails tf32 1 "command line 'run.precision=tf32': key 'precision' in [run]: tf32 is TensorFloat-32" run.precision=tf32
sample_fails model 2 "'model.n_layer=3': the model is the checkpoint's" model.n_layer=3
sample_fails optim 2 "sample uses [device] and [run] settings only" optim.lr=1
sample_fails nodev 1 "no NODEV device found" device.plugin=nodev
# a device whose 3rd copy to the host (token 3's logits) sets a PLAIT_*
# variable: sample stops at token 3 naming the plugin and the change,
# having written the prompt and the two tokens before it as cpu did
rc=0
PLAIT_SIM_SETENV_AT_COPY=3 "$PLAIT_BIN" sample "$CK" "${S[@]}" device.plugin=sim >"$E2E_WORK/changed" \
  2>"$E2E_WORK/changed.err" || rc=$?
[ $rc -eq 1 ] || fail "a device call that changed the process: exit $rc, not 1: $(cat "$E2E_WORK/changed.err")"
grep -qF "sample: token 3: the calls into the device plugin 'sim' changed the process: PLAIT_SIM_COPIED set to '3'" \
  "$E2E_WORK/changed.err" || fail "the change is not named at token 3: $(cat "$E2E_WORK/changed.err")"
got=$(wc -c <"$E2E_WORK/changed") all=$(wc -c <"$E2E_WORK/cpu")
[ "$got" -gt 8 ] && [ "$got" -lt "$all" ] && cmp -s -n "$got" "$E2E_WORK/changed" "$E2E_WORK/cpu" ||
  fail "before the change sample wrote other text than the prompt and cpu's first tokens: '$(cat "$E2E_WORK/changed")'"
# the cuda plugin's own code on the CPU emulator (tests/cuda_emu), where
# built: greedy text identical to the cpu device's (its kernels sum in other
# orders; the logits' last bits do not change a 12-token argmax here)
if [ -e "$PLAIT_PLUGIN_PATH/libplait-device-cuda_emu.so" ]; then
  sample_ok emu device.plugin=cuda_emu run.precision=fp32
  opened emu cuda_emu
  cmp "$E2E_WORK/cpu" "$E2E_WORK/emu" || fail "cuda_emu sampled other text than cpu"
  echo "plait sample on cuda_emu: the same text as cpu"
fi
echo "plait sample: sim chosen by override, --config and PLAIT_DEVICE_PLUGIN (text identical to cpu); precision, ordinal and [model] handled"
