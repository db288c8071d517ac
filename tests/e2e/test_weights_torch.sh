#!/usr/bin/env bash
# Weights out to PyTorch: a model trained from the Hugging Face
# GPT-2 fixture on dp 2 x tp 2, exported as hf and as nanogpt, loaded by
# PyTorch (weights_torch_check.py) gives plait's logits within 1e-4
# relative. Needs a python with torch and numpy: PLAIT_TORCH_PYTHON names
# it (default Debian's /usr/bin/python3 with python3-torch); skipped (77)
# without them.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/torch_lib.sh"
PY=${PLAIT_TORCH_PYTHON:-/usr/bin/python3}
torch_python "import torch, numpy" "torch and numpy" "apt-get install python3-torch"
source "$(dirname "$0")/weights_lib.sh"
train trained run.steps=5 run.init_from=$HF parallel.plugin=hybrid parallel.dp=2 parallel.tp=2
for fmt in hf nanogpt; do
  "$PLAIT_BIN" export "$E2E_WORK/trained" --format $fmt --out "$E2E_WORK/exp_$fmt" >/dev/null || fail "export $fmt"
done
"$LOGITS" "$E2E_WORK/exp_hf" "$REF" "$E2E_WORK/plait_logits.safetensors" 2 4 32 24 50 || fail "weights_logits"
"$PY" "$PLAIT_SOURCE_DIR/tests/e2e/weights_torch_check.py" "$E2E_WORK/exp_hf" "$E2E_WORK/exp_nanogpt" "$REF" \
  "$E2E_WORK/plait_logits.safetensors" || fail "PyTorch's logits of the exports differ from plait's"
echo "weights in PyTorch OK"
