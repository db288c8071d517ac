#!/usr/bin/env bash
# Measured bubble and activation memory of the schedules, pp = 4,
# m = 8 micro-batches: metrics.csv holds each stage's idle time
# (idle_ms_stage0..3: the pipeline phase's span pipe_span_ms minus the
# stage's busy time), the measured idle share (bubble_measured, the mean over
# stages of idle / span) and the schedule's formula (bubble_formula:
# (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v*m+p-1) for interleaved with
# m >= p, (p-1)/(3m+p-1) for zb1); rank 0 ends with the measured share
# beside the formula.
#
# The measured share is checked against the formula: [run]
# debug_compute_sleep_ms = F makes every FORWARD of a chunk take F ms more
# and every BACKWARD 2F (each half of zb1's split backward F), asleep, so
# 4 ranks on 2 busy cores do not contend
# and the schedule's timing dominates. The formula is what tests/pp's
# simulator measures for these lists (idle = (p-1) + (v-1)·max(0, p-m)
# chunk-steps, checked there for tF:tB = 1:2 among others); the tolerance
# covers the real model's compute and the messages, a few ms per step.
# F = 40 ms keeps them small beside the sleeps even on a loaded machine (at
# 20 ms the shares drifted past the tolerance at load 10 on 2 cores), so
# the four schedules' runs go side by side.
#
# Activation memory per rank (memory.csv): 1F1B holds p - s micro-batches on
# stage s where GPipe holds all m, so every stage's activations are smaller
# under 1F1B; the interleaved schedule holds at most p - s + (v-1)p
# chunk-micro-batches of half a stage each (8 x 1/2 < 8 at s = 0), also
# below GPipe. zb1 holds p micro-batches on every stage, as many as 1F1B's
# stage 0 (p/(p-s) times 1F1B's on stage s), each with two residual-stream
# gradients per block more for the weight halves: per micro-batch held, a
# stage's activations stay within 20% of 1F1B's.
source "$(dirname "$0")/lib.sh"
SLEEP_MS=40 TOL=0.03 STEPS=6
B="run.steps=$STEPS parallel.plugin=hybrid parallel.pp=4 data.micro_batch=1 model.n_layer=6"
B="$B run.debug_compute_sleep_ms=$SLEEP_MS"
# the four runs side by side: their ranks are asleep nearly all the time
train gpipe $B parallel.pp.schedule=gpipe &
train 1f1b  $B parallel.pp.schedule=1f1b &
train inter $B parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2 &
train zb1   $B parallel.pp.schedule=zb1 &
joined

# near NAME WHAT GOT WANT: |GOT - WANT| <= TOL (shares as fractions).
near() {
  awk -v g="$3" -v w="$4" -v t="$TOL" 'BEGIN { d = g - w; if (d < 0) d = -d; exit !(d <= t) }' ||
    fail "$1: $2 is $3, the formula gives $4 (tolerance $TOL)"
}

check() { # NAME FORMULA-VALUE FORMULA-TEXT
  local n=$1 want=$2 csv="$E2E_WORK/$1/metrics.csv" line
  [ "$(column "$n" bubble_formula | sort -u)" = "$want" ] ||
    fail "$n: bubble_formula $(column "$n" bubble_formula | sed -n 1p), want $want"
  head -n 1 "$csv" | grep -q idle_ms_stage4 && fail "$n: a fifth stage column"
  [ "$(column "$n" pipe_span_ms | wc -l)" = "$STEPS" ] || fail "$n: pipe_span_ms missing"
  # Every row: bubble_measured is the mean over stages of idle / span (the
  # CSV keeps 6 significant digits), and every stage's idle is >= 0.
  awk -F, -v name="$n" '
    NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
    { span = $c["pipe_span_ms"]; mean = 0
      for (s = 0; s < 4; s++) { x = $c["idle_ms_stage" s]
        if (x == "" || x < 0 || x > span) { printf "%s step %d: idle_ms_stage%d = \"%s\", span %s\n", name, $c["step"], s, x, span; bad = 1 }
        mean += x / span / 4 }
      d = mean - $c["bubble_measured"]; if (d < 0) d = -d
      if (!(span > 0) || d > 1e-4) { printf "%s step %d: bubble_measured %s, mean of idle/span %.6f\n", name, $c["step"], $c["bubble_measured"], mean; bad = 1 } }
    END { exit bad }' "$csv" || fail "$n: bubble_measured is not the mean of the stages' idle share"
  # The steps after the first (which warms up): each stage's idle share and
  # their mean are the formula's.
  near "$n" "median bubble_measured" "$(median "$n" bubble_measured)" "$want"
  for s in 0 1 2 3; do
    near "$n" "stage $s's idle share" "$(awk -F, -v s="$s" '
      NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
      NR > 2 { idle += $c["idle_ms_stage" s]; span += $c["pipe_span_ms"] }
      END { printf "%.6f", idle / span }' "$csv")" "$want"
  done
  line=$(grep -E "^plait: pipeline idle measured [0-9.]+% .*expected pp=4 $3" "$E2E_WORK/$n.out") ||
    fail "$n: no measured-vs-formula line: $(grep 'pipeline idle' "$E2E_WORK/$n.out")"
  near "$n" "the end-of-run idle share" \
    "$(sed -E 's/.*idle measured ([0-9.]+)%.*/\1/' <<<"$line" | awk '{ print $1 / 100 }')" "$want"
  echo "$n: ${line#plait: }"
}
check gpipe 0.272727 "gpipe m=8: bubble \(p-1\)/\(m\+p-1\) = 27.3%"
check 1f1b  0.272727 "1f1b m=8: bubble \(p-1\)/\(m\+p-1\) = 27.3%"
check inter 0.157895 "interleaved v=2 m=8: bubble \(p-1\)/\(v\*m\+p-1\) = 15.8%"
check zb1   0.111111 "zb1 m=8: bubble \(p-1\)/\(3m\+p-1\) = 11.1%"
for s in 0 1 2 3; do
  g=$(mem gpipe $s activation_bytes) f=$(mem 1f1b $s activation_bytes)
  [ "$f" -lt "$g" ] || fail "stage $s: 1F1B holds $f activation bytes, GPipe $g"
  [ "$(mem inter $s activation_bytes)" -lt "$g" ] ||
    fail "stage $s: interleaved holds $(mem inter $s activation_bytes) activation bytes, GPipe $g"
  echo "stage $s activations: gpipe $g B, 1f1b $f B, interleaved $(mem inter $s activation_bytes) B"
done
for s in 0 1 2 3; do
  z=$(mem zb1 $s activation_bytes) f=$(mem 1f1b $s activation_bytes)
  awk -v z="$z" -v f="$f" -v s="$s" 'BEGIN { exit !(z / 4 <= 1.2 * f / (4 - s)) }' ||
    fail "stage $s: zb1 holds $z activation bytes for 4 micro-batches, 1F1B $f for $((4 - s))"
  echo "stage $s activations: 1f1b $f B ($((4 - s)) micro-batches), zb1 $z B (4)"
done
echo "pp bubble OK: measured $(median gpipe bubble_measured) / $(median 1f1b bubble_measured) / $(median inter bubble_measured) / $(median zb1 bubble_measured) (gpipe / 1f1b / interleaved / zb1)"
