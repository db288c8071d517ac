#!/usr/bin/env bash
# onebit's error feedback across a resume, 2 ranks, deterministic, 12 steps:
#   6 steps and a resume to 12 give the losses and final checkpoint of the
#   12 straight steps bit for bit, under [parallel.dp] and [optim.zero2]
#   grad_compression (each rank's residuals are in the checkpoint), and
#   under int8, which keeps no error feedback (so the resume says nothing of it);
#   a resume on another dp starts the residuals at zero and says so once.
source "$(dirname "$0")/lib.sh"
D="run.steps=12 run.ckpt_every=6 run.deterministic=true parallel.plugin=hybrid parallel.dp=2 data.micro_batch=2"
for c in "dp parallel.dp.grad_compression=onebit" "zero2 optim.plugin=zero2 optim.zero2.grad_compression=onebit" \
  "int8 parallel.dp.grad_compression=int8"; do
  read -r name args <<<"$c"
  # shellcheck disable=SC2086
  train "${name}_straight" $D $args
  # shellcheck disable=SC2086
  train "${name}_split" $D $args run.steps=6
  # shellcheck disable=SC2086
  train "${name}_split" $D $args --resume
  same_losses "${name}_straight" "${name}_split" 0
  same_params "${name}_straight" "${name}_split" bits
  if [ "$name" = int8 ]; then
    ! grep -q "error feedback" "$E2E_WORK/${name}_split.out" || fail "int8: the resume spoke of error feedback it has none of"
  else
    grep -q "error feedback of compressed gradient reductions restored from checkpoint" "$E2E_WORK/${name}_split.out" ||
      fail "$name: the resume did not say it restored the error feedback: $(tail -n 5 "$E2E_WORK/${name}_split.out")"
  fi
  echo "$name: 6 + 6 steps equal 12 straight, bit for bit"
done

# the dp 2 checkpoint of step 6 resumed on dp 4: the residuals start at zero, said once
rm -rf "${E2E_WORK:?}/dp4" && mkdir -p "$E2E_WORK/dp4" && cp -r "$(ls -d "$E2E_WORK"/dp_split/ckpt-00000006)" "$E2E_WORK/dp4/"
# shellcheck disable=SC2086
train dp4 $D parallel.dp=4 data.micro_batch=2 parallel.dp.grad_compression=onebit --resume
n=$(grep -c "holds no error feedback for this layout (w4.dp4.tp1.pp1" "$E2E_WORK/dp4.out" || true)
[ "$n" = 1 ] || fail "dp 4 resume of a dp 2 checkpoint: the reset said $n times: $(tail -n 5 "$E2E_WORK/dp4.out")"
echo "compression resume OK"
