#!/usr/bin/env bash
# docs/gpu.md's table of a GPT-2 124M step on the cuda device is what
# scripts/gpu-step-estimate.py prints from the code's kernel calls today:
# a change to the step that leaves the table behind fails here (rerun
# `scripts/gpu-step-estimate.py --table` and paste its output).
set -euo pipefail
SRC=${PLAIT_SOURCE_DIR:?}
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
out=$(cd "$SRC" && python3 scripts/gpu-step-estimate.py --table)
missing=0
while IFS= read -r line; do
  [ -z "$line" ] && continue
  if ! grep -qxF -- "$line" "$SRC/docs/gpu.md"; then
    echo "FAIL: docs/gpu.md lacks: $line"
    missing=$((missing + 1))
  fi
done <<<"$out"
[ "$missing" -eq 0 ] || { echo "docs/gpu.md's step table is not the script's ($missing lines differ)"; exit 1; }
# the estimate moves with the code: the last variant takes a third of the unfused step's launches at most
launches() { sed -n 's/^| \*\*step\*\* | \([0-9]*\),.* | \([0-9]*\),.*/\1 \2/p' <<<"$out"; }
read -r before after < <(launches)
[ "$after" -lt $((before / 3)) ] || { echo "FAIL: launches $before unfused, $after in the last variant"; exit 1; }
echo "docs/gpu.md's step table is the script's ($(wc -l <<<"$out") lines); launches $before unfused, $after in the last variant"
