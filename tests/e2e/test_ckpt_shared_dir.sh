#!/usr/bin/env bash
# Sharded checkpoints and a run directory the ranks do not share: two
# launchers on this machine (MASTER_ADDR=127.0.0.1), one rank each, stand
# for two hosts; each given a directory of its own stands for hosts with
# local disks, the same one for a shared file system.
#  - directories apart, ckpt_format = sharded with ZeRO-3 (each rank writes
#    a shard): both launchers stop before the first step, every rank naming
#    the rank apart, world rank 0's directory, the rank's own, and what to
#    do; no step, no checkpoint, no marker file left (never waited out:
#    [comm] timeout is an hour, the bound 120 s);
#  - the same directory: the save has both ranks' shards and its marker;
#    no marker file left;
#  - directories apart, ckpt_format = gathered: world rank 0 writes the
#    whole checkpoint into its own directory, the alternative the refusal
#    names; a resume there (run.resume=auto: rank 0 finds the checkpoint,
#    rank 1 none) is refused by both before any step, each naming where it
#    would start and the shared file system a resume needs.
source "$(dirname "$0")/lib.sh"
TOKEN=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')

# two NAME DIR0 DIR1 ARGS...: launchers of node ranks 0 and 1 with
# run.out_dir $E2E_WORK/DIR0 and DIR1; output NAME.<i>.out, status NAME.<i>.rc
two() {
  local name=$1 d0=$2 d1=$3 port i pids=()
  shift 3
  port=$(free_port)
  for i in 0 1; do
    local d=$d0
    [ $i = 0 ] || d=$d1
    (rc=0
     MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PLAIT_JOB_TOKEN=$TOKEN timeout 120 "$PLAIT_BIN" train "$CFG" \
       "run.out_dir=$E2E_WORK/$d" --nnodes 2 --node-rank $i parallel.dp=2 data.global_batch=4 run.steps=2 \
       comm.timeout=3600 "$@" >"$E2E_WORK/$name.$i.out" 2>&1 || rc=$?
     echo $rc >"$E2E_WORK/$name.$i.rc") &
    pids+=($!)
  done
  wait "${pids[@]}" || true
}
rm -rf "${E2E_WORK:?}"/{a0,a1,s,g0,g1} # what a failed run of this test left
rcs() { echo "$(cat "$E2E_WORK/$1.0.rc") $(cat "$E2E_WORK/$1.1.rc")"; }
no_markers() {
  local left
  left=$(find "$E2E_WORK" -name '.plait-shared-*')
  [ -z "$left" ] || fail "$1: marker files left: $left"
}

# --- directories apart, sharded: refused by both before the first step
two apart a0 a1 run.ckpt_format=sharded optim.plugin=zero3
[ "$(rcs apart)" = "1 1" ] || fail "directories apart: launchers exited $(rcs apart) (1 1 expected): $(tail -n 3 "$E2E_WORK/apart.0.out")"
for i in 0 1; do
  grep -qF "ckpt_format = sharded needs the run directory on a file system every rank shares (NFS, Lustre, GPFS...): world rank 1 of 2 does not share world rank 0's $E2E_WORK/a0" \
    "$E2E_WORK/apart.$i.out" || fail "host $i did not name the rank and the directory: $(grep error "$E2E_WORK/apart.$i.out" | head -n 2)"
  grep -qF "or use ckpt_format = gathered" "$E2E_WORK/apart.$i.out" || fail "host $i did not say what to do"
  ! grep -Eq "$COMM_TIMEOUT_WORDS" "$E2E_WORK/apart.$i.out" || fail "host $i waited for a timeout"
done
grep -qF "(world rank 1's is $E2E_WORK/a1)" "$E2E_WORK/apart.1.out" || fail "world rank 1 did not name its own directory"
ls -d "$E2E_WORK"/a0/ckpt-* "$E2E_WORK"/a1/ckpt-* 2>/dev/null && fail "directories apart: a checkpoint directory was made"
[ ! -s "$E2E_WORK/a0/metrics.csv" ] || [ "$(wc -l <"$E2E_WORK/a0/metrics.csv")" -le 1 ] ||
  fail "directories apart: steps were trained: $(cat "$E2E_WORK/a0/metrics.csv")"
no_markers "directories apart"

# --- one directory: both ranks' shards, complete
two shared s s run.ckpt_format=sharded optim.plugin=zero3
[ "$(rcs shared)" = "0 0" ] || fail "shared directory: launchers exited $(rcs shared): $(tail -n 3 "$E2E_WORK/shared.1.out")"
c=$E2E_WORK/s/ckpt-00000002
for f in shard-00000.safetensors shard-00001.safetensors index.json COMPLETE; do
  [ -f "$c/$f" ] || fail "shared directory: $c/$f missing"
done
no_markers "shared directory"

# --- directories apart, gathered: rank 0 writes it all into its own
two gathered g0 g1 run.ckpt_format=gathered optim.plugin=zero3
[ "$(rcs gathered)" = "0 0" ] || fail "gathered, directories apart: launchers exited $(rcs gathered): $(tail -n 3 "$E2E_WORK/gathered.0.out")"
{ [ -f "$E2E_WORK/g0/ckpt-00000002/COMPLETE" ] && [ -f "$E2E_WORK/g0/ckpt-00000002/model.safetensors" ]; } ||
  fail "gathered, directories apart: no complete checkpoint in world rank 0's directory"
two resumed g0 g1 run.ckpt_format=gathered optim.plugin=zero3 run.steps=4 run.resume=auto
[ "$(rcs resumed)" = "1 1" ] || fail "a resume from directories apart: launchers exited $(rcs resumed) (1 1 expected)"
grep -qF "the ranks would start from different steps, from 0 to 2 (0: fresh): world rank 0 resumes at step 2 from $E2E_WORK/g0/ckpt-00000002" \
  "$E2E_WORK/resumed.0.out" || fail "world rank 0 did not say where it would resume: $(grep error "$E2E_WORK/resumed.0.out" | head -n 1)"
grep -qF "world rank 1 starts fresh (it found no complete checkpoint). The ranks do not see the same checkpoints: [run] out_dir must be on a file system every rank shares" \
  "$E2E_WORK/resumed.1.out" || fail "world rank 1 did not say it would start fresh: $(grep error "$E2E_WORK/resumed.1.out" | head -n 1)"
[ "$(wc -l <"$E2E_WORK/g0/metrics.csv")" = 3 ] || fail "a resume from directories apart trained: $(cat "$E2E_WORK/g0/metrics.csv")"
echo "sharded checkpoints and the run directory OK: refused before the first step where the ranks do not share it, saved where they do; gathered saves either way, and a resume where ranks find different checkpoints is refused"
