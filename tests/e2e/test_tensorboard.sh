#!/usr/bin/env bash
# [run] tensorboard: rank 0 writes one event file a run start into
# <out_dir>/tensorboard whose records check out (framing, masked CRC32C,
# the file version first) and whose scalars are metrics.csv's rows (every
# column but step, within float32's and the csv's six digits), read by a decoder of the
# standard library alone (tfevents_read.py); a resumed run adds a file of
# its own; a file in place of the folder is refused before step 1, naming
# it; off by default. TensorBoard's own reader: test_tensorboard_reader.
source "$(dirname "$0")/lib.sh"
read_events() { python3 "$PLAIT_SOURCE_DIR/tests/e2e/tfevents_read.py" "$@"; }

train tb -n 2 parallel.dp=2 run.steps=4 run.eval_every=2 run.ckpt_every=2 run.tensorboard=true
files=("$E2E_WORK"/tb/tensorboard/events.out.tfevents.*)
[ ${#files[@]} -eq 1 ] || fail "expected one event file from rank 0, found: ${files[*]}"
read_events "${files[0]}" >"$E2E_WORK/tb.events" || fail "the event file does not check out"
# each metrics.csv cell (but step) is a scalar of its step, within float32's rounding
python3 - "$E2E_WORK/tb/metrics.csv" "$E2E_WORK/tb.events" <<'PY' || fail "the scalars are not metrics.csv's rows"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
events = {}
for line in open(sys.argv[2]):
    step, tag, value = line.split()
    events[(int(step), tag)] = float(value)
want = 0
for r in rows:
    for tag, cell in r.items():
        if tag == "step" or cell == "":
            continue
        want += 1
        got = events.get((int(r["step"]), tag))
        if got is None or abs(got - float(cell)) > 1e-5 * abs(float(cell)) + 1e-30:
            sys.exit("step %s %s: csv %s, event %s" % (r["step"], tag, cell, got))
if want != len(events) or not any(t == "val_loss" for _, t in events):
    sys.exit("%d scalars in the events, %d cells in the csv" % (len(events), want))
print("%d scalars over %d steps match metrics.csv" % (want, len(rows)))
PY
train tb run.steps=6 run.tensorboard=true --resume
files=("$E2E_WORK"/tb/tensorboard/events.out.tfevents.*)
[ ${#files[@]} -eq 2 ] || fail "the resumed run did not add an event file of its own: ${files[*]}"
read_events "${files[@]}" | awk '$2 == "loss" { print $1 }' | tr '\n' ' ' | grep -qx '1 2 3 4 5 6 ' ||
  fail "the loss steps of both files: $(read_events "${files[@]}" | awk '$2 == "loss"')"

train plain run.steps=2
[ ! -e "$E2E_WORK/plain/tensorboard" ] || fail "tensorboard files written without [run] tensorboard"
mkdir -p "$E2E_WORK/blocked" && touch "$E2E_WORK/blocked/tensorboard"
train_refused blocked "[run] tensorboard: $E2E_WORK/blocked/tensorboard is in the way of the event files" \
  "run.out_dir=$E2E_WORK/blocked" run.steps=2 run.tensorboard=true
[ ! -e "$E2E_WORK/blocked/metrics.csv" ] || fail "a run whose event folder is blocked trained a step"
