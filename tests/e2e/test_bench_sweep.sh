#!/usr/bin/env bash
# `plait bench sweep` end to end on the tiny GPT (2 blocks, 4 heads, global
# batch 8): every valid layout of 2 ranks is measured once and appears once
# in the CSV; the table is ranked by measured tokens/s; the report's PNGs
# are PNG images; the predicted peak memory per rank is within 12% of the
# measured peak RSS on each layout; a second run continues from the CSV and
# measures nothing again; --repeat writes a row per run, shows the median run
# and the spread, and a larger --repeat later adds only the missing runs;
# without --csv or --report nothing is left behind;
# the split adds up to the step time and the plots keep their legends and
# names in view; with 3 ranks the invalid layouts are skipped with
# their reason and never started; `plait plan` lists the same layouts and
# says for each family that none fits --mem-limit; --max-minutes starts no layout after the
# limit; a cp layout is measured and its cp is in the CSV, a cp the sequence
# or the model cannot take is listed with why; with 5 ranks every layout is
# invalid and the sweep says why for each and exits non-zero.
source "$(dirname "$0")/lib.sh"
W=$E2E_WORK
rm -rf "$W/rep" "$W/rep3"* "$W/three"* "$W/five"* "$W/max"* "$W/zb"* "$W/cp"*
# Each layout's `plait bench train` reports MFU: with no [run] mfu_peak its
# rank 0 first measures the GEMM rate (about 4 s of CPU, against the
# layout's 0.1 s of steps), and on a busy machine measures it again at every
# run (train/mfu_peak.h). Nothing here checks MFU (test_progress and
# test_bench_train_device check the measurement), so every run is given the
# peak: far above what the tiny model reaches, so each MFU is a figure.
PEAK=run.mfu_peak=1000
sweep() { "$PLAIT_BIN" bench sweep "$CFG" --steps 2 --warmup 1 --repeat 1 $PEAK "$@"; }

sweep -n 2 --report "$W/rep" >"$W/sweep.out" 2>"$W/sweep.err" || { cat "$W/sweep.out" "$W/sweep.err"; fail "sweep of 2 ranks"; }
csv=$W/rep/sweep.csv
want="dp1 tp1 pp2 gpipe mb1 adam
dp1 tp1 pp2 1f1b mb1 adam
dp1 tp1 pp2 interleaved v2 mb1 adam
dp1 tp2 pp1 mb8 adam
dp2 tp1 pp1 mb4 adam"
got=$(awk -F, 'NR > 1 && $11 == "ok" { print $1 }' "$csv" | sort)
[ "$got" = "$(sort <<<"$want")" ] || fail "the CSV's measured layouts:
$got
expected:
$want"
# ranked: the table's tokens/s (third field of its rows) never rises
rows=$(awk '/^  [0-9]+ / { print }' "$W/sweep.out")
[ "$(wc -l <<<"$rows")" -eq 5 ] || fail "the table has not 5 rows: $rows"
awk -v prev=1e30 '{ for (i = 1; i <= NF; i++) if ($i ~ /^(adam|zero[123])$/) { t = $(i + 1); break }
  if (t + 0 > prev + 0) bad = 1; prev = t } END { exit bad }' <<<"$rows" || fail "the table is not ranked by tokens/s:
$rows"
grep -q "Spearman rho of tokens/s" "$W/sweep.out" || fail "no agreement line"
# the plots: PNG signature and a non-empty IHDR
for p in tokens split memory predicted; do
  f=$W/rep/$p.png
  [ -s "$f" ] || fail "$p.png missing"
  [ "$(od -An -tx1 -N8 "$f" | tr -d ' \n')" = "89504e470d0a1a0a" ] || fail "$p.png is not a PNG"
  w=$(od -An -tu1 -j16 -N4 "$f" | awk '{ print $1 * 16777216 + $2 * 65536 + $3 * 256 + $4 }')
  [ "$w" -gt 100 ] || fail "$p.png is $w pixels wide"
done
grep -q "!\[tokens/s per layout\](tokens.png)" "$W/rep/report.md" || fail "report.md does not show the plots"
# the split is one rank's one step: compute + comm + idle = ms/step (the
# CSV's 3 decimals of rounding), as the split plot stacks them
awk -F, 'NR > 1 && $11 == "ok" { d = $15 + $16 + $17 - $13; if (d < 0) d = -d
  if (d > 0.003) { printf "%s: %.3f + %.3f + %.3f ms against %.3f ms/step\n", $1, $15, $16, $17, $13; bad = 1 } }
  END { exit bad }' "$csv" >"$W/split.txt" || fail "the step split does not add up to the step time:
