#!/usr/bin/env bash
# What gradient compression buys where the link is slow, and what it costs
# in loss (docs/multi-node.md, "Compressed gradients"). A benchmark, not a
# test: it prints tables to quote.
#
#   scripts/bench-compression.sh step [RATES] [ROUNDS] [STEPS] [LAYOUTS] [SCHEMES]
#     gpt-small on 2 "hosts" x 2 ranks (tests/e2e/netns.sh: network
#     namespaces on a bridge, each host's link limited with tc tbf), one
#     `plait train --nnodes 2` launcher per host; for each link rate, layout
#     (dp: dp 4 with adam; zero2: dp 4 with ZeRO-2) and scheme (the
#     gradients' wire format; under ZeRO GRADS/PARAMS also sets the
#     parameter gathers', e.g. onebit/bf16, which dp skips), the median
#     step time over steps 3..STEPS, rounds interleaved so every scheme sees
#     the same load (each round starts one scheme later), each round's
#     ratio to none beside the median's, the medians of compute_ms and of
#     the exposed comm_ms, the DP bytes a rank sends per step (dp_bytes, or
#     optim_bytes under ZeRO), and what host 1 sent over its link per step
#     (its eth0 counter, Ethernet frames whole, over steps 3..STEPS-1) with
#     the time that takes at the rate. Needs root; STEPS >= 4.
#     Defaults: "200mbit 1gbit" 3 10 "dp zero2" "none bf16 int8 onebit".
#   scripts/bench-compression.sh loss [STEPS] [SCHEMES] [LAYOUTS]
#     gpt-tiny, dp 4 on this host (layout dp, or zero2), STEPS steps (300) per
#     scheme: the training loss averaged over the last 10 steps and the final
#     validation loss, each beside float32's (none), with the relative gap.
#
# Environment: PLAIT_BIN (build/bin/plait), BENCH_OUT (runs/bench-compression),
# BENCH_ARGS (key=value overrides for every step run, e.g.
# "data.global_batch=4 parallel.dp.bucket_size=4M").
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIT_BIN=${PLAIT_BIN:-build/bin/plait}
OUT=${BENCH_OUT:-runs/bench-compression}
what=${1:-step}
fail() { echo "bench-compression: $*" >&2; exit 1; }
mkdir -p "$OUT"

# metric DIR COL FIRST: median of a metrics.csv column over rows FIRST..
metric() {
  awk -F, -v col="$2" -v first="$3" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == col) c = i; next }
    NR - 1 >= first { print $c }' "$1/metrics.csv" | sort -g |
    awk '{ v[NR] = $1 } END { print (NR ? v[int((NR + 1) / 2)] : "nan") }'
}

# the keys that choose a scheme for a layout: SCHEME is the gradients'
# wire format, or GRADS/PARAMS under ZeRO with its parameter gathers' too
# (bf16/bf16: both in bf16)
scheme_args() { # LAYOUT SCHEME
  local grads=${2%%/*} params=fp32
  [ "$grads" = "$2" ] || params=${2#*/}
  case $1 in
  dp) echo "parallel.dp.grad_compression=$grads" ;;
  zero*) echo "optim.plugin=$1 optim.$1.grad_compression=$grads optim.$1.param_gather=$params" ;;
  *) fail "unknown layout $1 (dp, zero1, zero2, zero3)" ;;
  esac
}
# a scheme the layout runs: GRADS/PARAMS only under ZeRO
runs_on() { [ "$1" != dp ] || [ "${2%%/*}" = "$2" ]; }
bytes_col() { [ "$1" = dp ] && echo dp_bytes || echo optim_bytes; }

