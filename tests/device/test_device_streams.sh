#!/usr/bin/env bash
# Overlap on the device's two streams (ABI 1.4, plait/device.h), checked on
# the sim test device, whose compute stream runs late (a read that does not
# wait for its event sees stale data):
#  1. dp 2 reduces its gradient buckets on the communication side after
#     per-bucket events, bit-identical to the cpu device, with 1 bucket and
#     with 35; the model's thread synchronises with the device the same
#     number of times per step whatever the bucket count (no host
#     synchronisation per bucket; at most 2 a step: the loss and the
#     gradient norm), the staging waits once per bucket for its event (on
#     its own thread) and never copies on the compute stream.
#  2. The ready events the core records itself (a ZeRO-3 gather names
#     none) come from its event pool: after the first step a run creates
#     no device event (22 a step and rank without the pool), and none is
#     left alive at close. ZeRO-3's per-layer hooks do not synchronise the
#     model's thread with the device (the same count a step with 2 and 4
#     layers).
#  2b. One rank with adam: one host synchronisation a step, the loss read
#     (the gradient norm and clipping stay on the device: sumsq_clip and
#     adamw_multi, ABI 1.7), bit-identical to the cpu device.
#  3. A device plugin built against ABI 1.3 (sim13: no events) still loads
#     and trains bit-identically: staging follows its compute stream.
#  4. With the sim's waits switched off (PLAIT_SIM_DEBUG_SKIP_WAITS), dp 2
#     (gradient buckets) and dp 2 with zero3 (parameter gathers) go wrong
#     (other losses, or a stop on a non-finite norm where a gather read a
#     buffer never written): the events carry the ordering, and this test
#     would catch a dropped one.
# (test_device_layouts runs every layout, pp 2 and ZeRO among them, on the
# same late-running sim.)
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
S="run.eval_every=0 run.ckpt_every=0 run.progress=off parallel.dp=2"

# total FILE KEY: KEY summed over the ranks' lines of a sim stats file
total() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$1" | awk '{ t += $1 } END { print t + 0 }'; }
# per_step B KEY: KEY per step and rank with bucket size B (3 steps minus 2, over 2 ranks)
per_step() {
  local d=$(( $(total "$E2E_WORK/stats-$1-3" "$2") - $(total "$E2E_WORK/stats-$1-2" "$2") ))
  [ $(( d % 2 )) = 0 ] || fail "bucket_size $1: $2 grew by $d over 2 ranks in a step: not the same on both"
  echo $(( d / 2 ))
}

train cpu $S run.steps=3 device.plugin=cpu
train cpu_zero3 $S run.steps=3 device.plugin=cpu optim.plugin=zero3

for b in 25M 4K; do
  for steps in 2 3; do
    rm -f "$E2E_WORK/stats-$b-$steps"
    PLAIT_SIM_STATS="$E2E_WORK/stats-$b-$steps" train "sim-$b-$steps" $S run.steps=$steps device.plugin=sim \
      parallel.dp.bucket_size=$b run.log_level=info,dp=debug
    [ "$(wc -l <"$E2E_WORK/stats-$b-$steps")" = 2 ] || fail "sim stats of $b/$steps: $(cat "$E2E_WORK/stats-$b-$steps")"
  done
  same_losses cpu "sim-$b-3" 0
  buckets=$(sed -n 's/.*dp debug: \([0-9]*\) gradient bucket(s).*/\1/p' "$E2E_WORK/sim-$b-3.out" | head -n 1)
  [ -n "$buckets" ] || fail "no bucket count in sim-$b-3.out"
  # per step and rank: the difference between 3 and 2 steps
  syncs=$(per_step $b model_syncs) waits=$(per_step $b other_event_syncs)
  compute_copies=$(total "$E2E_WORK/stats-$b-3" other_compute_copies)
  echo "bucket_size $b: $buckets bucket(s); per step and rank: $syncs host synchronisation(s) of the model's thread, $waits event wait(s) of the staging; compute-stream copies off the model's thread: $compute_copies"
  [ "$waits" = "$buckets" ] || fail "bucket_size $b: the staging waited for $waits events a step, not one per bucket ($buckets)"
  [ "$compute_copies" = 0 ] || fail "bucket_size $b: the staging copied on the compute stream ($compute_copies)"
  [ "$syncs" -ge 1 ] && [ "$syncs" -le 2 ] || fail "bucket_size $b: $syncs host synchronisations a step (1 or 2: loss, norm)"
  eval "syncs_$b=\$syncs"
