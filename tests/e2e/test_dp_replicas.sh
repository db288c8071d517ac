#!/usr/bin/env bash
# The initial broadcast makes DP replicas identical and the checksum proves
# it. Every rank initialises identically from the seed, so the hidden key
# [parallel.dp] debug_perturb_replicas makes DP ranks > 0 shift their
# parameters before the broadcast (which must repair them: the same losses
# and final checkpoint as an unperturbed run) or after it (verify_params must
# stop every rank, naming the DP rank and world rank that differs; with
# verify_params = false the run trains on different replicas). The layout is
# dp 2 x tp 2, so DP rank 1 is world rank 2 in one DP group and 3 in the other.
source "$(dirname "$0")/lib.sh"
L="run.steps=3 parallel.plugin=hybrid parallel.dp=2 parallel.tp=2"
train base $L
# verify_params off: the results alone must show the broadcast repaired it
train before $L parallel.dp.debug_perturb_replicas=before parallel.dp.verify_params=false
grep -q "DP rank 1 shifted its parameters by .* before the broadcast" "$E2E_WORK/before.out" ||
  fail "debug_perturb_replicas=before did not perturb anything"
same_losses base before 0
same_params base before bits

rm -rf "$E2E_WORK/after"
if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/after" $L parallel.dp.debug_perturb_replicas=after \
  >"$E2E_WORK/after.out" 2>&1; then
  fail "replicas perturbed after the broadcast trained anyway (verify_params = true)"
fi
out=$E2E_WORK/after.out
# one error line per rank: the two ranks of each DP group name its DP rank 1
for world in 2 3; do
  n=$(grep -c "^plait: error: .*replicas differ after the initial broadcast: DP rank 1 (world rank $world) has parameter checksum" "$out" || true)
  [ "$n" = 2 ] || { cat "$out" >&2; fail "expected 2 ranks to report DP rank 1 (world rank $world), got $n"; }
done
grep -q "^plait: rank [0-3] failed: train: dp: replicas differ" "$out" || fail "the launcher did not report the failure"
# a failure while the run is built is in each rank's log too, not only on stderr
for r in 0 1 2 3; do
  grep -q "^\[r$r\] .* plait error: train: dp: replicas differ after the initial broadcast" "$E2E_WORK/after/rank-$r.log" ||
    fail "rank $r's log lacks the start-up error: $(cat "$E2E_WORK/after/rank-$r.log" 2>&1)"
done
others=$(grep "^plait: also ended abnormally:" "$out" | grep -o "rank [0-3] (exit 1)" | wc -l)
[ "$others" = 3 ] || { cat "$out" >&2; fail "not every rank exited with an error on its own"; }

train unverified $L parallel.dp.debug_perturb_replicas=after parallel.dp.verify_params=false
if (same_losses base unverified 0) >/dev/null 2>&1; then fail "replicas perturbed after the broadcast trained like identical ones"; fi
echo "replicas OK: the broadcast repairs a perturbation before it, the checksum catches one after it"
