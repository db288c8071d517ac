# The stand-in CUDA/NCCL's side of the tests that train over the nccl
# plugin without a GPU (test_nccl_train.sh, test_nccl_cp.sh): the pretend
# driver tree, a run over the stand-in and its counters. Sourced after
# tests/e2e/lib.sh, with MOCK_GPU_LIB set.
# shellcheck shell=bash

# The nccl plugin's probe counts GPUs from the NVIDIA driver's files, never
# asking CUDA (so the stand-in cannot answer it): a pretend driver tree
# (PLAIT_CUDA_SYSFS_ROOT) lists as many GPUs as the stand-in has.
pretend_driver() { # pretend_driver GPUS: export PLAIT_CUDA_SYSFS_ROOT for GPUS GPUs
  local root=$E2E_WORK/driver-$1 g
  rm -rf "$root"
  for ((g = 0; g < $1; g++)); do mkdir -p "$root/proc/driver/nvidia/gpus/0000:$((16 + g)):00.0"; done
  export PLAIT_CUDA_SYSFS_ROOT=$root
}

# on_nccl NAME RANKS ARGS...: train over the stand-in, one "GPU" per rank;
# its per-process counters land in $E2E_WORK/NAME.stats/
on_nccl() {
  local name=$1 ranks=$2
  shift 2
  rm -rf "${E2E_WORK:?}/$name.stats"
  mkdir -p "$E2E_WORK/$name.stats"
  pretend_driver "$ranks"
  PLAIT_MOCK_NCCL_STATS=$E2E_WORK/$name.stats PLAIT_SIM_DEVICES=$ranks PLAIT_MOCK_GPUS=$ranks \
    LD_PRELOAD=$MOCK_GPU_LIB train "$name" "$@" device.plugin=sim comm.plugin=nccl
  grep -q "comm nccl" "$E2E_WORK/$name.out" || fail "$name did not run over nccl: $(head -n 20 "$E2E_WORK/$name.out")"
}

# nccl_total NAME OP calls|bytes: summed over the run's processes
nccl_total() {
  local col=2
  [ "$3" = bytes ] && col=3
  cat "$E2E_WORK/$1.stats"/nccl-stats.* | awk -v op="$2" -v c=$col '$1 == op { s += $c } END { printf "%.0f\n", s }'
}

# at_least NAME OP calls|bytes MIN: a counter reached MIN
at_least() {
  local got
  got=$(nccl_total "$1" "$2" "$3")
  [ "$got" -ge "$4" ] || fail "$1: NCCL $2 $3 = $got, expected at least $4 (did training bypass NCCL?)"
  echo "$1: NCCL $2 $3 $got (>= $4)"
}
