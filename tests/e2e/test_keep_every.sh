#!/usr/bin/env bash
# [run] keep_every: a run saving every step with keep_checkpoints = 2 and
# keep_every = 3 ends with the checkpoints of steps 3 and 6 and the newest
# two (6 and 7); without keep_every, the newest two alone; a run resumed
# from the kept step 3 trains as the straight run did (deterministic).
source "$(dirname "$0")/lib.sh"
S=(run.steps=7 run.ckpt_every=1 run.keep_checkpoints=2 run.deterministic=true)
ckpts() { ls -d "$E2E_WORK/$1"/ckpt-* | xargs -n1 basename | tr '\n' ' '; }

train every "${S[@]}" run.keep_every=3
[ "$(ckpts every)" = "ckpt-00000003 ckpt-00000006 ckpt-00000007 " ] || fail "keep_every = 3 kept: $(ckpts every)"
train recent "${S[@]}"
[ "$(ckpts recent)" = "ckpt-00000006 ckpt-00000007 " ] || fail "keep_checkpoints = 2 kept: $(ckpts recent)"
mkdir -p "$E2E_WORK/branch" && cp -r "$E2E_WORK/every/ckpt-00000003" "$E2E_WORK/branch/"
cp "$E2E_WORK/every/metrics.csv" "$E2E_WORK/branch/"
train branch "${S[@]}" --resume
same_losses every branch 0
echo "keep_every: steps 3 and 6 kept beside the newest two; a resume from step 3 retrains the same losses"
