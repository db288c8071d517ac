#!/usr/bin/env bash
# `plait bench sweep --report DIR run.trace=2`: each layout's bench train
# writes its trace into a run directory of its own, and report.md links
# every measured layout's trace.json (a path from the report's folder that
# exists and that `plait trace summary` reads) under its rank in the
# table, with its picture (plait trace plot) when gnuplot is there.
source "$(dirname "$0")/lib.sh"
W=$E2E_WORK
rm -rf "$W/rep"
# [run] mfu_peak given: no layout's rank 0 measures the GEMM rate before its
# steps (seconds of CPU a run, again at every run on a busy machine:
# train/mfu_peak.h); nothing here reads MFU
sweep() {
  "$PLAIT_BIN" bench sweep "$CFG" -n 2 --axes dp,tp,pp --tp 1,2 --pp 1 --steps 1 --warmup 1 --repeat 1 run.mfu_peak=1000 "$@"
}
sweep --report "$W/rep" run.trace=2 >"$W/sweep.out" 2>&1 || fail "traced sweep: $(tail -n 20 "$W/sweep.out")"
n=$(awk -F, 'NR > 1 && $11 == "ok"' "$W/rep/sweep.csv" | wc -l)
[ "$n" -eq 2 ] || fail "measured $n layouts, not 2: $(cat "$W/rep/sweep.csv")"
links=$(sed -n 's/^- \([0-9]\+\), \(.*\): \[\(.*\)\](\(.*\))$/\1 \4/p' "$W/rep/report.md")
[ "$(wc -l <<<"$links")" -eq 2 ] || fail "report.md links $(wc -l <<<"$links") traces: $(cat "$W/rep/report.md")"
while read -r k path; do
  [ -f "$W/rep/$path" ] || fail "layout $k's trace $path is not there"
  "$PLAIT_BIN" trace summary "$W/rep/$path" >"$W/summary.out" 2>&1 || fail "layout $k's trace: $(cat "$W/summary.out")"
  if command -v gnuplot >/dev/null; then
    png=${path%trace.json}step.png
    grep -qF "]($png)" "$W/rep/report.md" && [ -s "$W/rep/$png" ] || fail "layout $k's picture $png"
  fi
done <<<"$links"
echo "trace sweep OK"