$(cat "$W/split.txt")"
# the legends sit beside the plots (no bar hides them) and no layout name
# is cut off at the image's edge
grep -q "^set key outside" "$W/rep/plots.gp" || fail "the plots' key is not outside the plot area"
if command -v python3 >/dev/null; then
  python3 "$PLAIT_SOURCE_DIR/tests/e2e/png_edges.py" "$W"/rep/{tokens,split,memory}.png || fail "a plot is cut off"
else
  echo "python3 not found: the PNGs' edges are not checked"
fi
# memory model against measurement
awk -F, 'NR > 1 { e = ($27 - $21) / $21; if (e < 0) e = -e; printf "%s: predicted %.1f MiB, measured %.1f MiB\n", $1, $27, $21; if (e > 0.12) bad = 1 }
  END { exit bad }' "$csv" >"$W/mem.txt" || fail "predicted memory off by more than 12%:
$(cat "$W/mem.txt")"
# activations by recompute mode: plan's prediction (config check) against
# what the model allocates (bench train's act_MB), and the modes differ
prev=1e30
for rc in none selective full; do
  pred=$("$PLAIT_BIN" config check "$CFG" model.recompute=$rc 2>&1 | awk '/rank +parameters/ { getline; print $5 }')
  meas=$("$PLAIT_BIN" bench train "$CFG" model.recompute=$rc $PEAK --steps 1 --warmup 1 2>&1 |
    awk '!/^#/ && NF > 5 { v = $(NF - 1) } END { print v }')
  # (config check prints one decimal: 0.05 MiB of rounding)
  awk -v p="$pred" -v m="$meas" -v prev="$prev" 'BEGIN { e = p - m; if (e < 0) e = -e; exit !(m > 0 && e <= 0.05 + 0.01 * m && p < prev) }' ||
    fail "recompute=$rc: predicted activations $pred MiB, measured $meas MiB (previous mode $prev)"
  prev=$pred
done
# an interrupted sweep continues from its CSV: nothing left to measure
sweep -n 2 --report "$W/rep" >"$W/again.out" 2>"$W/again.err" || fail "second sweep: $(cat "$W/again.err")"
grep -q "^sweep: 0 runs of 0 layouts measured" "$W/again.err" || fail "the second sweep measured again: $(cat "$W/again.err")"
[ "$(awk 'NR > 1' "$csv" | wc -l)" -eq 5 ] || fail "the CSV grew on the second sweep"

# repeats: each run is a CSV row; the table shows the median run and the
# spread of the runs; a repeat added later measures only the missing runs
sweep -n 2 --dp 2 --tp 1 --pp 1 --repeat 3 --csv "$W/rep3.csv" >"$W/rep3.out" 2>"$W/rep3.err" ||
  fail "sweep --repeat 3: $(cat "$W/rep3.err")"
[ "$(awk -F, 'NR > 1 && $11 == "ok" { print $28 }' "$W/rep3.csv" | tr '\n' ' ')" = "1 2 3 " ] ||
  fail "--repeat 3 did not write runs 1, 2, 3: $(cat "$W/rep3.csv")"
med=$(awk -F, 'NR > 1 { print $12 }' "$W/rep3.csv" | sort -n | sed -n 2p)
row=$(grep "^  1 .*dp2 tp1 pp1" "$W/rep3.out") || fail "no table row: $(cat "$W/rep3.out")"
awk -v m="$med" '{ for (i = 1; i <= NF; i++) if ($i == "adam") { t = $(i + 1); s = $(i + 2) } }
  END { exit !(t - m < 1 && m - t < 1 && s ~ /^[-+][0-9.]+\/[-+][0-9.]+%$/) }' <<<"$row" ||
  fail "the table does not show the median run $med and its spread: $row"
grep -q "^# 3 runs per layout" "$W/rep3.out" || fail "no note on the runs: $(cat "$W/rep3.out")"
sweep -n 2 --dp 2 --tp 1 --pp 1 --repeat 4 --csv "$W/rep3.csv" >"$W/rep4.out" 2>"$W/rep4.err" || fail "--repeat 4 after 3"
grep -q "^sweep: 1 run of 1 layout measured" "$W/rep4.err" || fail "a fourth run did not measure just one: $(cat "$W/rep4.err")"

