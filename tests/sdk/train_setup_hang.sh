#!/usr/bin/env bash
# usage: train_setup_hang.sh PLAIT PLUGIN_DIR SOURCE_DIR
# gpt-tiny at dp 2 over uds_inithang, uds_derivehang and uds_destroyhang
# (tests/sdk/broken_uds.c: init(), derive() or destroy() never returns, on
# every rank), [comm] timeout = 2. No rank can fail on its own, so nothing
# but the watchdog (core/commstate/comm_watchdog.h) ends the job: past the
# timeout and its grace (7.2 s) each rank ends, naming the plugin, the call,
# the communicator and the [setup] rule (a job that hung instead meets
# `timeout 100`).
. "$(dirname "$0")/train_common.sh"
for fn in init derive destroy; do
  name=uds_${fn}hang
  train $name comm.timeout=2 run.steps=1
  failed $name
  grep -q "rank [01] failed: the comm plugin '$name' has been inside $fn() for [0-9.]* s, past its timeout of 2 s (communicator '[a-z]*'); plait/comm.h \[setup\]" "$work/out-$name" ||
    fail "the job's end does not name $name's $fn() and the [setup] rule"
  echo "$fn hang: the watchdog ended the job in $took s, naming $name's $fn()"
done
