#!/usr/bin/env bash
# Measured bubble and activation memory of the schedules (issue 8), pp = 4,
# m = 8 micro-batches: metrics.csv holds each stage's idle time
# (idle_ms_stage0..3: the pipeline phase's span minus the stage's busy time),
# the measured idle share (bubble_measured) and the schedule's formula
# (bubble_formula: (p-1)/(m+p-1) for gpipe and 1f1b, (p-1)/(v*m+p-1) for
# interleaved); rank 0 ends with the measured share beside the formula.
# Timing is not asserted (2 shared cores), only that the figures are there
# and sane; the benchmark in the report compares them. Activation memory per
# rank (memory.csv): 1F1B holds p - s micro-batches on stage s where GPipe
# holds all m, so every stage's activations are smaller under 1F1B; the
# interleaved schedule holds at most p - s + (v-1)p chunk-micro-batches of
# half a stage each (8 x 1/2 < 8 at s = 0), also below GPipe.
source "$(dirname "$0")/lib.sh"
B="run.steps=6 parallel.plugin=hybrid parallel.pp=4 data.micro_batch=1 model.n_layer=6"
train gpipe $B parallel.pp.schedule=gpipe
train 1f1b  $B parallel.pp.schedule=1f1b
train inter $B parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2
check() { # NAME FORMULA-VALUE FORMULA-TEXT
  local n=$1
  [ "$(column "$n" bubble_formula | sort -u)" = "$2" ] || fail "$n: bubble_formula $(column "$n" bubble_formula | head -n 1), want $2"
  for s in 0 1 2 3; do
    column "$n" "idle_ms_stage$s" | awk 'NF == 0 || $1 < 0 { bad = 1 } END { exit bad || NR != 6 }' ||
      fail "$n: idle_ms_stage$s missing or negative"
  done
  head -n 1 "$E2E_WORK/$n/metrics.csv" | grep -q idle_ms_stage4 && fail "$n: a fifth stage column"
  column "$n" bubble_measured | awk '!($1 > 0 && $1 < 1) { bad = 1 } END { exit bad }' ||
    fail "$n: bubble_measured outside (0, 1)"
  grep -Eq "^plait: pipeline idle measured [0-9.]+% .*expected pp=4 $3" "$E2E_WORK/$n.out" ||
    fail "$n: no measured-vs-formula line: $(grep 'pipeline idle' "$E2E_WORK/$n.out")"
}
check gpipe 0.272727 "gpipe m=8: bubble \(p-1\)/\(m\+p-1\) = 27.3%"
check 1f1b  0.272727 "1f1b m=8: bubble \(p-1\)/\(m\+p-1\) = 27.3%"
check inter 0.157895 "interleaved v=2 m=8: bubble \(p-1\)/\(v\*m\+p-1\) = 15.8%"
for s in 0 1 2 3; do
  g=$(mem gpipe $s activation_bytes) f=$(mem 1f1b $s activation_bytes)
  [ "$f" -lt "$g" ] || fail "stage $s: 1F1B holds $f activation bytes, GPipe $g"
  [ "$(mem inter $s activation_bytes)" -lt "$g" ] ||
    fail "stage $s: interleaved holds $(mem inter $s activation_bytes) activation bytes, GPipe $g"
  echo "stage $s activations: gpipe $g B, 1f1b $f B, interleaved $(mem inter $s activation_bytes) B"
done
echo "pp bubble OK: measured $(median gpipe bubble_measured) / $(median 1f1b bubble_measured) / $(median inter bubble_measured) (gpipe / 1f1b / interleaved)"
