#!/usr/bin/env bash
# Installs the Debian packages plait needs to build and test, and only those
# that are missing (idempotent: a no-op when everything is there). As root it
# runs apt-get; otherwise it prints the exact command to run and fails.
#
#   scripts/deps.sh           build + test dependencies
#   scripts/deps.sh --list    print the package list and exit
set -euo pipefail

packages=(
  build-essential cmake pkg-config   # compiler, make, CMake, pkg-config
  clang libclang-rt-dev              # second compiler (-Werror in both) and libFuzzer/sanitizer runtimes
  clang-format-14                    # the format check of each commit's changed lines (.clang-format)
  libinih-dev                        # INI parsing
  libopenblas-dev                    # cblas_sgemm
  libdnnl-dev                        # oneDNN: PLAIT_CPU_GEMM=onednn, loaded at run time (libdnnl2), never needed to build
  libhwloc-dev                       # the node's topology: binding ranks near their GPU and NIC
  libcmocka-dev                      # unit tests
  libibverbs-dev                     # verbs comm plugin (built when found)
  liburing-dev                       # io_uring for [optim] offload = nvme (threads without it)
  openmpi-bin                        # tests that join an external mpirun
  procps                             # ps/pkill used by fault tests
  python3                            # the tests' free ports (tests/e2e/lib.sh, slurm_lib.sh), test_doc_paths
  iproute2                           # ip netns, tc: the multi-host namespace tests
  slurmctld slurmd slurm-client munge  # a real Slurm for tests/e2e/test_slurm.sh (slurm-wlm without its docs)
  gnuplot-nox                        # plait bench sweep --report and plait trace plot: PNG plots
)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  exit 0
fi

cmd="apt-get install -y --no-install-recommends ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "plait: missing packages: ${missing[*]}" >&2
  echo "plait: run as root:  apt-get update && $cmd" >&2
  exit 1
fi

echo "plait: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# Update the package index only when it is absent or a first attempt fails.
if ! ls /var/lib/apt/lists/*_Packages >/dev/null 2>&1 || ! $cmd; then
  apt-get update
  $cmd
fi
