#!/usr/bin/env bash
# A rank killed with SIGKILL mid-run: every other rank exits within the
# timeout naming the lost rank and the operation, the launcher exits non-zero
# naming it, the last checkpoint is intact, and --resume continues from it
# with a different dp.
source "$(dirname "$0")/lib.sh"
out=$E2E_WORK/run
rm -rf "$out"
"$PLAIT_BIN" train "$CFG" run.out_dir="$out" parallel.dp=4 data.micro_batch=2 run.steps=100000 \
  run.ckpt_every=10 comm.timeout=10 >"$E2E_WORK/run.out" 2>&1 &
launcher=$!
for _ in $(seq 600); do [ -e "$out/ckpt-00000010/COMPLETE" ] && break; sleep 0.1; done
[ -e "$out/ckpt-00000010/COMPLETE" ] || { kill $launcher; fail "no checkpoint appeared"; }
victim=""
for pid in $(pgrep -P $launcher); do
  if tr '\0' '\n' </proc/$pid/environ 2>/dev/null | grep -qx 'PLAIT_RANK=2'; then victim=$pid; fi
done
[ -n "$victim" ] || { kill $launcher; fail "rank 2 not found"; }
killed_at=$(date +%s)
kill -9 "$victim"
rc=0
wait $launcher || rc=$?
elapsed=$(( $(date +%s) - killed_at ))
cat "$E2E_WORK/run.out" | tail -n 8
[ $rc -ne 0 ] || fail "the launcher exited 0 after a rank was killed"
[ $elapsed -le 25 ] || fail "the job took ${elapsed}s to end (timeout 10 s)"
grep -q "rank 2 was killed by SIGKILL" "$E2E_WORK/run.out" || fail "the launcher did not name rank 2"
for r in 0 1 3; do
  log=$out/rank-$r.log
  # a survivor either reported the lost peer itself or was stopped by the launcher after it
  if grep -q "error" "$log"; then
    grep -Eq "rank 2|peer 2" "$log" || fail "rank $r's error does not name rank 2: $(grep error "$log" | tail -n 1)"
  fi
done
grep -rEq "(allreduce|broadcast|send|recv|reduce_scatter|allgather)" "$out"/rank-*.log "$E2E_WORK/run.out" ||
  fail "no message names the operation"
last=$(last_ckpt run)
"$CKPT_DIFF" "$last" "$last" --bits >/dev/null || fail "the last checkpoint $last does not verify"
step=$((10#${last##*ckpt-}))
train resumed --resume parallel.dp=2 data.micro_batch=2 run.steps=$((step + 5)) run.out_dir="$out"
grep -q "resuming from $last" "$E2E_WORK/resumed.out" || fail "the resumed run did not start from $last"
[ -e "$out/ckpt-$(printf %08d $((step + 5)))/COMPLETE" ] || fail "the resumed run did not finish"
echo "fault handling OK: job ended ${elapsed}s after the kill; resumed from step $step at dp=2"
