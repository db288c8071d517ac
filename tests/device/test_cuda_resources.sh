#!/usr/bin/env bash
# Every kernel of the cuda plugin fits the GPU at its launch size, as nvcc
# compiles it: release and debug (-G) builds for sm_90, the debug build for
# sm_80 (debug builds use the most registers; no GPU needed: the compiler's
# own report).
# make test checks one of the three builds (below); make test-all all three.
#
# A block fits on a multiprocessor only while registers x threads stay
# within its 65536 registers (allocated per warp in units of 256, so a
# thread's count rounds up to a multiple of 8); a launch that does not fit
# fails on the GPU alone ("too many resources requested for launch"). Each
# kernel therefore declares its largest block with __launch_bounds__
# (PC_KERNEL in kcommon.cuh; the emulator refuses a launch over it), which
# makes the compiler keep every thread within its share. This checks, per
# kernel and build: the bound is declared (.maxntid in the PTX), the
# registers ptxas used, rounded, times the bound fit in 65536, and static
# shared memory stays within the 48 KiB a block gets without opting in.
#
# Environment: NVCC (the CUDA compiler), PLAIT_SOURCE_DIR.
set -uo pipefail
src=${PLAIT_SOURCE_DIR:?}/plugins/device/cuda
nvcc=${NVCC:-nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
checked=0
# make test checks one of the three builds, chosen by the commit under test
# (so successive commits check all three: each build is a compile of every
# .cu file, minutes of one core); make test-all (PLAIT_TEST_ALL=1) checks
# all three
builds=("90 release" "90 debug" "80 debug")
if [ -z "${PLAIT_TEST_ALL:-}" ]; then
  c=$(git -C "$PLAIT_SOURCE_DIR" rev-parse --short=7 HEAD 2>/dev/null || echo 0)
  builds=("${builds[$((16#$c % 3))]}")
  echo "builds checked: ${builds[*]} (from commit $c; make test-all checks 90 release, 90 debug, 80 debug)"
fi
for build in "${builds[@]}"; do
  read -r arch mode <<<"$build"
  flags=(-O3)
  [ $mode = debug ] && flags=(-G)
  for cu in "$src"/*.cu; do
      f=$(basename "$cu" .cu)
      rm -rf "${work:?}/keep" && mkdir "$work/keep"
      # one compile: the PTX kept (its .maxntid) and ptxas's report
      if ! "$nvcc" -std=c++17 -arch=sm_$arch "${flags[@]}" -I"$src" -I"$PLAIT_SOURCE_DIR/sdk/include" -cubin \
        --resource-usage -keep -keep-dir "$work/keep" -o "$work/keep/$f.cubin" "$cu" >"$work/$f.res" 2>&1; then
        echo "FAIL $f.cu (sm_$arch $mode) does not compile:"
        head -n 20 "$work/$f.res"
        fails=$((fails + 1))
        continue
      fi
      mv "$work/keep/$f.ptx" "$work/$f.ptx"
      # entry -> its .maxntid (first number), from the PTX
      awk '/^\.visible \.entry|^\.entry|^\.weak \.entry/ { e = $NF; sub(/\(.*/, "", e); bound[e] = 0; cur = e }
           /\.maxntid/ && cur != "" { n = $2; sub(/,.*/, "", n); bound[cur] = n; cur = "" }
           /^\{/ { cur = "" }
           END { for (e in bound) print e, bound[e] }' "$work/$f.ptx" >"$work/$f.bounds"
      # entry -> registers and static shared bytes, from ptxas
      awk '/Compiling entry function/ { e = $0; sub(/.*function .\047?/, "", e); sub(/\047.*/, "", e) }
           /Used [0-9]+ registers/ && e != "" { r = $0; sub(/.*Used /, "", r); sub(/ registers.*/, "", r)
             s = 0; if (match($0, /[0-9]+ bytes smem/)) { s = substr($0, RSTART, RLENGTH); sub(/ bytes smem/, "", s) }
             print e, r, s; e = "" }' "$work/$f.res" >"$work/$f.regs"
      while read -r entry bound; do
        read -r _ regs smem <<<"$(grep -F "$entry " "$work/$f.regs" | head -n 1)"
        name=$(echo "$entry" | sed -E 's/^_Z[0-9]+//; s/[A-Z].*//')
        checked=$((checked + 1))
        if [ -z "${regs:-}" ]; then
          echo "FAIL $f.cu $name (sm_$arch $mode): ptxas reported no registers for it"
          fails=$((fails + 1))
          continue
        fi
        rounded=$(((regs + 7) / 8 * 8))
        if [ "$bound" = 0 ]; then
          echo "FAIL $f.cu $name (sm_$arch $mode): no __launch_bounds__ ($regs registers a thread: blocks over $((65536 / rounded)) threads would not fit)"
          fails=$((fails + 1))
        elif [ $((rounded * bound)) -gt 65536 ]; then
          echo "FAIL $f.cu $name (sm_$arch $mode): $regs registers x $bound threads exceeds 65536"
          fails=$((fails + 1))
        elif [ "${smem:-0}" -gt 49152 ]; then
          echo "FAIL $f.cu $name (sm_$arch $mode): $smem bytes of static shared memory (a block gets 48 KiB)"
          fails=$((fails + 1))
        elif [ "$arch" = 90 ]; then
          printf 'ok   %-12s %-32s %-7s bound %4d  %3d registers (%5d of 65536)  %5d B shared\n' \
            "$f.cu" "$name" "$mode" "$bound" "$regs" $((rounded * bound)) "${smem:-0}"
        fi
      done <"$work/$f.bounds"
  done
done
[ "$checked" -gt 0 ] || { echo "FAIL no kernel found in $src"; fails=$((fails + 1)); }
echo "$checked kernel builds checked (sm_80 lines left out when they pass)"
if [ "$fails" -gt 0 ]; then
  echo "FAILED: $fails"
  exit 1
fi
echo "passed"
