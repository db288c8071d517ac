#!/usr/bin/env bash
# plait's encoding of a Llama-3-style tokenizer.json, and of a Qwen2-style
# one (an NFC normalizer, single digits), learned by Hugging Face
# tokenizers against tokenizers' own (llama3_hf_check.py). Needs a python
# with tokenizers: PLAIT_TOKENIZERS_PYTHON names it (else PLAIT_TORCH_PYTHON,
# else python3); skipped (77) without it.
PY=${PLAIT_TOKENIZERS_PYTHON:-${PLAIT_TORCH_PYTHON:-python3}}
if ! "$PY" -c "import tokenizers" 2>/dev/null; then
  echo "SKIP: $PY cannot import tokenizers (set PLAIT_TOKENIZERS_PYTHON to a python that can); nothing was checked"
  exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/plait-llama3-hf-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
timeout 120 "$PY" "$PLAIT_SOURCE_DIR/tests/tokenizer/llama3_hf_check.py" "$PLAIT_BIN" "$WORK/llama3" || exit 1
timeout 120 "$PY" "$PLAIT_SOURCE_DIR/tests/tokenizer/llama3_hf_check.py" "$PLAIT_BIN" "$WORK/qwen2" qwen2
