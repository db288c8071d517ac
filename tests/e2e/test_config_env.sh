#!/usr/bin/env bash
# Configuration from the environment as a user meets it: the command line
# beats PLAIT_<SECTION>_<KEY>, which beats the file, for the plugin choice
# (which decides the sections declared) as for any other key; a misspelt
# variable is an error naming the variable to use, while the runtime's own
# PLAIT_ variables are never taken for config.
source "$(dirname "$0")/lib.sh"
P=$PLAIT_BIN
G=configs/gpt-tiny.ini
out=$E2E_WORK/out

# a plugin named only in the environment is never loaded when the command line names another
PLAIT_COMM_PLUGIN=nosuch $P config check $G comm.plugin=tcp >"$out" 2>&1 ||
  fail "the environment's comm plugin beat the command line's: $(cat "$out")"
PLAIT_COMM_PLUGIN=nosuch $P bench comm --op allreduce --min 4K --max 4K --iters 1 --warmup 0 comm.plugin=tcp \
  >"$out" 2>&1 || fail "bench comm: the environment's comm plugin beat the command line's: $(cat "$out")"

# the selected plugin's section is declared, and only that one
PLAIT_OPTIM_PLUGIN=zero1 $P config show $G optim.plugin=adam >"$out" 2>&1 || fail "config show: $(cat "$out")"
grep -Eq "^plugin = adam +; \[command line 'optim.plugin=adam'\]" "$out" || fail "adam not selected: $(cat "$out")"
! grep -q '^\[optim.zero1\]' "$out" || fail "zero1's section declared though the command line chose adam"
PLAIT_OPTIM_PLUGIN=adam $P config show $G optim.plugin=zero1 >"$out" 2>&1 || fail "config show: $(cat "$out")"
grep -q '^\[optim.zero1\]' "$out" || fail "zero1 chosen on the command line but its section is not declared"
# the environment beats the file
PLAIT_OPTIM_PLUGIN=zero1 $P config show $G >"$out" 2>&1 || fail "config show: $(cat "$out")"
grep -Eq "^plugin = zero1 +; \[environment PLAIT_OPTIM_PLUGIN\]" "$out" || fail "env did not beat the file: $(cat "$out")"
grep -q '^\[optim.zero1\]' "$out" || fail "zero1 chosen in the environment but its section is not declared"

# an ordinary key: the same order
PLAIT_OPTIM_LR=0.5 $P config show $G optim.lr=0.25 >"$out" 2>&1 || fail "config show: $(cat "$out")"
grep -Eq "^lr = 0.25 +; \[command line 'optim.lr=0.25'\]" "$out" || fail "[optim] lr: $(grep '^lr' "$out")"
PLAIT_OPTIM_LR=0.5 $P config show $G >"$out" 2>&1 || fail "config show: $(cat "$out")"
grep -Eq "^lr = 0.5 +; \[environment PLAIT_OPTIM_LR\]" "$out" || fail "[optim] lr: $(grep '^lr' "$out")"

# misspelt variables: exit 1, the variable, its section, the one meant
expect_error() { # WANT VAR=VALUE [plait args...]
  local want=$1 var=$2; shift 2
  if env "$var" $P config check $G "$@" >"$out" 2>&1; then fail "config check accepted $var: $(cat "$out")"; fi
  grep -qF "$want" "$out" || fail "$var: unexpected message: $(cat "$out")"
}
expect_error "environment PLAIT_OPTIM_LERNING_RATE: key 'lerning_rate' is not known in [optim]; did you mean PLAIT_OPTIM_LR?" \
  PLAIT_OPTIM_LERNING_RATE=1
expect_error "environment PLAIT_COMM_TCP_STREMS: key 'strems' is not known in [comm.tcp]; did you mean PLAIT_COMM_TCP_STREAMS?" \
  PLAIT_COMM_TCP_STREMS=2
# another plugin's section (zero1 while adam is selected) is checked, as it is in a file
PLAIT_OPTIM_ZERO1_BUCKET_SIZE=1M $P config check $G >"$out" 2>&1 || fail "a key of an unselected plugin: $(cat "$out")"
PLAIT_OPTIM_ZERO1_BUCKET_SIZE=1M $P bench comm --op allreduce --min 4K --max 4K --iters 1 --warmup 0 >"$out" 2>&1 ||
  fail "bench comm: a key of an unselected plugin: $(cat "$out")"
expect_error "environment PLAIT_OPTIM_ZERO1_BUKET_SIZE: key 'buket_size' is not known in [optim.zero1]; did you mean PLAIT_OPTIM_ZERO1_BUCKET_SIZE?" \
  PLAIT_OPTIM_ZERO1_BUKET_SIZE=1M

# every PLAIT_ variable the runtime reads itself is left alone (taken from the
# sources, so a new one is covered the day it is added)
vars=$(grep -rhoE '"PLAIT_[A-Z0-9_]+' core plugins | tr -d '"' | sort -u)
[ "$(echo "$vars" | wc -l)" -ge 10 ] || fail "found only these runtime variables in the sources: $vars"
for v in $vars; do
  value=1
  [ "$v" = PLAIT_LOG_LEVEL ] && value=info
  env "$v=$value" $P config check $G >"$out" 2>&1 || fail "$v=$value broke config check: $(cat "$out")"
  ! grep -q "environment $v" "$out" || fail "$v was taken for a config key: $(cat "$out")"
done
echo "config env OK"