if [ "$what" = step ]; then
  RATES=${2:-200mbit 1gbit} ROUNDS=${3:-3} STEPS=${4:-10} LAYOUTS=${5:-dp zero2} SCHEMES=${6:-none bf16 int8 onebit}
  [ "$STEPS" -ge 4 ] || fail "step needs STEPS >= 4 (the medians start at step 3)"
  read -r -a EXTRA <<<"${BENCH_ARGS:-}"
  # netns.sh removes what it made through at_exit (tests/e2e/lib.sh's, for tests)
  at_exit() { trap "$1" EXIT; }
  # shellcheck source=../tests/e2e/netns.sh
  source tests/e2e/netns.sh
  TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
  PORT=29800
  echo "# gpt-small, 2 hosts x 2 ranks (dp 4), $STEPS steps per run (median over steps 3..), $ROUNDS rounds," \
    "schemes interleaved (each round starts one scheme later)${BENCH_ARGS:+; extra: $BENCH_ARGS}"
  echo "# load before: $(uptime)"
  data=$OUT/step.txt.$$
  read -r -a schemes <<<"$SCHEMES"
  ns=${#schemes[@]}
  for rate in $RATES; do
    netns_up 2 "$rate"
    for ((round = 1; round <= ROUNDS; round++)); do
      for layout in $LAYOUTS; do
        for ((k = 0; k < ns; k++)); do
          z=${schemes[$(((k + round - 1) % ns))]}
          runs_on "$layout" "$z" || continue
          PORT=$((PORT + 1))
          dir=$OUT/step-$rate-$layout-${z//\//+}-r$round
          rm -rf "$dir"
          pids=()
          for i in 0 1; do
            # shellcheck disable=SC2046
            on_host $i env MASTER_ADDR="$(host_addr 0)" MASTER_PORT=$PORT PLAIT_JOB_TOKEN="$TOKEN" \
              "$PLAIT_BIN" train configs/gpt-small.ini --nnodes 2 --node-rank $i run.out_dir="$dir" \
              run.steps="$STEPS" run.eval_every=0 run.ckpt_every=0 run.progress=off comm.timeout=300 \
              parallel.dp=4 $(scheme_args "$layout" "$z") "${EXTRA[@]}" >"$dir.h$i.out" 2>&1 &
            pids+=($!)
          done
          # host 1's link counter when steps 2 and STEPS - 1 are in metrics.csv
          # (the last step's row follows the final checkpoint and evaluation):
          # the bytes of steps 3..STEPS-1, without start-up and the end; read inside the host by one loop of shell builtins (an
          # `ip netns exec` per reading would lag the rows by a loaded machine's
          # process start-up)
          ip netns exec "${NETNS_P}h1" bash -c 'csv=$1 steps=$2 tx=() n=0
            while [ ${#tx[@]} -lt 2 ]; do
              n=0; [ -f "$csv" ] && while IFS= read -r _; do n=$((n + 1)); done <"$csv"
              if { [ ${#tx[@]} -eq 0 ] && [ $n -ge 3 ]; } || { [ ${#tx[@]} -eq 1 ] && [ $n -ge "$steps" ]; }; then
                read -r b </sys/class/net/eth0/statistics/tx_bytes; tx+=("$b")
              else sleep 0.02; fi
            done
            echo "${tx[*]}"' _ "$dir/metrics.csv" "$STEPS" >"$dir.tx" &
          sampler=$!
          for p in "${pids[@]}"; do wait "$p" || fail "$dir failed: $(tail -n 3 "$dir".h*.out)"; done
          sleep 0.1
          kill "$sampler" 2>/dev/null || true
          wait "$sampler" 2>/dev/null || true
          read -r -a tx <"$dir.tx" || true
          [ ${#tx[@]} -eq 2 ] || fail "$dir: no link counter for steps 3..$((STEPS - 1)) (metrics.csv: $(wc -l <"$dir/metrics.csv") lines)"
          echo "$rate $layout $z $round $(metric "$dir" step_ms 3) $(metric "$dir" "$(bytes_col "$layout")" 3)" \
            "$(metric "$dir" compute_ms 3) $(metric "$dir" comm_ms 3) $(((tx[1] - tx[0]) / (STEPS - 3)))" >>"$data"
        done
      done
    done
    netns_down
  done
  echo "# load after: $(uptime)"
  # the table: per (rate, layout, scheme) each round's step time, the
  # median, and the ratio to none (per round, and of the medians); the
  # medians of compute and exposed communication; the bytes a rank sends,
  # and what host 1 sent over its link per step with the time that takes at
  # the rate (what communication costs if nothing else does)
  med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
  col() { pick "$1" | awk -v c="$2" '{ print $c }'; }
  printf "%-8s %-6s %-11s %-22s %7s %6s %-22s %8s %7s %8s %8s %8s\n" rate layout scheme "step ms per round" median \
    "x none" "x none per round" compute comm "MB sent" "link MB" "link ms"
  for rate in $RATES; do
    bits=$(echo "$rate" | awk '{ v = $1 + 0; u = tolower($1); sub(/^[0-9.]+/, "", u)
      print v * (u ~ /^g/ ? 1e9 : u ~ /^m/ ? 1e6 : u ~ /^k/ ? 1e3 : 1) }')
    for layout in $LAYOUTS; do
      for z in $SCHEMES; do
        runs_on "$layout" "$z" || continue
        pick() { awk -v r="$rate" -v l="$layout" -v z="$1" '$1 == r && $2 == l && $3 == z' "$data"; }
        per=$(col "$z" 5 | awk '{ printf "%s%.0f", (NR > 1 ? " / " : ""), $1 }')
        ratios=$(paste <(col none 5) <(col "$z" 5) | awk '{ printf "%s%.2f", (NR > 1 ? " / " : ""), $1 / $2 }')
        m=$(col "$z" 5 | med) mn=$(col none 5 | med) link=$(col "$z" 9 | med)
        printf "%-8s %-6s %-11s %-22s %7.0f %6.2f %-22s %8.0f %7.0f %8.2f %8.2f %8.0f\n" "$rate" "$layout" "$z" "$per" \
          "$m" "$(awk -v a="$mn" -v b="$m" 'BEGIN { print a / b }')" "$ratios" "$(col "$z" 7 | med)" \
          "$(col "$z" 8 | med)" "$(col "$z" 6 | med | awk '{ print $1 / 1048576 }')" \
          "$(awk -v b="$link" 'BEGIN { print b / 1e6 }')" "$(awk -v b="$link" -v r="$bits" 'BEGIN { print 8e3 * b / r }')"
      done
    done
  done
  mv "$data" "$OUT/step.txt"
  exit 0
fi

if [ "$what" = loss ]; then
  STEPS=${2:-300} SCHEMES=${3:-none bf16 int8 onebit} LAYOUTS=${4:-dp}
  echo "# gpt-tiny, dp 4 on this host, $STEPS steps per scheme; load before: $(uptime)"
  printf "%-7s %-11s %14s %12s %10s %12s\n" layout scheme "train loss" "x none" "val loss" "x none"
  for layout in $LAYOUTS; do
    for z in $SCHEMES; do
      runs_on "$layout" "$z" || continue
      dir=$OUT/loss-$layout-${z//\//+}
      rm -rf "$dir"
      # shellcheck disable=SC2046
      "$PLAIT_BIN" train configs/gpt-tiny.ini run.out_dir="$dir" run.steps="$STEPS" run.eval_every="$STEPS" \
        run.ckpt_every=0 run.progress=off parallel.dp=4 $(scheme_args "$layout" "$z") >"$dir.out" 2>&1 ||
        fail "$dir failed: $(tail -n 3 "$dir.out")"
      tr=$(awk -F, -v s="$STEPS" 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next }
        $c["step"] > s - 10 { x += $c["loss"]; n++ } END { printf "%.4f", x / n }' "$dir/metrics.csv")
      va=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["val_loss"] != "" { v = $c["val_loss"] }
        END { printf "%.4f", v }' "$dir/metrics.csv")
      [ "$z" = none ] && { ntr=$tr; nva=$va; }
      printf "%-7s %-11s %14s %+11.2f%% %10s %+11.2f%%\n" "$layout" "$z" "$tr" \
        "$(awk -v a="$tr" -v b="${ntr:-$tr}" 'BEGIN { print 100 * (a - b) / b }')" "$va" \
        "$(awk -v a="$va" -v b="${nva:-$va}" 'BEGIN { print 100 * (a - b) / b }')"
    done
  done
  echo "# load after: $(uptime)"
  exit 0
fi
fail "usage: scripts/bench-compression.sh step|loss ..."