# without --csv or --report nothing is left behind: the table is the result
mkdir -p "$W/cwd" "$W/tmp"
(cd "$W/cwd" && TMPDIR=$W/tmp "$PLAIT_BIN" bench sweep "$CFG" $PEAK --steps 1 --warmup 0 -n 2 --dp 2 --tp 1 --pp 1 \
  >"$W/bare.out" 2>"$W/bare.err") || fail "sweep without --csv: $(cat "$W/bare.err")"
grep -q "^  1 .*dp2 tp1 pp1" "$W/bare.out" || fail "sweep without --csv printed no table: $(cat "$W/bare.out")"
left=$(find "$W/cwd" "$W/tmp" -mindepth 1)
[ -z "$left" ] || fail "sweep without --csv left files: $left"

# 3 ranks: dp 3 (8 sequences) and tp 3 (4 heads) are invalid, and so is
# interleaving 3 stages x 2 chunks over 4 layers; only pp 3 gpipe and 1f1b run
sweep -n 3 --csv "$W/three.csv" >"$W/three.out" 2>"$W/three.err" || fail "sweep of 3 ranks: $(cat "$W/three.err")"
[ "$(grep -c '^# skipped: ' "$W/three.out")" -eq 3 ] || fail "not 3 skipped layouts: $(cat "$W/three.out")"
grep -q "^# skipped: dp1 tp3 pp1 .*n_head" "$W/three.out" || fail "tp 3 skipped without naming n_head: $(grep tp3 "$W/three.out")"
[ "$(ls "$W/three.csv.logs"/*.log | wc -l)" -eq 2 ] || fail "not exactly the 2 valid layouts ran: $(ls "$W/three.csv.logs")"

# plait plan lists the same layouts (-n is its own, not the launcher's)
"$PLAIT_BIN" plan "$CFG" -n 2 --axes dp,tp,pp,schedule --top all >"$W/plan.out" 2>"$W/plan.err" ||
  fail "plait plan: $(cat "$W/plan.err")"
planned=$(grep -E '^  [0-9]+ ' "$W/plan.out" | sed -E 's/^  [0-9]+ +//; s/ (adam|zero[123]) .*/ \1/' | sort)
[ "$planned" = "$(sort <<<"$want")" ] || fail "plait plan's layouts:
$planned"
if "$PLAIT_BIN" plan "$CFG" --ranks 5 >"$W/plan5.out" 2>&1; then fail "plait plan of 5 ranks exited 0"; fi

# --mem-limit: over it, nothing fits, and plan says so for each layout
# (by family: dp x tp x pp, each with its least memory)
if "$PLAIT_BIN" plan "$CFG" -n 2 --axes dp,tp,pp,schedule --mem-limit 1 >"$W/plan1.out" 2>&1; then
  fail "nothing fits 1 MiB, yet plan exited 0"
fi
[ "$(grep -c '^# does not fit: dp[12] tp[12] pp[12] ([0-9]* layouts*): none fits: the least memory' "$W/plan1.out")" -eq 3 ] ||
  fail "not 3 families over 1 MiB: $(cat "$W/plan1.out")"
# --max-minutes: the first layout starts, no other does
sweep -n 2 --max-minutes 0.0001 --csv "$W/max.csv" >"$W/max.out" 2>"$W/max.err" || fail "max-minutes sweep: $(cat "$W/max.err")"
[ "$(awk 'NR > 1' "$W/max.csv" | wc -l)" -eq 1 ] || fail "--max-minutes ran more than one layout"
[ "$(grep -c '^# not measured: .*--max-minutes' "$W/max.out")" -eq 4 ] || fail "the others are not listed: $(cat "$W/max.out")"

# the zero-bubble schedule, named: planned with its own bubble and measured
"$PLAIT_BIN" plan "$CFG" -n 2 --dp 1 --tp 1 --pp 2 --schedule 1f1b,zb1 >"$W/planzb.out" 2>&1 ||
  fail "plait plan --schedule zb1: $(cat "$W/planzb.out")"
