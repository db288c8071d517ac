#!/usr/bin/env bash
# Logging as a user meets it: lines of a multi-rank run carry [r<rank>] (on
# stderr and in each rank's log file), a single process has no prefix;
# PLAIT_LOG_LEVEL and [run] log_level (file, command line) filter by level
# and per component ('warn,tcp=debug'), PLAIT_LOG_LEVEL winning; a bad level
# is an error naming where it was set, a bad PLAIT_LOG_LEVEL a warning.
source "$(dirname "$0")/lib.sh"
P=$PLAIT_BIN
out=$E2E_WORK/log.out

# run NAME [env...] -- [train args...]: a 2-step train on 2 ranks, stderr + stdout in $out
run() {
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rm -rf "${E2E_WORK:?}/$name"
  env "${envs[@]}" "$P" train "$CFG" "run.out_dir=$E2E_WORK/$name" run.steps=2 parallel.dp=2 "$@" >"$out" 2>&1 ||
    fail "train $name failed: $(tail -n 20 "$out")"
}

# default (info): rank-prefixed info lines, no debug lines
run info --
grep -Eq '^\[r0\] +[0-9.]+ tcp: rank 0 uses interface' "$out" || fail "no [r0] tcp info line: $(cat "$out")"
grep -Eq '^\[r0\] +[0-9.]+ checkpoint: saved step 2' "$out" || fail "no [r0] checkpoint line: $(cat "$out")"
! grep -q ' debug: ' "$out" || fail "debug lines at level info: $(grep ' debug: ' "$out" | sed -n 1,3p)"

# every rank's lines carry its rank, on stderr and in its log file
run debug PLAIT_LOG_LEVEL=debug --
for r in 0 1; do
  grep -Eq "^\[r$r\] +[0-9.]+ [a-z]+ debug: " "$out" || fail "no [r$r] debug line on stderr: $(cat "$out")"
  log=$E2E_WORK/debug/rank-$r.log
  [ -s "$log" ] || fail "rank $r's log file is empty"
  ! grep -Evq "^\[r$r\] " "$log" || fail "rank $r's log has lines without [r$r]: $(grep -Ev "^\[r$r\] " "$log" | sed -n 1,3p)"
done
grep -q ' store debug: ' "$out" || fail "PLAIT_LOG_LEVEL=debug shows no store debug lines"

# per component, from the environment, the command line and a file
check_warn_tcp_debug() { # WHAT
  grep -q ' tcp debug: ' "$out" || fail "$1: no tcp debug lines: $(cat "$out")"
  grep -q ' tcp: rank 0 uses interface' "$out" || fail "$1: no tcp info line"
  ! grep -Eq ' (store|comm|job|dp) debug: ' "$out" || fail "$1: debug lines of other components: $(grep ' debug: ' "$out" | grep -v ' tcp debug' | sed -n 1,3p)"
  ! grep -q 'checkpoint: saved' "$out" || fail "$1: an info line of another component"
}
run comp_env PLAIT_LOG_LEVEL=warn,tcp=debug --
check_warn_tcp_debug "PLAIT_LOG_LEVEL=warn,tcp=debug"
run comp_cli -- run.log_level=warn,tcp=debug
check_warn_tcp_debug "run.log_level=warn,tcp=debug"
cfg=$E2E_WORK/log.ini
sed '/^\[run\]/a log_level = warn, tcp = debug' "$CFG" >"$cfg"
[ "$(grep -c '^log_level' "$cfg")" = 1 ] || fail "could not write $cfg"
CFG=$cfg run comp_file --
check_warn_tcp_debug "[run] log_level in a file"
# PLAIT_LOG_LEVEL wins over [run] log_level
run env_wins PLAIT_LOG_LEVEL=error -- run.log_level=debug
! grep -Eq ' (debug|warn): |checkpoint: saved|uses interface' "$out" || fail "PLAIT_LOG_LEVEL=error did not win: $(cat "$out")"

# one process: no rank prefix
rm -rf "$E2E_WORK/single"
$P train "$CFG" "run.out_dir=$E2E_WORK/single" run.steps=1 >"$out" 2>&1 || fail "single train: $(cat "$out")"
grep -Eq '^ +[0-9.]+ checkpoint: saved step 1' "$out" || fail "single process: no unprefixed line: $(cat "$out")"
! grep -q '^\[r' "$out" || fail "single process lines carry a rank: $(cat "$out")"

# bad levels
if $P config check "$CFG" run.log_level=loud >"$out" 2>&1; then fail "run.log_level=loud accepted"; fi
grep -q "command line 'run.log_level=loud': key 'log_level' in \[run\]: 'loud' is not a level spec" "$out" ||
  fail "run.log_level=loud: $(cat "$out")"
printf '[run]\nlog_level = warn,tcp=loud\n' >"$cfg"
if PLAIT_LOG_LEVEL=info $P config check "$cfg" >"$out" 2>&1; then fail "[run] log_level = warn,tcp=loud accepted"; fi
grep -q "$cfg:2: key 'log_level' in \[run\]: 'warn,tcp=loud' is not a level spec" "$out" || fail "bad file level: $(cat "$out")"
PLAIT_LOG_LEVEL=loud $P config check "$CFG" >"$out" 2>&1 || fail "a bad PLAIT_LOG_LEVEL stopped config check: $(cat "$out")"
grep -q "warning: PLAIT_LOG_LEVEL='loud' is not valid" "$out" || fail "no warning for PLAIT_LOG_LEVEL=loud: $(cat "$out")"
echo "logging OK"
