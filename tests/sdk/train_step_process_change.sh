#!/usr/bin/env bash
# usage: train_step_process_change.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2, a checkpoint every step, with optimizers whose 3rd
# step() changes the process (tests/sdk/broken_optim.c): zero_stepchdir
# moves every rank to another directory (the run's out_dir is relative),
# zero_stepenv sets a PLAIT_* setting and the job's token on rank 1. Each run
# fails at step 3 naming the step, the plugins its calls ran in and the
# change (never a secret's value), before anything of step 3 is written:
# no checkpoint of it, no metrics row where every rank's process changed
# (the row comes before the checkpoint: where only rank 1's changed, rank 0
# writes step 3's row), nothing in the directory moved to.
# A transport whose 20th isend() sets PLAIT_SENT_BY (tests/sdk/broken_uds.c,
# uds_sendenv) fails a run's set-up, and `plait bench comm` at the size
# whose collectives it ran in. `plait bench train` fails as train does, its
# other rank pointing to the one that failed.
. "$(dirname "$0")/train_common.sh"
# step_run PLUGIN [KEY=VALUE...]: 5 steps over optimizer PLUGIN, from the
# current directory; output in $work/out-PLUGIN, $rc its exit status.
step_run() {
  local plugin=$1
  shift
  rc=0
  PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" train "$src/configs/gpt-tiny.ini" "data.path=$src/data/corpus.txt" \
    parallel.dp=2 optim.plugin="$plugin" run.steps=5 run.ckpt_every=1 run.eval_every=0 run.progress=off "$@" \
    >"$work/out-$plugin" 2>&1 || rc=$?
  tail -n 3 "$work/out-$plugin"
  failed "$plugin"
}
# steps_kept RUN_DIR [ROWS]: checkpoints of steps 1 and 2, none of step 3,
# and metrics rows ROWS (default: of steps 1 and 2).
steps_kept() {
  [ -d "$1/ckpt-00000002" ] || fail "step 2's checkpoint is missing: $(ls "$1")"
  ! ls -d "$1"/ckpt-0000000[3-9]* >/dev/null 2>&1 || fail "a checkpoint of step 3 was saved: $(ls "$1")"
  [ "$(cut -d, -f1 "$1/metrics.csv" | tail -n +2 | tr '\n' ' ')" = "${2:-1 2 }" ] ||
    fail "metrics.csv holds other rows than ${2:-1 2 }: $(cut -d, -f1 "$1/metrics.csv" | tr '\n' ' ')"
}
plugins="'tcp' (comm), 'dp' (parallel), '%s' (optim), 'cpu' (device)"

mkdir "$work/here" "$work/elsewhere"
here=$(cd "$work/here" && pwd -P) elsewhere=$(cd "$work/elsewhere" && pwd -P)
(cd "$here" && BROKEN_CHDIR_TO=$elsewhere step_run zero_stepchdir run.out_dir=run)
# shellcheck disable=SC2059 # the plugins' list is the format
grep -qF "step 3: the step's calls into the plugins $(printf "$plugins" zero_stepchdir) changed the process: the working directory from '$here' to '$elsewhere'; a plugin must leave" \
  "$work/out-zero_stepchdir" || fail "the failure does not name step 3, the plugins and the change of directory"
[ -z "$(ls -A "$elsewhere")" ] || fail "the run wrote into the directory it was moved to: $(find "$elsewhere")"
steps_kept "$here/run"

step_run zero_stepenv "run.out_dir=$work/run-env"
# shellcheck disable=SC2059
# Rank 1 ends with exit status 1 ("rank 1 failed: ..."); under the
# sanitizers its leak check at exit can take past the launcher's grace and be
# cut by SIGTERM, which LeakSanitizer turns into SIGABRT ("rank 1 was killed
# by SIGABRT; its last error: ..."): either way the launcher must name the
# error rank 1 recorded.
line=$(grep -E "rank 1 (failed|was killed by SIG[A-Z]+; its last error): train: step 3: the step's calls into the plugins $(printf "$plugins" zero_stepenv | sed 's/[()]/\\&/g') changed the process: " \
  "$work/out-zero_stepenv") || fail "the launcher does not name rank 1's failure at step 3 with the plugins"
grep -q "PLAIT_STEP_SETTING set to '3'" <<<"$line" || fail "the failure does not name PLAIT_STEP_SETTING's new value"
grep -q "PLAIT_JOB_TOKEN \(set\|changed\) (values\? not shown)" <<<"$line" || fail "the failure does not name PLAIT_JOB_TOKEN"
! grep -rq hunter2 "$work" || fail "the secret PLAIT_JOB_TOKEN's value was shown"
# rank 0, whose process is intact, writes step 3's row (a step's row comes
# before its checkpoint) and learns of rank 1's failure at that checkpoint;
# no checkpoint holds step 3, so a resume drops the row and trains it again
steps_kept "$work/run-env" "1 2 3 "
# bench train ends as train does: rank 1 names the change, rank 0 points
# to rank 1 instead of reporting the connection it lost
rc=0
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" bench train "$src/configs/gpt-tiny.ini" "data.path=$src/data/corpus.txt" \
  parallel.dp=2 optim.plugin=zero_stepenv --steps 4 --warmup 1 >"$work/out-bench-train" 2>&1 || rc=$?
failed zero_stepenv
grep -q "rank 1 failed: bench train: step 3: the step's calls into the plugins .* changed the process: " \
  "$work/out-bench-train" || fail "bench train does not name rank 1's failure at step 3"
grep -q "bench train: step [34]: world rank 0 stopped after world rank 1 failed (its error names the cause)" \
  "$work/out-bench-train" || fail "bench train's rank 0 does not point to rank 1: $(tail -n 3 "$work/out-bench-train")"
! grep -q "closed the connection" "$work/out-bench-train" ||
  fail "bench train's rank 0 reports the lost connection instead of rank 1's cause"
train uds_sendenv run.steps=2
failed uds_sendenv
grep -qF "the run's set-up: its calls into the plugins 'uds_sendenv' (comm), 'dp' (parallel), 'adam' (optim), 'cpu' (device) changed the process: PLAIT_SENT_BY set to 'uds_sendenv'" \
  "$work/out-uds_sendenv" || fail "the set-up's failure does not name the plugins and the change"
rc=0
PLAIT_PLUGIN_PATH=$dir timeout 100 "$plait" bench comm -n 2 --op allreduce --min 4K --max 64K --iters 3 --warmup 1 \
  --comm uds_sendenv >"$work/out-bench" 2>&1 || rc=$?
failed uds_sendenv
grep -q "bench comm: [0-9]* bytes: the calls into the comm plugin 'uds_sendenv' changed the process: PLAIT_SENT_BY set to 'uds_sendenv'" \
  "$work/out-bench" || fail "bench comm's failure does not name the size, the plugin and the change: $(tail -n 2 "$work/out-bench")"
echo "a process changed in a step's calls: the run fails at that step, naming it, the plugins and the change"
