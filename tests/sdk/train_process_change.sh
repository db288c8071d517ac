#!/usr/bin/env bash
# usage: train_process_change.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_chdir (init() changes the working directory to
# /), uds_setenv (init() sets PLAIT_COMM_TIMEOUT and PLAIT_JOB_TOKEN) and
# uds_loadenv (loading its file sets PLAIT_LOADED_BY; tests/sdk/broken_uds.c).
# Each run is refused right after the call, naming the plugin (or its file),
# the call and the change, and never a secret's value.
. "$(dirname "$0")/train_common.sh"
train uds_chdir run.steps=1
failed uds_chdir
grep -q "the comm plugin 'uds_chdir''s init() changed the process: the working directory from '$(pwd -P)' to '/'; a plugin must leave" "$work/out-uds_chdir" ||
  fail "the refusal does not name uds_chdir's init() and its change of directory"
train uds_setenv run.steps=1
failed uds_setenv
line=$(grep "the comm plugin 'uds_setenv''s init() changed the process: " "$work/out-uds_setenv" | head -n 1) ||
  fail "the refusal does not name uds_setenv's init()"
grep -q "PLAIT_COMM_TIMEOUT set to '1'" <<<"$line" || fail "the refusal does not name PLAIT_COMM_TIMEOUT's new value"
grep -q "PLAIT_JOB_TOKEN \(set\|changed\) (values\? not shown)" <<<"$line" || fail "the refusal does not name PLAIT_JOB_TOKEN"
! grep -rq hunter2 "$work" || fail "the secret PLAIT_JOB_TOKEN's value was shown"
train uds_loadenv run.steps=1
failed uds_loadenv
grep -q "libplait-comm-uds_loadenv.so: loading the plugin file changed the process: PLAIT_LOADED_BY set to 'uds_loadenv'" "$work/out-uds_loadenv" ||
  fail "the refusal does not name uds_loadenv's file and the variable its loading set"
echo "process change: each run refused after the call, naming the plugin and the change"
