#!/usr/bin/env bash
# A small mixture of experts beside the dense model of equal active
# parameters (docs/benchmarks.md, "Expert parallelism on 1, 2 and 4
# ranks"). A benchmark, not a test: it prints a table to quote.
#
#   scripts/bench-moe.sh [ROUNDS] [STEPS] [LOSS_STEPS]
#     configs/moe-tiny.ini (8 experts, top 2) at dp = ep = 1, 2 and 4, and
#     the gpt of the same shape whose MLP is as wide as a token's two
#     experts (configs/gpt-tiny.ini at n_embd 64, block_size 64, moe-tiny's
#     warmup), on the same ranks; ROUNDS interleaved rounds (6) of every
#     layout, STEPS steps each (40), the last 5 traced ([run] trace). Per
#     layout: the median over the rounds of the median tokens/s over steps
#     11..STEPS-5, and of the expert exchange's exposed share: per rank,
#     the union of its ep point-to-point spans (rows out and back) and its
#     row-count all-to-alls inside the traced steps, over their time (the
#     ranks' mean); moe-tiny has no shared expert, so nothing runs while
#     the rows travel and every such span is time the step's thread waits.
#     Then one process of each model for LOSS_STEPS steps (300, 512 tokens
#     a step): the last step's training and validation losses.
#
# Environment: PLAIT_BIN (build/bin/plait), BENCH_OUT (runs/bench-moe).
set -euo pipefail
cd "$(dirname "$0")/.."
PLAIT_BIN=${PLAIT_BIN:-build/bin/plait}
OUT=${BENCH_OUT:-runs/bench-moe}
ROUNDS=${1:-6} STEPS=${2:-40} LOSS_STEPS=${3:-300}
[ "$STEPS" -ge 20 ] || { echo "bench-moe: STEPS must be at least 20" >&2; exit 1; }
mkdir -p "$OUT"
RUN="run.eval_every=0 run.ckpt_every=0 run.steps=$STEPS run.trace=$((STEPS - 4)):$STEPS"
DENSE="configs/gpt-tiny.ini model.n_embd=64 model.block_size=64 optim.warmup_steps=30"
args() { # MODEL RANKS: the config and its layout
  if [ "$1" = moe ]; then echo "configs/moe-tiny.ini parallel.dp=$2 parallel.ep=$2"; else echo "$DENSE parallel.dp=$2"; fi
}
for round in $(seq "$ROUNDS"); do
  for n in 1 2 4; do
    for m in moe dense; do
      d=$OUT/$m-$n-r$round
      rm -rf "$d"
      echo "round $round: $m on $n ranks, load $(cut -d' ' -f1 /proc/loadavg)" >&2
      # shellcheck disable=SC2046,SC2086 # the words of the layout and RUN split on purpose
      "$PLAIT_BIN" train $(args $m $n) -n "$n" $RUN run.out_dir="$d" >"$d.out" 2>&1 ||
        { echo "bench-moe: $d failed: $(tail -n 2 "$d.out")" >&2; exit 1; }
    done
  done
done
for m in moe dense; do
  d=$OUT/$m-loss
  rm -rf "$d"
  echo "$m: $LOSS_STEPS steps on one process, load $(cut -d' ' -f1 /proc/loadavg)" >&2
  # shellcheck disable=SC2046,SC2086 # the words of the layout and RUN split on purpose
  "$PLAIT_BIN" train $(args $m 1) run.steps="$LOSS_STEPS" run.eval_every="$LOSS_STEPS" run.ckpt_every=0 \
    run.out_dir="$d" >"$d.out" 2>&1 || { echo "bench-moe: $d failed: $(tail -n 2 "$d.out")" >&2; exit 1; }
done
python3 - "$OUT" "$STEPS" <<'EOF'
import csv, glob, json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])

def exchange_share(path):
    """The ranks' mean share of the traced steps spent in the expert exchange."""
    t = json.load(open(path))
    ranks = {}
    for e in t['traceEvents'] if isinstance(t, dict) else t:
        if e.get('ph') != 'X':
            continue
        r = ranks.setdefault(e['pid'], ([], []))
        span = (e['ts'], e['ts'] + e['dur'])
        if e.get('cat') == 'step':
            r[0].append(span)
        elif (e.get('cat') == 'p2p' and e.get('args', {}).get('comm') == 'ep') or "experts' row counts" in e['name']:
            r[1].append(span)
    shares = []
    for step_spans, ex in ranks.values():
        if not step_spans:
            continue
        cut = sorted((max(a, s0), min(b, s1)) for a, b in ex for s0, s1 in step_spans if min(b, s1) > max(a, s0))
        total, end = 0.0, float('-inf')
        for a, b in cut:  # the union's length
            total += max(0.0, b - max(a, end))
            end = max(end, b)
        shares.append(total / sum(b - a for a, b in step_spans))
    return statistics.mean(shares)

print('| model | ranks (dp = ep) | tokens/s, median of the rounds (their range) | expert exchange, share of the step (range) |')
print('|---|---|---|---|')
for m in ('moe', 'dense'):
    for n in (1, 2, 4):
        tps, share = [], []
        for d in sorted(glob.glob('%s/%s-%d-r*/' % (out, m, n))):
            rows = list(csv.DictReader(open(d + 'metrics.csv')))
            tps.append(statistics.median(float(r['tokens_per_s']) for r in rows if 11 <= int(r['step']) <= steps - 5))
            share.append(exchange_share(d + 'trace.json'))
        print('| %s | %d | %.0f (%.0f to %.0f) | %.0f%% (%.0f%% to %.0f%%) |' % (
            m, n, statistics.median(tps), min(tps), max(tps), 100 * statistics.median(share), 100 * min(share),
            100 * max(share)))
for m in ('moe', 'dense'):
    last = list(csv.DictReader(open('%s/%s-loss/metrics.csv' % (out, m))))[-1]
    print('%s after %s tokens: loss %.4f, validation %.4f' % (m, last['tokens_seen'], float(last['loss']),
                                                              float(last['val_loss'])))
EOF
