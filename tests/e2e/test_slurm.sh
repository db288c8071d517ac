#!/usr/bin/env bash
# A real Slurm (Debian's slurm-wlm with munge; scripts/deps.sh installs them)
# on this machine: the test starts munged, slurmctld and slurmd with a
# private configuration (its own ports, socket and state directory: nothing
# of a system Slurm is touched), then
#   srun -N1 -n4 plait train ...     every task one rank; the job's ranks find
#                                     each other with no address or token given;
#                                     losses and model bit-identical to the
#                                     same layout under plait's own launcher
#   sbatch scripts/slurm-train.sbatch the documented batch script (one launcher
#                                     per node, --nnodes, --max-restarts),
#                                     bit-identical too
# and stops everything it started, also on failure. Skipped (exit 77, with
# the reason) without root or without the packages.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
NODE=$(hostname -s)
slurm_up "$NODE 127.0.0.1"
slurm_daemon slurmctld -D -i
slurm_daemon slurmd -D -N "$NODE"
slurm_wait_idle

D="run.deterministic=true run.steps=6 parallel.dp=4 comm.timeout=60"
train local_dp4 $D

# srun: 4 tasks, each a rank; no MASTER_ADDR, no token
rm -rf "$E2E_WORK/srun"
# shellcheck disable=SC2086
timeout 300 srun -N1 -n4 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/srun" $D run.log_level=info,job=debug \
  >"$E2E_WORK/srun.out" 2>&1 ||
  { tail -n 20 "$E2E_WORK/srun.out" >&2; fail "srun -N1 -n4 plait train failed"; }
for r in 0 1 2 3; do # each task joined as one rank through Slurm's variables
  grep -q "joined as rank $r of 4 .* via srun" "$E2E_WORK/srun/rank-$r.log" ||
    fail "task $r did not join as rank $r through srun: $(grep -h joined "$E2E_WORK/srun/rank-$r.log")"
done
same_losses srun local_dp4 0
same_params srun local_dp4 bits

# a setting every rank refuses, started by srun (no plait launcher to
# check it first): refused before any task makes the run directory
rm -rf "$E2E_WORK/srun-refused"
if timeout 120 srun -N1 -n2 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/srun-refused" parallel.dp=2 \
  run.residual=bf16 comm.timeout=60 >"$E2E_WORK/srun-refused.out" 2>&1; then
  fail "srun: residual = bf16 on a float32 run trained"
fi
grep -qF "command line 'run.residual=bf16': [run] residual = bf16 needs [run] precision = bf16" \
  "$E2E_WORK/srun-refused.out" || fail "srun: unclear refusal: $(tail -n 3 "$E2E_WORK/srun-refused.out")"
[ ! -e "$E2E_WORK/srun-refused" ] || fail "srun: the refused run made its run directory: $(ls "$E2E_WORK/srun-refused")"

# sbatch: the documented script, one launcher per node
rm -rf "$E2E_WORK/sbatch"
# shellcheck disable=SC2086
PLAIT=$PLAIT_BIN timeout 300 sbatch --wait -N1 -o "$E2E_WORK/sbatch.out" scripts/slurm-train.sbatch "$CFG" \
  "run.out_dir=$E2E_WORK/sbatch" $D >"$E2E_WORK/sbatch.submit" 2>&1 ||
  { cat "$E2E_WORK/sbatch.submit" >&2; tail -n 20 "$E2E_WORK/sbatch.out" >&2; fail "sbatch scripts/slurm-train.sbatch failed"; }
same_losses sbatch local_dp4 0
same_params sbatch local_dp4 bits
echo "slurm OK: $(slurmctld -V) on $NODE; srun -N1 -n4 and sbatch scripts/slurm-train.sbatch bit-identical to plait's own launcher"
