#!/usr/bin/env bash
# The same config runs under Open MPI's mpirun (each process joins as one
# rank) and gives the same losses as plait's own launcher; under both, every
# rank writes its own <out_dir>/rank-<r>.log.
source "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || fail "mpirun not installed (scripts/deps.sh installs openmpi-bin)"
train local run.steps=10 parallel.dp=4 run.log_level=debug
rank_logs local 4
rm -rf "$E2E_WORK/mpi"
mpirun --allow-run-as-root --oversubscribe -np 4 "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/mpi" \
  run.steps=10 parallel.dp=4 run.log_level=debug >"$E2E_WORK/mpi.out" 2>&1 || { tail -n 20 "$E2E_WORK/mpi.out"; fail "mpirun run failed"; }
rank_logs mpi 4
same_losses local mpi 0
same_params local mpi bits
echo "mpirun OK"
