#!/usr/bin/env bash
# `plait doctor`: every line it prints, checked against what this machine
# says through other means (/proc, getconf, ip, plait plugins, plait
# --version), and each problem with its fix: OpenBLAS kernels older than the
# CPU's, no interface for a job across hosts, a sim device's problem, a
# misread launcher environment, a bad config; exit 0 without a problem, 1
# with one. The GPU lines run on the sim test device (the devices opened to
# ask what they are) and through the cuda plugin's report on a pretend
# driver tree (PLAIT_CUDA_SYSFS_ROOT: an old driver under a newer CUDA), the
# RDMA lines on a pretend sysfs tree (PLAIT_VERBS_SYSFS_ROOT).
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
W=$E2E_WORK
export XDG_CACHE_HOME=$W/cache # the MFU peak's cache, fresh
rm -rf "$XDG_CACHE_HOME"
# a clean environment: no launcher, no BLAS override, no test switches
clean=(env -u OPENBLAS_CORETYPE -u PLAIT_BLAS_SELECTED_FROM -u OMP_NUM_THREADS -u OPENBLAS_NUM_THREADS -u SLURM_JOB_ID
  -u ONEDNN_MAX_CPU_ISA -u DNNL_MAX_CPU_ISA -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u PLAIT_LOG_LEVEL)
