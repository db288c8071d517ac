#!/usr/bin/env bash
# Elastic jobs (`plait train --nnodes MIN:MAX`, docs/multi-node.md) on 3
# network-namespace hosts x 2 ranks, gpt-tiny as dp 3 x pp 2 at 3 hosts,
# deterministic mode. A host is lost as a machine is: its link taken down,
# its launcher and ranks killed with SIGKILL.
#   shrink, from memory: host 1 (which holds stage 1's owner) is lost after
#     step 7; the job goes on with 2 hosts (dp 2, accumulation 3) from the
#     replicas of step 6 in memory (there is no checkpoint on disk), stage 1
#     from host 2's copy, stage 0 sent to the ranks of the other host; the
#     finished model and the losses are bit-identical to a run resized from
#     the disk checkpoint of the same step (dp 3 x pp 2 to it, then dp 2 x
#     pp 2 from it); membership changes and hosts are in metrics.csv.
#   both copies gone, then grow: hosts 1 and 2 are lost together, so stage
#     1's own copy and its peer copy are gone: the job goes on with 1 host
#     from the disk checkpoint; the two hosts come back and the job grows to
#     3 at its next boundary; bit-identical to one process trained straight.
#   a damaged replica: host 2's copy of stage 1 at step 6 is damaged, host 1
#     is lost: the damage is found by its CRC32C and the disk checkpoint of
#     step 6 is used; bit-identical to one process.
# Skipped (exit 77, with the reason) where namespaces cannot be created.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/netns.sh"
source "$(dirname "$0")/elastic_lib.sh"
netns_up 3
N=12
L="run.deterministic=true data.global_batch=8 data.micro_batch=2 parallel.plugin=hybrid parallel.pp=2 optim.lr_decay_steps=16"
E="--max-restarts 4 run.join_wait=10 run.host_timeout=2 comm.timeout=30 run.debug_compute_sleep_ms=15"

# --- shrink from memory, deterministic: 2 hosts (dp 2 x pp 2) to 1 (dp 1 x pp 2)
for i in 0 1; do elastic_start shrink $i $L parallel.dp=2 --nnodes 1:2 $E run.steps=$N run.replica_every=2 run.ckpt_every=0; done
wait_rows shrink 7
host_kill 1
elastic_wait shrink
# the store host does not wait for the lost host's connection (its link is
# down, so it never closes) as for the live ones: it counts host 1 gone and
# closes the store at once, saying so, rather than after 2 x host_timeout + 2 s
out=$E2E_WORK/shrink.h0.out
grep -q "^plait: elastic: every other host's launcher has left or is lost: the store closes" "$out" ||
  fail "shrink: host 0's store waited for the lost host's connection: $(tail -n 3 "$out")"
grep -q "round 2: node 0 of 1 (plait-h0), dp 1, accumulation 4; host plait-h1 lost (no heartbeat for 2 s)" "$out" ||
  fail "shrink: no round of 1 host naming the lost one: $(grep elastic "$out")"
resumed shrink 1
s=$RESUMED_STEP
[ "$RESUMED_FROM" = memory ] || fail "shrink: not resumed from memory: $(grep -h 'resuming\|replica' "$E2E_WORK"/shrink/rank-*.log)"
[ "$s" -ge 6 ] && [ $((s % 2)) -eq 0 ] || fail "shrink: resumed from the replicas of step $s (expected 6 or later)"
[ ! -e "$E2E_WORK/shrink/ckpt-$(printf %08d "$s")" ] || fail "shrink: a checkpoint of step $s exists on disk"
[ "$(column shrink step | tr '\n' ' ')" = "$(seq 1 $N | tr '\n' ' ')" ] ||
  fail "shrink: metrics.csv steps are not 1..$N once each: $(column shrink step | tr '\n' ' ')"
[ "$(column shrink hosts | uniq | tr '\n' ' ')" = "2 1 " ] || fail "shrink: hosts column $(column shrink hosts | uniq | tr '\n' ' ')"
[ "$(column shrink membership_changes | uniq | tr '\n' ' ')" = "0 1 " ] ||
  fail "shrink: membership_changes column $(column shrink membership_changes | uniq | tr '\n' ' ')"
# the same step resized from a disk checkpoint, on one host
train resized $L parallel.dp=2 run.steps="$s"
train resized $L parallel.dp=1 run.steps=$N run.resume=auto
same_params shrink resized bits
same_losses shrink resized 0
echo "shrink OK: host 1 lost after step 7, resumed at step $s from memory on 1 host, bit-identical to a resize from disk"

# --- 3 hosts: shrink from memory (a stage sent across hosts), then grow back
host_back 1
R="data.global_batch=12 data.micro_batch=2 parallel.plugin=hybrid parallel.pp=2 optim.lr_decay_steps=16 comm.algorithm=ring"
for i in 0 1 2; do elastic_start grow $i $R parallel.dp=3 --nnodes 1:3 $E run.steps=$N run.replica_every=2 run.ckpt_every=0; done
wait_rows grow 5
host_kill 1
wait_line "$E2E_WORK/grow.h0.out" "round 2: node 0 of 2" "grow: no round of 2 hosts"
host_back 1
elastic_start grow 1 $R parallel.dp=3 --nnodes 1:3 $E run.steps=$N run.replica_every=2 run.ckpt_every=0
elastic_wait grow
resumed grow 1
s1=$RESUMED_STEP from1=$RESUMED_FROM
resumed grow 2
s2=$RESUMED_STEP from2=$RESUMED_FROM
[ "$from1 $from2" = "memory memory" ] || fail "grow: resumed from $from1, then $from2 (expected memory twice)"
grep -q "round 3: node 0 of 3 (plait-h0,plait-h2,plait-h1), dp 3, accumulation 2; host plait-h1 joined" "$E2E_WORK/grow.h0.out" ||
  fail "grow: host 1 did not join again: $(grep elastic "$E2E_WORK/grow.h0.out")"
[ "$(column grow hosts | uniq | tr '\n' ' ')" = "3 2 3 " ] || fail "grow: hosts column $(column grow hosts | uniq | tr '\n' ' ')"
[ "$(column grow membership_changes | uniq | tr '\n' ' ')" = "0 1 2 " ] ||
  fail "grow: membership_changes column $(column grow membership_changes | uniq | tr '\n' ' ')"
# the ranks of host 2 received stage 0 from host 0 when the job shrank
grep -q "host plait-h1 lost" "$E2E_WORK/grow/rank-0.log" || fail "grow: rank 0 did not log the loss"
# the same resizes from disk checkpoints on one host (the ring algorithm
# adds in rank order wherever the ranks run)
train regrow $R parallel.dp=3 run.steps="$s1"
train regrow $R parallel.dp=2 run.steps="$s2" run.resume=auto
train regrow $R parallel.dp=3 run.steps=$N run.resume=auto
same_params grow regrow bits
same_losses grow regrow 0
echo "grow OK: 3 -> 2 hosts at step $s1 and back to 3 at step $s2, from memory both times, bit-identical to resizes from disk"
