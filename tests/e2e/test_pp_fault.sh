#!/usr/bin/env bash
# A rank of a middle pipeline stage killed with SIGKILL mid-step (issue 8):
# pp = 4, world rank 1 is stage 1. Every other rank stops within the
# timeout (10 s) with an error naming rank 1 (its own neighbours directly,
# the rest through the failure cascade, which passes on the root cause) and
# the operation it was in; the launcher exits non-zero naming the killed
# rank.
source "$(dirname "$0")/lib.sh"
out=$E2E_WORK/run
rm -rf "$out"
"$PLAIT_BIN" train "$CFG" run.out_dir="$out" parallel.plugin=hybrid parallel.pp=4 data.micro_batch=1 \
  run.steps=100000 run.ckpt_every=0 comm.timeout=10 >"$E2E_WORK/run.out" 2>&1 &
launcher=$!
# wait until training is under way (metrics rows appear), then kill stage 1
rows() { if [ -f "$out/metrics.csv" ]; then wc -l <"$out/metrics.csv"; else echo 0; fi; }
for _ in $(seq 600); do [ "$(rows)" -gt 20 ] && break; sleep 0.1; done
[ "$(rows)" -gt 20 ] || { kill $launcher; fail "training did not start"; }
victim=""
for pid in $(pgrep -P $launcher); do
  if tr '\0' '\n' </proc/$pid/environ 2>/dev/null | grep -qx 'PLAIT_RANK=1'; then victim=$pid; fi
done
[ -n "$victim" ] || { kill $launcher; fail "rank 1 not found"; }
killed_at=$(date +%s)
kill -9 "$victim"
rc=0
wait $launcher || rc=$?
elapsed=$(( $(date +%s) - killed_at ))
tail -n 6 "$E2E_WORK/run.out"
[ $rc -ne 0 ] || fail "the launcher exited 0 after a rank was killed"
[ $elapsed -le 25 ] || fail "the job took ${elapsed}s to end (timeout 10 s)"
grep -q "rank 1 was killed by SIGKILL" "$E2E_WORK/run.out" || fail "the launcher did not name rank 1"
for r in 0 2 3; do
  log=$out/rank-$r.log
  grep -q "error" "$log" || continue # stopped by the launcher after the cascade
  grep -Eq "(from|to) rank 1 \(world rank 1\)|rank 1 (closed|is going down)" "$log" ||
    fail "rank $r's error does not name rank 1: $(grep error "$log" | tail -n 1)"
  grep -Eq "(recv|send|allreduce|reduce_scatter|allgather|broadcast|barrier) #[0-9]+" "$log" ||
    fail "rank $r's error does not name the operation: $(grep error "$log" | tail -n 1)"
done
grep -Eq "^plait: error: train: step [0-9]+:" "$E2E_WORK/run.out" || fail "no survivor names the step it was in"
echo "pp fault OK: job ended ${elapsed}s after stage 1 was killed"
