#!/usr/bin/env bash
# Configuration from the environment as a user meets it: the command line
# beats PLAIT_<SECTION>_<KEY>, which beats the file, for the plugin choice
# (which decides the sections declared) as for any other key.
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
echo "config env OK"
