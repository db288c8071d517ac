#!/usr/bin/env bash
# The device's work in the step trace ([run] trace, docs/trace.md "The
# device's work"; plugins/device/cuda/trace.c):
#   test_cuda_trace.sh emu   on cuda_emu, the cuda plugin's own source on the
#                            CPU emulator (label cuda_emu)
#   test_cuda_trace.sh gpu   on the GPU (label gpu; exits 77, skipped, without one)
# A small GPT traced at its second step writes trace.json: Chrome trace-event
# JSON whose tracks nest (tests/e2e/trace_check.py's checks of one rank),
# with the device's kernels and copies on a track per stream, inside the
# step's span, never overlapping on one stream (trace_device_check.py); the
# untraced first step has no device span. At dp 2 over tcp the staging
# copies are on the communication stream's track. `plait trace summary`
# still adds the step up from the host's spans alone.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
MODE=${1:-gpu}
cuda_device "$MODE" "test_cuda_trace.sh [emu|gpu]"
command -v python3 >/dev/null || { echo "SKIP: no python3 to read the trace"; exit 77; }
W=$E2E_WORK
rm -rf "${W:?}" && mkdir -p "$W"
# gpt-tiny at 2 layers of width 64 and 2 sequences of 64: seconds on the emulator
sed -e 's/^n_embd *=.*/n_embd = 64/' -e 's/^n_head *=.*/n_head = 2/' -e 's/^n_layer *=.*/n_layer = 2/' \
  -e 's/^block_size *=.*/block_size = 64/' "$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini" >"$W/model.ini"
(cd "$W" && "$PLAIT_BIN" train model.ini "device.plugin=$DEV" run.steps=2 run.trace=2 run.eval_every=0 \
  run.ckpt_every=0 run.progress=off data.global_batch=2 "run.out_dir=$W/run") >"$W/run.out" 2>&1 ||
  fail "the traced run failed: $(tail -5 "$W/run.out")"
T=$W/run/trace.json
[ -f "$T" ] || fail "no trace.json: $(grep -i trace "$W/run.out")"
# one rank: the trace_check.py checks that need no other rank's spans
python3 - "$T" <<'PY' || fail "trace.json is not trace-event JSON whose tracks nest"
import collections, json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in ev if e["ph"] == "X"]
assert all(k in e for e in spans for k in ("pid", "tid", "ts", "dur", "cat", "name", "args")), "a span lacks a field"
named = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert all((e["pid"], e["tid"]) in named for e in spans), "a span on an unnamed track"
steps = sorted(e["args"]["step"] for e in spans if e["cat"] == "step")
assert steps == [2], f"traced steps {steps}"
print(f"trace-event JSON: {len(spans)} spans, categories {sorted({e['cat'] for e in spans})}")
PY
python3 "$PLAIT_SOURCE_DIR/tests/device/trace_device_check.py" "$T" 1 || fail "the device's spans"
# dp 2 over tcp: the gradients staged through host memory by copies on the
# communication stream, on its own track
(cd "$W" && "$PLAIT_BIN" train model.ini "device.plugin=$DEV" run.steps=2 run.trace=2 run.eval_every=0 \
  run.ckpt_every=0 run.progress=off data.global_batch=4 parallel.dp=2 comm.plugin=tcp "run.out_dir=$W/dp2") \
  >"$W/dp2.out" 2>&1 || fail "the traced dp 2 run failed: $(tail -5 "$W/dp2.out")"
python3 "$PLAIT_SOURCE_DIR/tests/device/trace_device_check.py" "$W/dp2/trace.json" 2 --comm || fail "dp 2: the device's spans"
"$PLAIT_BIN" trace summary "$T" >"$W/summary.out" 2>&1 || fail "summary: $(cat "$W/summary.out")"
awk '$1 == 0 && $2 == 1 && NF == 11 { s = 0; for (i = 4; i <= 11; i++) s += $i; ok = (s - $3 < 0.01 && $3 - s < 0.01) }
  END { exit !ok }' "$W/summary.out" || fail "the summary's row does not add up: $(cat "$W/summary.out")"
rm -rf "${W:?}"
echo "PASS"