grep -q "^  [12] .*dp1 tp1 pp2 zb1 mb[0-9]* adam" "$W/planzb.out" || fail "plait plan lists no zb1 layout: $(cat "$W/planzb.out")"
sweep -n 2 --dp 1 --tp 1 --pp 2 --schedule zb1 --csv "$W/zb.csv" >"$W/zb.out" 2>"$W/zb.err" || fail "sweep of zb1: $(cat "$W/zb.err")"
[ "$(awk -F, 'NR > 1 && $11 == "ok" { print $1 }' "$W/zb.csv")" = "dp1 tp1 pp2 zb1 mb1 adam" ] ||
  fail "the zb1 sweep did not measure its layout: $(cat "$W/zb.csv")"

# context parallelism: a cp layout measured, the prediction beside it, its
# cp in the CSV's last column; a sequence of 32 that does not split into
# 2cp = 6 chunks, and the MLP (no attention), listed as invalid with why;
# cp varies by itself where a cp rank keeps 4,096 tokens (block_size 8192),
# not for tiny's 32 (the first sweep's layouts above) nor for the MLP
sweep -n 2 --dp 1 --tp 1 --pp 1 --cp 2 --csv "$W/cp.csv" >"$W/cp.out" 2>"$W/cp.err" || fail "sweep of cp 2: $(cat "$W/cp.err")"
[ "$(head -n 1 "$W/cp.csv" | awk -F, '{ print $NF }')" = cp ] || fail "the CSV has no cp column: $(head -n 1 "$W/cp.csv")"
[ "$(awk -F, 'NR > 1 && $11 == "ok" { print $1 ";" $29 }' "$W/cp.csv")" = "dp1 tp1 pp1 cp2 mb8 adam;2" ] ||
  fail "the cp sweep did not measure dp1 tp1 pp1 cp2 with cp 2 in its row: $(cat "$W/cp.csv")"
grep "^  1 .*dp1 tp1 pp1 cp2 mb8 adam" "$W/cp.out" | awk -F'|' '{ split($2, p, " "); exit !(p[1] > 0 && p[2] > 0) }' ||
  fail "the cp row has no prediction beside it: $(cat "$W/cp.out")"
if sweep -n 3 --dp 1 --tp 1 --pp 1 --cp 3 --csv "$W/cp3.csv" >"$W/cp3.out" 2>&1; then fail "cp 3 of a sequence of 32 exited 0"; fi
grep -q "^# skipped: dp1 tp1 pp1 cp3 .*block_size = 32 does not split into 6" "$W/cp3.out" ||
  fail "cp 3 not skipped naming block_size and its 6 chunks: $(cat "$W/cp3.out")"
if sweep model.arch=mlp -n 2 --dp 1 --tp 1 --pp 1 --cp 2 --csv "$W/cpm.csv" >"$W/cpm.out" 2>&1; then
  fail "cp 2 of the MLP exited 0"
fi
grep -q "^# skipped: dp1 tp1 pp1 cp2 .*no attention to split" "$W/cpm.out" || fail "the MLP's cp 2 not skipped: $(cat "$W/cpm.out")"
# (nothing fits 1 MiB: the layouts are listed, none is run)
sweep model.block_size=8192 -n 2 --mem-limit 1 >"$W/cpl.out" 2>&1 || true
grep -q "^  [0-9]  *dp1 tp1 pp1 cp2 " "$W/cpl.out" || fail "block_size 8192: no cp 2 layout by default: $(cat "$W/cpl.out")"
sweep model.arch=mlp model.block_size=8192 -n 2 --mem-limit 1 >"$W/cplm.out" 2>&1 || true
grep -q "^  [0-9]  *dp2 tp1 pp1 " "$W/cplm.out" || fail "the MLP at block_size 8192 lists no layout: $(cat "$W/cplm.out")"
! grep -q " cp2 " "$W/cplm.out" || fail "the MLP's default axes vary cp: $(cat "$W/cplm.out")"

# 5 ranks: nothing is valid
if sweep -n 5 --csv "$W/five.csv" >"$W/five.out" 2>"$W/five.err"; then fail "an all-invalid sweep exited 0"; fi
grep -q "none of the .* layouts of 5 ranks is valid" "$W/five.err" || fail "no summary: $(cat "$W/five.err")"
[ "$(grep -c '^# skipped: ' "$W/five.out")" -ge 4 ] || fail "the reasons are missing: $(cat "$W/five.out")"
[ ! -e "$W/five.csv" ] || fail "an all-invalid sweep wrote a CSV"
echo "bench sweep OK: $(wc -l <<<"$rows") layouts ranked; $(tr '\n' ';' <"$W/mem.txt")"
