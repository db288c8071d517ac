#!/usr/bin/env bash
# `plait trace plot FILE --out step.png` draws a dp 1 x tp 2 x pp 2 step
# (the planner's, `plait plan --explain --trace`: no run needed) as a PNG
# through gnuplot: compute, TP and PP communication and the bubble each in
# its colour, nothing cut off at the image's edges. Without gnuplot on
# PATH it says how to get it; an --out over a file that is not a PNG, or
# a trace that is missing, is refused and leaves no PNG.
source "$(dirname "$0")/lib.sh"
pred=$E2E_WORK/pred.json
"$PLAIT_BIN" plan "$CFG" --ranks 4 --explain "dp1 tp2 pp2" --trace "$pred" parallel.plugin=hybrid \
  >"$E2E_WORK/plan.out" 2>&1 || fail "plan --trace: $(tail -n 5 "$E2E_WORK/plan.out")"

# no gnuplot: a clear refusal (PATH without it; plait is called by its path)
out=$(PATH=/nonexistent "$PLAIT_BIN" trace plot "$pred" --out "$E2E_WORK/none.png" 2>&1) && fail "plot without gnuplot succeeded"
grep -q "no gnuplot is on PATH: install it (scripts/deps.sh installs gnuplot-nox" <<<"$out" || fail "without gnuplot: $out"
[ ! -e "$E2E_WORK/none.png" ] || fail "a PNG without gnuplot"
if ! command -v gnuplot >/dev/null; then
  echo "SKIP: gnuplot is not installed (scripts/deps.sh installs gnuplot-nox); only its absence was checked"
  exit 77
fi

"$PLAIT_BIN" trace plot "$pred" --out "$E2E_WORK/step.png" >"$E2E_WORK/plot.out" 2>&1 || fail "plot: $(cat "$E2E_WORK/plot.out")"
python3 - "$E2E_WORK/step.png" <<'PY' || fail "the plot's colours"
import sys
sys.path.insert(0, __import__("os").environ["PLAIT_SOURCE_DIR"] + "/tests/e2e")
from png_edges import decode
w, h, bpp, rows = decode(sys.argv[1])
seen = {}
for line in rows:
    for x in range(0, w * bpp, bpp):
        c = bytes(line[x:x + 3]).hex()
        seen[c] = seen.get(c, 0) + 1
want = {"compute": "4c72b0", "tp": "55a868", "pp": "c44e52", "bubble": "f0c808"}
missing = [k for k, c in want.items() if seen.get(c, 0) < 20]
assert not missing, f"no {missing} in the plot ({w}x{h})"
PY
python3 "$PLAIT_SOURCE_DIR/tests/e2e/png_edges.py" "$E2E_WORK/step.png" || fail "the plot is cut off"
cp "$E2E_WORK/step.png" "$E2E_WORK/first.png"
"$PLAIT_BIN" trace plot "$pred" --out "$E2E_WORK/step.png" >/dev/null 2>&1 || fail "plot over its own PNG"

echo "my notes" >"$E2E_WORK/notes.txt"
out=$("$PLAIT_BIN" trace plot "$pred" --out "$E2E_WORK/notes.txt" 2>&1) && fail "plot over a text file succeeded"
grep -q "notes.txt" <<<"$out" && grep -qx "my notes" "$E2E_WORK/notes.txt" || fail "plot over a text file: $out"
out=$("$PLAIT_BIN" trace plot "$E2E_WORK/missing.json" --out "$E2E_WORK/m.png" 2>&1) && fail "plot of a missing trace succeeded"
grep -q "missing.json" <<<"$out" && [ ! -e "$E2E_WORK/m.png" ] || fail "plot of a missing trace: $out"
ls "$E2E_WORK" | grep -q "^\.\?m\.png" && fail "a temporary PNG was left: $(ls -a "$E2E_WORK")"
echo "trace plot OK"
