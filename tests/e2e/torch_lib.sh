# shellcheck shell=bash
# Shared by the tests against PyTorch and Hugging Face transformers
# (sourced after lib.sh): weights_logits, plait's logits of a model
# (LOGITS), transformers kept offline, and the python they run (PY).
LOGITS=$(dirname "$CKPT_DIFF")/weights_logits
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TRANSFORMERS_VERBOSITY=error

# torch_python IMPORT WHAT [HOW]: PY (when unset, PLAIT_TORCH_PYTHON, else
# python3) runs IMPORT, python code that imports WHAT; the test is skipped
# (77) when it cannot, saying HOW to get a python that can.
torch_python() {
  PY=${PY:-${PLAIT_TORCH_PYTHON:-python3}}
  if ! "$PY" -c "$1" 2>/dev/null; then
    echo "SKIP: $PY cannot import $2 (${3:-set PLAIT_TORCH_PYTHON to a python that can}); nothing was checked"
    exit 77
  fi
}
