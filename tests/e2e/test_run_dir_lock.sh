#!/usr/bin/env bash
# A run directory another run holds is refused to a job by every one of its
# ranks before any writes there, while a job's own ranks still write their
# logs beside its rank 0's lock:
#  - a dp 2 job in the directory of a live dp 1 run is refused naming the
#    holder; no rank-1.log appears, the lock file is unchanged and the live
#    run's log holds none of the refused job's lines;
#  - a dp 4 job in a directory whose lock another process holds (flock(1))
#    is refused naming the holder its lock file names; every file there
#    (the lock file, rank logs, metrics.csv) keeps its bytes and its mtime,
#    and no other file appears;
#  - a dp 2 job, and a later one resuming it over its stale lock file, write
#    every rank's log.
source "$(dirname "$0")/lib.sh"

# files DIR: each file under DIR with its size, mtime and checksum
files() { (cd "$1" && find . -type f -printf '%p %s %T@ ' -exec md5sum {} \; | sort); }

# --- a live dp 1 run, a dp 2 job
live=$E2E_WORK/live
rm -rf "$live"
"$PLAIT_BIN" train "$CFG" "run.out_dir=$live" run.steps=100000 run.ckpt_every=0 >"$E2E_WORK/live.out" 2>&1 &
first=$!
at_exit "kill $first 2>/dev/null"
for _ in $(seq 300); do
  [ -f "$live/metrics.csv" ] && [ "$(wc -l <"$live/metrics.csv")" -gt 2 ] && break
  kill -0 $first 2>/dev/null || break
  sleep 0.1
done
kill -0 $first 2>/dev/null || fail "the live run ended before the second job started: $(tail -n 3 "$E2E_WORK/live.out")"
cp "$live/.lock" "$E2E_WORK/live-lock"
names=$(ls -A "$live")
train_refused second "run directory $live is in use by another run (pid $first on host $(hostname)" \
  "run.out_dir=$live" run.steps=4 parallel.dp=2
[ ! -e "$live/rank-1.log" ] || fail "the refused job wrote $live/rank-1.log: $(cat "$live/rank-1.log")"
[ "$(ls -A "$live")" = "$names" ] || fail "the refused job changed the names in $live: $(ls -A "$live")"
cmp -s "$live/.lock" "$E2E_WORK/live-lock" || fail "the refused job rewrote $live/.lock: $(cat "$live/.lock")"
! grep -q "in use by another run" "$live/rank-0.log" || fail "the refused job wrote in the live run's log"
kill -0 $first 2>/dev/null || fail "the live run ended beside the refused job: $(tail -n 3 "$E2E_WORK/live.out")"
kill $first
wait $first || true

# --- a lock held by another process, a dp 4 job
if command -v flock >/dev/null; then
  held=$E2E_WORK/held
  rm -rf "$held"
  mkdir -p "$held"
  printf 'pid 4242 on host elsewhere, started 2026-01-01 00:00:00 UTC\njob 0123456789abcdef01234567\n' >"$held/.lock"
  for f in rank-0.log rank-1.log rank-3.log metrics.csv; do echo "the other run's $f" >"$held/$f"; done
  touch -d '2026-01-01 00:00:00' "$held"/.lock "$held"/*
  before=$(files "$held")
  exec 9<"$held/.lock"
  flock -n 9 || fail "cannot lock $held/.lock"
  train_refused held "run directory $held is in use by another run (pid 4242 on host elsewhere, started 2026-01-01" \
    "run.out_dir=$held" run.steps=2 parallel.dp=4
  exec 9<&-
  after=$(files "$held")
  [ "$after" = "$before" ] || fail "the refused job changed $held: $(diff <(echo "$before") <(echo "$after"))"
fi

# --- a job's ranks log beside its own rank 0's lock, and over a stale one
train own run.steps=2 parallel.dp=2 run.log_level=debug
rank_logs own 2
size=$(stat -c %s "$E2E_WORK/own/rank-1.log")
train own run.steps=3 parallel.dp=2 run.log_level=debug --resume
[ "$(stat -c %s "$E2E_WORK/own/rank-1.log")" -gt "$size" ] || fail "the resumed job's rank 1 did not log"
echo "test_run_dir_lock: ok"