done
# shellcheck disable=SC2154 # set by the eval above
[ "$syncs_25M" = "$syncs_4K" ] || fail "host synchronisations a step depend on the bucket count: $syncs_25M (1 bucket) vs $syncs_4K"

for steps in 2 3; do
  for l in "zero3|" "zero3-l2|model.n_layer=2"; do
    rm -f "$E2E_WORK/stats-${l%%|*}-$steps"
    # shellcheck disable=SC2086 # the override (or none) is one word
    PLAIT_SIM_STATS="$E2E_WORK/stats-${l%%|*}-$steps" train "sim-${l%%|*}-$steps" $S run.steps=$steps \
      device.plugin=sim optim.plugin=zero3 ${l#*|}
  done
done
same_losses cpu_zero3 sim-zero3-3 0
# ZeRO-3's per-layer hooks never synchronise the model's thread with the
# device: its synchronisations a step are the same with 2 layers as with 4
# (a host transport's gathered bytes still arrive through the host, so the
# hook waits for the request there; docs/gpu.md, "Coming back")
sync4=$(( $(per_step zero3 model_syncs) + $(per_step zero3 model_event_syncs) ))
sync2=$(( $(per_step zero3-l2 model_syncs) + $(per_step zero3-l2 model_event_syncs) ))
echo "zero3: $sync4 host synchronisation(s) of the model's thread a step with 4 layers, $sync2 with 2"
[ "$sync4" = "$sync2" ] && [ "$sync4" -le 2 ] ||
  fail "zero3: the model's thread synchronised with the device $sync4 times a step with 4 layers, $sync2 with 2"
creates=$(per_step zero3 event_creates) live=$(total "$E2E_WORK/stats-zero3-3" events_live)
echo "zero3: $(total "$E2E_WORK/stats-zero3-3" event_creates) device events created in 3 steps on 2 ranks, $creates a step and rank after the first, $live alive at close"
[ "$creates" = 0 ] || fail "zero3: $creates device events created a step and rank (the core's ready events are not pooled)"
[ "$live" = 0 ] || fail "zero3: $live device events still alive when the device closed"

# one rank, adam: the norm never comes to the host
ONE="run.eval_every=0 run.ckpt_every=0 run.progress=off"
train cpu_one $ONE run.steps=3 device.plugin=cpu
for steps in 2 3; do
  rm -f "$E2E_WORK/stats-one-$steps"
  PLAIT_SIM_STATS="$E2E_WORK/stats-one-$steps" train "sim-one-$steps" $ONE run.steps=$steps device.plugin=sim
done
same_losses cpu_one sim-one-3 0
one=$(( $(total "$E2E_WORK/stats-one-3" model_syncs) - $(total "$E2E_WORK/stats-one-2" model_syncs) ))
echo "one rank, adam: $one host synchronisation(s) of the model's thread a step"
[ "$one" = 1 ] || fail "one rank with adam: $one host synchronisations a step (want 1: the loss; the norm stays on the device)"

train sim13 $S run.steps=3 device.plugin=sim13
same_losses cpu sim13 0
grep -q "sim13 .*1\.3 " <("$PLAIT_BIN" plugins) || fail "sim13 is not listed as an ABI 1.3 device"
echo "sim13 (an ABI 1.3 device plugin, no events): loads, bit-identical to cpu"

for l in "dp2|" "dp2_zero3|optim.plugin=zero3"; do
  name=${l%%|*} args=${l#*|} ref=cpu
  [ -n "$args" ] && ref=cpu_zero3
  # Stale data is wrong data, or garbage (a pooled gather buffer never
  # written yet): either the losses differ or the run stops (a non-finite
  # norm). Only a run matching the cpu device's would mean a blind test.
  rm -rf "${E2E_WORK:?}/skip-$name"
  # shellcheck disable=SC2086 # args are separate overrides
  if ! PLAIT_SIM_DEBUG_SKIP_WAITS=1 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/skip-$name" $S run.steps=3 \
    device.plugin=sim $args >"$E2E_WORK/skip-$name.out" 2>&1; then
    echo "$name without waits: the run stopped: $(grep -m 1 'error' "$E2E_WORK/skip-$name.out")"
    continue
  fi
  if paste -d' ' <(column "$ref" loss) <(column "skip-$name" loss) | awk '$1 != $2 { d = 1 } END { exit d }'; then
    fail "$name: with the sim's waits switched off the run still matches the cpu device; the test cannot see a missing wait"
  fi
  echo "$name without waits: losses $(column "skip-$name" loss | tr '\n' ' ')differ from cpu's $(column "$ref" loss | tr '\n' ' ')"
done
