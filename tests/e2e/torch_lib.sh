# shellcheck shell=bash
# Shared by the tests against PyTorch and Hugging Face transformers
# (sourced after lib.sh): weights_logits, plait's logits of a model
# (LOGITS), transformers kept offline, the python they run (PY), and the
# checks the mixture-of-experts families share.
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

# sharded_logits HF TOKENS SHAPE...: plait's logits of the transformers
# model in $E2E_WORK/HF and of its sharded save $E2E_WORK/HF-sharded,
# written to $E2E_WORK/plait_HF.safetensors and the same bits from both.
sharded_logits() {
  local hf=$1 tokens=$2
  shift 2
  ls "$E2E_WORK/$hf-sharded/model.safetensors.index.json" >/dev/null || fail "transformers wrote no sharded model"
  for v in "$hf" "$hf-sharded"; do
    "$LOGITS" "$E2E_WORK/$v" "$tokens" "$E2E_WORK/plait_$v.safetensors" "$@" ||
      fail "plait's logits of the transformers model ($v)"
  done
  cmp -s "$E2E_WORK/plait_$hf.safetensors" "$E2E_WORK/plait_$hf-sharded.safetensors" ||
    fail "the sharded save gives other logits than the single file"
}

# refused_keys HF TOKENS "SHAPE" KEY...: each $E2E_WORK/HF-KEY (HF's
# config.json with KEY changed) is refused by weights_logits naming KEY.
refused_keys() {
  local hf=$1 tokens=$2 shape=$3 key
  shift 3
  for key in "$@"; do
    # shellcheck disable=SC2086
    if "$LOGITS" "$E2E_WORK/$hf-$key" "$tokens" "$E2E_WORK/no.safetensors" $shape >"$E2E_WORK/no_$key.out" 2>&1; then
      fail "a model with $key set was read"
    fi
    grep -q "config.json: $key = " "$E2E_WORK/no_$key.out" || fail "unclear refusal of $key: $(cat "$E2E_WORK/no_$key.out")"
  done
}
