#!/usr/bin/env bash
# [run] bind on this machine: with bind = cores, 2 ranks x 1 math thread,
# the mask each rank reads back with sched_getaffinity (its log) is the one
# the launcher printed for it, and the two differ; under Open MPI's and
# Slurm's variables the ranks bind the same way and rank 0 prints the map; auto leaves an
# oversubscribed run unbound and says so once; bind = cores with more ranks
# x threads than cores, and a topology file that does not parse, are refused
# before any rank starts, naming what is wrong; a mask the launcher started
# with (taskset) is kept and said; plait doctor --topology reads the DGX
# H100 file and names what is lopsided in it.
source "$(dirname "$0")/lib.sh"
[ "$(nproc)" -ge 2 ] || { echo "SKIP: needs 2 cores this process may use, has $(nproc)"; exit 77; }
command -v taskset >/dev/null || { echo "SKIP: taskset (util-linux) is not installed"; exit 77; }
S="run.steps=2 run.ckpt_every=0 parallel.dp=2 run.threads=1"
train cores -n 2 $S run.bind=cores
for r in 0 1; do
  want=$(sed -n "s/^plait:   local rank $r: cpus \([0-9,-]*\) .*/\1/p" "$E2E_WORK/cores.out")
  got=$(sed -n "s/.*bind: rank $r (local $r): .*; affinity now cpus \([0-9,-]*\)$/\1/p" "$E2E_WORK/cores.out")
  [ -n "$want" ] || fail "the launcher printed no place for local rank $r: $(head -n 5 "$E2E_WORK/cores.out")"
  [ "$want" = "$got" ] || fail "rank $r: the launcher printed cpus '$want', the rank reads back '$got'"
  eval "cpus$r=\$got"
done
[ "$cpus0" != "$cpus1" ] || fail "both ranks were bound to cpus $cpus0"

# The same job started by Open MPI's and Slurm's variables (set here, as
# mpirun and srun set them, so no launcher is needed): each rank binds to
# the cpus plait's own launcher printed for its local rank, and rank 0 says
# how the mesh falls on the node, as that launcher does.
faked() {
  local name=$1 r pids=(); shift
  rm -rf "${E2E_WORK:?}/$name"
  for r in 0 1; do
    env "${@//@R@/$r}" timeout 300 "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/$name" $S run.bind=cores \
      >"$E2E_WORK/$name.$r.out" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do wait "${pids[$r]}" || fail "$name: rank $r failed: $(tail -n 5 "$E2E_WORK/$name.$r.out")"; done
  for r in 0 1; do
    got=$(sed -n "s/.*bind: rank $r (local $r): .*; affinity now cpus \([0-9,-]*\)$/\1/p" "$E2E_WORK/$name.$r.out")
    eval "want=\$cpus$r"
    [ "$want" = "$got" ] || fail "$name: rank $r bound to cpus '$got', plait -n printed '$want' for local rank $r"
  done
  for want in "bind: NUMA node 0: local ranks 0 1" "bind: dp: 1 group of 2, 1 on one host, 1 on one NUMA node"; do
    grep -qF "$want" "$E2E_WORK/$name.0.out" || fail "$name: rank 0 does not say '$want': $(grep bind "$E2E_WORK/$name.0.out")"
  done
  grep -q "NUMA node 0: local ranks" "$E2E_WORK/$name.1.out" && fail "$name: rank 1 printed the map too"
  grep -q "NUMA node 0: local ranks" "$E2E_WORK/cores.out" ||
    fail "plait -n printed no map to compare with: $(head -n 8 "$E2E_WORK/cores.out")"
}
faked mpi OMPI_COMM_WORLD_RANK=@R@ OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=@R@ \
  OMPI_COMM_WORLD_LOCAL_SIZE=2 OMPI_MCA_ess_base_jobid="plait-bind-$$"
faked srun SLURM_PROCID=@R@ SLURM_NTASKS=2 SLURM_LOCALID=@R@ SLURM_STEP_ID=0 SLURM_JOB_ID="$$" \
  SLURM_STEP_NUM_NODES=1

n=$(($(nproc) * 2))
train over -n "$n" run.steps=1 run.ckpt_every=0 parallel.dp=$n run.threads=1
[ "$(grep -c '^plait: ranks not bound (\[run\] bind = auto): not bound: '"$n"' ranks x 1 math thread' "$E2E_WORK/over.out")" = 1 ] ||
  fail "an oversubscribed run does not say once that it is not bound: $(grep -i bound "$E2E_WORK/over.out")"
grep -q "affinity now" "$E2E_WORK/over.out" && fail "an oversubscribed auto run was bound"

train_refused cores_over "command line 'run.bind=cores': [run] bind = cores: $n ranks x 1 math thread = $n, but this node has" \
  -n "$n" run.out_dir="$E2E_WORK/co" run.steps=1 parallel.dp=$n run.threads=1 run.bind=cores
grep -q "\[r0\]" "$E2E_WORK/cores_over.out" && fail "a rank started after bind = cores was refused"

printf '<topology version="2.0"><object' >"$E2E_WORK/broken.xml"
PLAIT_TOPOLOGY=$E2E_WORK/broken.xml train_refused broken "topology file $E2E_WORK/broken.xml (PLAIT_TOPOLOGY)" \
  -n 2 run.out_dir="$E2E_WORK/br" $S

rm -rf "${E2E_WORK:?}/kept"
taskset -c 0 "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/kept" -n 2 $S run.bind=cores >"$E2E_WORK/kept.out" 2>&1 ||
  fail "a run under taskset failed: $(tail -n 5 "$E2E_WORK/kept.out")"
grep -q "kept the affinity mask it started with (cpus 0 of the node's" "$E2E_WORK/kept.out" ||
  fail "the mask taskset gave is not said to be kept: $(grep -i bind "$E2E_WORK/kept.out")"

PLAIT_TOPOLOGY=$PLAIT_SOURCE_DIR/configs/topologies/dgx-h100.xml "$PLAIT_BIN" doctor --topology >"$E2E_WORK/doctor.out" 2>&1 &&
  fail "doctor --topology found nothing lopsided on the DGX H100 file"
for want in "2 packages, 2 NUMA nodes, 112 cores, 224 hardware threads" "nearest NIC mlx5_5/ibp170s0" \
  "network cards of different speeds" "interface enp192s0f0 has MTU 1500 on a 100 Gb/s link" \
  "224 hardware threads on 112 cores"; do
  grep -qF "$want" "$E2E_WORK/doctor.out" || fail "doctor --topology does not say '$want': $(cat "$E2E_WORK/doctor.out")"
done
echo "binding OK: ranks on cpus $cpus0 and $cpus1"