doctor() { # doctor NAME [env assignments...] -- [args...]: output in NAME.out, exit status in NAME.rc
  local name=$1; shift
  local pre=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do pre+=("$1"); shift; done
  [ "${1:-}" = "--" ] && shift
  local rc=0
  "${clean[@]}" "${pre[@]}" "$PLAIT_BIN" doctor "$@" >"$W/$name.out" 2>"$W/$name.err" || rc=$?
  echo $rc >"$W/$name.rc"
}
has() { grep -qF -- "$2" "$W/$1.out" || fail "$1: no '$2' in:
$(cat "$W/$1.out")"; }
lacks() { ! grep -qF -- "$2" "$W/$1.out" || fail "$1: '$2' in: $(grep -F -- "$2" "$W/$1.out")"; }
line() { grep -E "^$2  +" "$W/$1.out" | head -n 1 | sed -E "s/^$2  +//"; } # the text of label $2
at() { grep -E "^$2  +" "$W/$1.out" | grep -qF -- "$3" || fail "$1: no '$3' under '$2' in:
$(cat "$W/$1.out")"; } # a line labelled $2 holds $3

# --- a clean run: every fact, no problem, exit 0
doctor clean PLAIT_PLUGIN_PATH=
[ "$(cat "$W/clean.rc")" = 0 ] || fail "a clean machine exited $(cat "$W/clean.rc"): $(sed -n '/^problems/,$p' "$W/clean.out")"
has clean "problems: none found"
[ ! -s "$W/clean.err" ] || fail "doctor wrote to stderr: $(cat "$W/clean.err")"
version=$("$PLAIT_BIN" --version | awk '{ print $2 }')
line clean plait | grep -q "^$version (plugin ABI 1\.[0-9]*), $(readlink -f "$PLAIT_BIN"); plugins searched in " ||
  fail "the plait line: $(line clean plait)"
cpu=$(line clean cpu)
brand=$(grep -m1 '^model name' /proc/cpuinfo | sed 's/.*: //; s/ *$//')
[[ $cpu == "$brand ("* ]] || fail "the cpu line '$cpu' does not start with /proc/cpuinfo's '$brand'"
grep -q ": $(getconf _NPROCESSORS_ONLN) cores online, $(nproc) this process may use; " <<<"$cpu" || fail "cores: $cpu"
flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
for f in avx2:AVX2 avx512f:AVX512 avx512_bf16:AVX512_BF16; do
  if [[ $flags == *" ${f%%:*} "* ]]; then grep -qw "${f#*:}" <<<"${cpu##*; }" || fail "cpu: ${f#*:} missing: $cpu"
  else ! grep -qw "${f#*:}" <<<"${cpu##*; }" || fail "cpu: ${f#*:} listed without ${f%%:*} in /proc/cpuinfo"; fi
done
line clean blas | grep -Eq "^OpenBLAS [0-9.]+, [A-Za-z0-9]+ kernels \((as OpenBLAS detected|selected by plait from cpuid; OpenBLAS detected [A-Za-z0-9]+)\)$" ||
  fail "the blas line: $(line clean blas)"
has clean "kernels are the right ones for this CPU's"
if [[ $flags == *" avx512_bf16 "* ]]; then line clean precision | grep -q "^fp32; bf16 " || fail "precision: $(line clean precision)"
else has clean "fp32; bf16 would be refused: the CPU has neither AVX512_BF16 nor AMX_BF16"; fi
has clean "[run] threads = 0: the $(nproc) cores this process may use, shared by a host's ranks (one rank: $(nproc) math threads"
total=$(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
line clean memory | grep -q "^$total total, [0-9.]* GiB available (MemAvailable)$" || fail "memory: $(line clean memory), MemTotal $total"
has clean "no per-process limit (ulimit -v)"
grep -Eq "^ +(no cgroup memory limit|cgroup /.*: limit .*, .* in use)$" "$W/clean.out" || fail "no cgroup line"
has clean "a layout that does not fit is refused before any rank starts (plait config check)"
at clean "mfu peak" "not measured yet for one rank of $(nproc) threads: the first training run measures it (5 tries"
# every plugin plait plugins lists, with the same verdict (the reason of an unavailable one)
"${clean[@]}" PLAIT_PLUGIN_PATH= "$PLAIT_BIN" plugins >"$W/plugins.out" 2>&1
while read -r kind name _ _ state _; do
  got=$(line clean "$kind $name")
  [[ $got == "$state"* ]] || fail "$kind $name: plait plugins says $state, doctor: $got"
done < <(awk 'NR > 1 && /^(comm|device|parallel|optim) / { print }' "$W/plugins.out")
at clean "device cpu" "available (the configuration's)"
line clean "comm tcp" | grep -q "^available (the configuration's): " || fail "comm tcp: $(line clean 'comm tcp')"
for i in $(ip -o -4 addr show up | awk '{ print $2 }' | sort -u); do
  grep -A3 "^comm tcp" "$W/clean.out" | grep "interfaces up:" | grep -qw "$i" || fail "interface $i not listed"
done
has clean "a job on one host: loopback (lo)"
if ip -o -4 addr show up | awk '$2 != "lo"' | grep -q .; then has clean "ranks on several hosts: "; fi
at clean launcher "none: plait train starts the layout's ranks on this host itself"
at clean slurm "no Slurm variables"
at clean torchrun "no torchrun-style variables"
grep -Eq "^mpi +(no Open MPI variables|.*OMPI_COMM_WORLD_)" "$W/clean.out" || fail "mpi line"
grep -Eq "^plait env +(no PLAIT_\* variables|PLAIT_)" "$W/clean.out" || fail "plait env line"
if has_plugin comm verbs || grep -q "^comm verbs" "$W/clean.out"; then has clean "no RDMA devices: /sys/class/infiniband does not exist"; fi

# --- the MFU peak: --peak measures (5 tries) and caches; the next run shows that figure
doctor peak -- --peak
has peak "measured now, best of 5 tries; cached in $XDG_CACHE_HOME/plait/peak.tsv"
fig=$(line peak "mfu peak" | awk '{ print $1 }')
doctor peak2
line peak2 "mfu peak" | grep -Eq "^$fig GFLOP/s for one rank of $(nproc) threads, fp32 \(measured [0-9-]+ [0-9:]+ UTC, best of 5 tries; cached in " ||
  fail "the cached peak: $(line peak2 'mfu peak') (measured $fig)"

# --- a config, its threads and a key; a broken config is a problem
doctor cfg -- "$CFG" run.threads=3
at cfg config "$CFG: the machine as it would run it"
at cfg threads "3 math threads per rank ([run] threads)"
printf '[run]\nstepz = 3\n' >"$W/bad.ini"
doctor badcfg -- "$W/bad.ini"
[ "$(cat "$W/badcfg.rc")" = 1 ] || fail "a bad config: exit $(cat "$W/badcfg.rc")"
at badcfg config "problem: $W/bad.ini:2: key 'stepz' is not known in [run]"
has badcfg "fix: fix what it names (plait config check says the same)"

# --- the environment: math-thread variables, a limit, launchers
doctor envs OMP_NUM_THREADS=7 ONEDNN_MAX_CPU_ISA=AVX2 -- 
has envs "OMP_NUM_THREADS=7 in the environment"
has envs "ONEDNN_MAX_CPU_ISA=AVX2 in the environment: oneDNN runs at most that ISA, whatever this CPU has"
lacks badcfg "MAX_CPU_ISA"
# (not in a sanitized build: ASan's shadow memory exceeds any ulimit -v)
if [ -z "${PLAIT_SANITIZE:-}" ]; then
  (ulimit -v 4000000; doctor ulimit)
  has ulimit "each process may map at most 3906 MiB (ulimit -v)"
fi
doctor slurm SLURM_JOB_ID=42 SLURM_STEP_ID=0 SLURM_NNODES=1 SLURM_NTASKS=2 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_STEP_NODELIST=localhost \
  PLAIT_JOB_TOKEN=sekrit --
at slurm launcher "srun: this process would be rank 1 of 2 (local rank 1 of"
has slurm "SLURM_JOB_ID=42"
has slurm "PLAIT_JOB_TOKEN=(set)"
lacks slurm "sekrit"
doctor torch RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 PLAIT_JOB_TOKEN=x --
at torch launcher "rank 1 of 4 (local rank 1 of"
at torch torchrun "RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"
doctor notoken RANK=1 WORLD_SIZE=4 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 --
at notoken launcher "problem: PLAIT_JOB_TOKEN is not set"
doctor torchbad RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 --
[ "$(cat "$W/torchbad.rc")" = 1 ] || fail "a misread launcher environment: exit 0"
at torchbad launcher "problem: "
has torchbad "fix: correct or unset the variable it names"

# --- BLAS kernels older than the CPU's, set by hand
if [[ $flags == *" avx2 "* ]]; then
  doctor oldblas OPENBLAS_CORETYPE=Prescott --
  [ "$(cat "$W/oldblas.rc")" = 1 ] || fail "old kernels: exit 0"
  at oldblas blas "problem: OPENBLAS_CORETYPE=Prescott (set by hand) runs Prescott kernels on a CPU with"
  grep -Eq "fix: unset OPENBLAS_CORETYPE \(plait then picks (SkylakeX|Haswell) from cpuid\) or set OPENBLAS_CORETYPE=(SkylakeX|Haswell)" \
    "$W/oldblas.out" || fail "old kernels: no fix: $(sed -n '/^problems/,$p' "$W/oldblas.out")"
fi

# --- no interface a job across hosts can use (a network namespace with loopback only)
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  rc=0
  unshare -n sh -c "ip link set lo up && exec ${clean[*]} $PLAIT_BIN doctor" >"$W/nonet.out" 2>&1 || rc=$?
  [ $rc = 1 ] || fail "loopback only: exit $rc"
  has nonet "interfaces up: lo 127.0.0.1"
  at nonet "comm tcp" "problem: ranks on several hosts could not start: tcp: ranks run on several hosts but this one has no usable network interface"
  has nonet "fix: bring up an interface the other hosts reach"
  doctor badif -- "$CFG" comm.tcp.ifname=nope0
  at badif "comm tcp" "problem: ranks on several hosts could not start: [comm.tcp] ifname = 'nope0' matches no interface"
else
  echo "not root or no network namespaces: the loopback-only case is not checked"
fi

# --- devices: the sim device opened (a GPU's lines), its report, its problem
doctor sim PLAIT_SIM_MEMORY_MB=2048 PLAIT_SIM_DEVICES=2 "PLAIT_PLUGIN_PATH=$PLAIT_PLUGIN_PATH" --
at sim "device sim" "available: test device"
has sim "2 devices; the first: sim (host memory at non-canonical addresses), 2048 MiB"
has sim "2 simulated devices (PLAIT_SIM_DEVICES), 2048 MiB each (PLAIT_SIM_MEMORY_MB)"
has sim "device nodev"
has sim "no device found: no NODEV device found (the nodev test device never has one)"
grep -A1 "^device sim13 " "$W/sim.out" | grep -qF "2 devices; the first: sim (host memory" || fail "sim13 (ABI 1.3): no device line"
if grep -q "^device cuda_emu " "$W/sim.out"; then has sim "1 device; the first: plait CUDA emulator (CPU), 16.0 GiB"; fi
[ ! -s "$W/sim.err" ] || fail "opening devices wrote to stderr: $(cat "$W/sim.err")"
doctor simbad PLAIT_SIM_PROBLEM="the sim driver is too old" "PLAIT_PLUGIN_PATH=$PLAIT_PLUGIN_PATH" --
[ "$(cat "$W/simbad.rc")" = 1 ] || fail "a device problem: exit 0"
at simbad "device sim" "problem: the sim driver is too old"
grep -Eq "^  [0-9]+\. device sim: the sim driver is too old$" "$W/simbad.out" || fail "the summary lacks the device problem"
has simbad "     fix: the fix PLAIT_SIM_PROBLEM asks for"
# a report that crashes, exits or hangs after its first line: the line
# kept, the plugin's problem named, the doctor going on to the end (under a
# sanitizer its own handler turns the crash into an abort: any signal then)
crashed="crashed (Segmentation fault, signal 11)"
[ -z "${PLAIT_SANITIZE:-}" ] || crashed="crashed ("
for how in crash:"$crashed" exit:"ended the process (exit status 3)" \
           exit0:"ended the process (exit status 0)" \
           hang:"did not finish within 2 s and was stopped"; do
  doctor "report_${how%%:*}" PLAIT_SIM_REPORT="${how%%:*}" PLAIT_PLUGIN_SCAN_TIMEOUT=2 PLAIT_SIM_DEVICES=2 \
    "PLAIT_PLUGIN_PATH=$PLAIT_PLUGIN_PATH" --
  [ "$(cat "$W/report_${how%%:*}.rc")" = 1 ] || fail "a report that ${how%%:*}es: exit $(cat "$W/report_${how%%:*}.rc")"
  at "report_${how%%:*}" "device sim" "problem: its report() ${how#*:}"
  has "report_${how%%:*}" "2 simulated devices (PLAIT_SIM_DEVICES)"
  has "report_${how%%:*}" "fix: fix the plugin's report(), or remove the plugin from the plugin path"
  grep -Eq "^launcher +" "$W/report_${how%%:*}.out" || fail "the doctor stopped at a report that ${how%%:*}es"
  grep -q "^problems: " "$W/report_${how%%:*}.out" || fail "no summary after a report that ${how%%:*}es"
done

# --- the cuda plugin's report on a pretend driver: 535 supports CUDA 12.2
if [[ $(line clean "device cuda") == available* ]]; then
  # a GPU here: the first is opened and named, with its memory
  grep -A1 "^device cuda " "$W/clean.out" | grep -Eq "[0-9]+ devices?; the first: .*, [0-9.]+ (GiB|MiB)" ||
    fail "cuda on a GPU: $(grep -A4 '^device cuda ' "$W/clean.out")"
  grep -A6 "^device cuda " "$W/clean.out" | grep -Eq "NVIDIA driver [0-9.]+: supports CUDA up to [0-9.]+" ||
    fail "cuda on a GPU: no driver line"
elif grep -q "^device cuda " "$W/clean.out"; then
  has clean "no NVIDIA driver loaded (/proc/driver/nvidia/version does not exist)"
  nv=$W/nv/proc/driver/nvidia
  mkdir -p "$nv/gpus/0000:17:00.0"
  printf 'NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.54.03  Tue Jun  6 22:20:39 UTC 2023\n' >"$nv/version"
  printf 'Model: \t\t NVIDIA H100 80GB HBM3\nGPU UUID: \t GPU-0\n' >"$nv/gpus/0000:17:00.0/information"
  doctor cuda "PLAIT_CUDA_SYSFS_ROOT=$W/nv" --
  built=$(sed -nE 's/^ +built with CUDA ([0-9]+\.[0-9]+) .*/\1/p' "$W/cuda.out" | head -n 1)
  [ -n "$built" ] || fail "cuda: no CUDA version: $(grep -A6 '^device cuda' "$W/cuda.out")"
  has cuda "NVIDIA driver 535.54.03: supports CUDA up to 12.2"
  has cuda "GPU 0000:17:00.0: NVIDIA H100 80GB HBM3"
  has cuda "1 device; the first did not open: [device] plugin = cuda: open (ordinal 0): "
  if awk -v b="$built" 'BEGIN { exit !(b + 0 > 12.2) }'; then
    at cuda "device cuda" "problem: the NVIDIA driver 535.54.03 is older than the CUDA $built plait's cuda plugin was built with"
    has cuda "fix: install NVIDIA driver "
  fi
fi
if grep -q "^comm nccl " "$W/clean.out"; then
  grep -A1 "^comm nccl" "$W/clean.out" | grep -Eq "NCCL [0-9]+\.[0-9]+\.[0-9]+ loaded; built against [0-9]+\.[0-9]+\.[0-9]+" ||
    fail "nccl: $(grep -A1 '^comm nccl' "$W/clean.out")"
fi

# --- the verbs plugin's report on a pretend sysfs tree: one port up, one down
if grep -q "^comm verbs " "$W/clean.out"; then
  ib=$W/ib/sys/class/infiniband/mlx5_0/ports
  mkdir -p "$ib/1" "$ib/2"
  echo "4: ACTIVE" >"$ib/1/state"; echo "1: DOWN" >"$ib/2/state"
  for p in 1 2; do echo InfiniBand >"$ib/$p/link_layer"; echo "200 Gb/sec (4X HDR)" >"$ib/$p/rate"; done
  doctor verbs "PLAIT_VERBS_SYSFS_ROOT=$W/ib" --
  has verbs "mlx5_0 port 1: ACTIVE, InfiniBand, 200 Gb/sec (4X HDR)"
  at verbs "comm verbs" "problem: mlx5_0 port 2: DOWN, InfiniBand, 200 Gb/sec (4X HDR) is not ACTIVE"
fi
echo "doctor OK: $(grep -c . "$W/clean.out") lines on a clean run; problems found and fixed in $(ls "$W"/*.rc | wc -l) runs"
