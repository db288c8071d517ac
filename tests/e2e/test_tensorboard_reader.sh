#!/usr/bin/env bash
# TensorBoard's own reader (its EventAccumulator) loads a run's event
# files: every metrics column as a scalar tag, the loss at each step as
# metrics.csv has it. Needs a python with the tensorboard package
# (PLAIT_TB_PYTHON, default python3; PyPI's, outside the product's
# dependencies): skipped, saying so, without one.
source "$(dirname "$0")/lib.sh"
py=${PLAIT_TB_PYTHON:-python3}
if ! "$py" -c 'import tensorboard' 2>/dev/null; then
  echo "SKIP: $py cannot import tensorboard (pip install tensorboard in a venv, then PLAIT_TB_PYTHON=venv/bin/python)"
  exit 77
fi
train tb run.steps=4 run.tensorboard=true
"$py" - "$E2E_WORK/tb" <<'PY' || fail "TensorBoard did not read the run as metrics.csv has it"
import csv, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
run = sys.argv[1]
ea = EventAccumulator(run + "/tensorboard", size_guidance={"scalars": 0})
ea.Reload()
rows = list(csv.DictReader(open(run + "/metrics.csv")))
tags = set(ea.Tags()["scalars"])
cols = {c for r in rows for c, v in r.items() if c != "step" and v != ""}
if tags != cols:
    sys.exit("tags %s, columns %s" % (sorted(tags), sorted(cols)))
loss = [(e.step, e.value) for e in ea.Scalars("loss")]
want = [(int(r["step"]), float(r["loss"])) for r in rows]
if [s for s, _ in loss] != [s for s, _ in want] or any(abs(a - b) > 1e-6 * abs(b) for (_, a), (_, b) in zip(loss, want)):
    sys.exit("loss %s, csv %s" % (loss, want))
print("TensorBoard read %d tags, loss at steps %s" % (len(tags), [s for s, _ in loss]))
PY
