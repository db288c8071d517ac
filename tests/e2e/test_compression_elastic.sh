#!/usr/bin/env bash
# onebit's error feedback across an elastic restart from memory, on 2
# network-namespace hosts x 1 rank (dp 2), deterministic, 12 steps, replicas
# every 2 steps and no checkpoint on disk: rank 1 is killed after step 7,
# the launchers start both ranks again with the same layout from the
# replicas in memory, each rank's residuals from its own host's keeper; the
# losses and the final checkpoint are the 12 straight steps' bit for bit,
# also when rank 1 dies while a snapshot is taken.
# Then a job of 2 ranks a host (dp 4) as --nnodes 1:2 loses host 1: the
# restart on host 0 alone changes dp (4 to 2), so the residuals of dp 4 are
# not used: rank 0 says they start from zero, and the job finishes every
# step once.
# Skipped (exit 77, with the reason) where namespaces cannot be created.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
source "$(dirname "$0")/elastic_lib.sh"
netns_up 2
N=12
L="run.deterministic=true data.global_batch=8 data.micro_batch=2 parallel.plugin=hybrid parallel.dp=2 parallel.dp.grad_compression=onebit"
E="--max-restarts 4 run.join_wait=10 run.host_timeout=2 comm.timeout=30 run.debug_compute_sleep_ms=15"
# shellcheck disable=SC2086
train straight $L run.steps=$N
for i in 0 1; do elastic_start killed $i $L --nnodes 2:2 $E run.steps=$N run.replica_every=2 run.ckpt_every=0; done
wait_rows killed 7
victim=""
for p in $(ip netns pids "${NETNS_P}h1"); do grep -zqx "PLAIT_RANK=1" /proc/"$p"/environ 2>/dev/null && victim=$p; done
[ -n "$victim" ] || fail "rank 1 not found on host 1"
kill -9 "$victim"
elastic_wait killed
resumed killed 0
[ "$RESUMED_FROM" = memory ] || fail "not resumed from memory: $(grep -h 'resuming' "$E2E_WORK"/killed/rank-*.log)"
same_losses straight killed 0
same_params straight killed bits
grep -q "error feedback of compressed gradient reductions restored from the replicas of step $RESUMED_STEP in memory" \
  "$E2E_WORK/killed/rank-0.log" || fail "the restart did not say it restored the error feedback: $(grep -h 'error feedback' "$E2E_WORK"/killed/rank-*.log)"
echo "compressed elastic restart OK: rank 1 killed after step 7, resumed at step $RESUMED_STEP from memory, bit-identical"

# --- rank 1 killed while the snapshot of step 8 is taken, after the
# stages' images and before its own residuals: step 8's replicas lack
# them, so the restart resumes at step 6, whose replicas hold every rank's
for i in 0 1; do
  elastic_start midsnap $i $L --nnodes 2:2 $E run.steps=$N run.replica_every=2 run.ckpt_every=0 \
    run.debug_die_in_replica=8 run.debug_die_in_save_rank=1
done
elastic_wait midsnap
resumed midsnap 0
[ "$RESUMED_FROM" = memory ] && [ "$RESUMED_STEP" = 6 ] ||
  fail "midsnap: resumed at step $RESUMED_STEP from $RESUMED_FROM, not at step 6 from memory"
grep -q "the replicas of step 8 lack a rank's error feedback" "$E2E_WORK/midsnap/rank-0.log" ||
  fail "midsnap: the skipped step 8 was not said: $(grep -h 'replicas of step' "$E2E_WORK"/midsnap/rank-*.log)"
same_losses straight midsnap 0
same_params straight midsnap bits
echo "rank 1 killed mid-snapshot OK: resumed at step 6, whose replicas hold its residuals, bit-identical"

# --- dp changes on the restart: the residuals start from zero, said
host_back 1 2>/dev/null || true
L4=${L/parallel.dp=2/parallel.dp=4}
for i in 0 1; do elastic_start shrunk $i $L4 --nnodes 1:2 $E run.steps=$N run.replica_every=2 run.ckpt_every=0; done
wait_rows shrunk 5
host_kill 1
elastic_wait shrunk
resumed shrunk 1
grep -q "holds no error feedback for this layout (w2\.dp2\..*residuals start from zero" "$E2E_WORK/shrunk/rank-0.log" ||
  fail "shrunk: the reset residuals were not said: $(grep -h 'error feedback' "$E2E_WORK"/shrunk/rank-*.log)"
[ "$(column shrunk step | tr '\n' ' ')" = "$(seq 1 $N | tr '\n' ' ')" ] ||
  fail "shrunk: metrics.csv steps are not 1..$N once each: $(column shrunk step | tr '\n' ' ')"
echo "compressed elastic restart with another dp OK: resumed at step $RESUMED_STEP on 1 host, residuals from zero, said"
