#!/usr/bin/env bash
# Packs this checkout and its build for a GPU machine that has the NVIDIA
# driver, CUDA, cmake and Python with PyTorch, but none of plait's Debian
# libraries and no package registry (docs/gpu.md, "Verifying on a GPU").
#
#   scripts/gpu-bundle.sh [BUILD]     (default: build) writes .gpu/ (git-ignored):
#     tree.txz      the checkout with its build, at its absolute path
#     libs.txz      the Debian libraries the build links (inih, OpenBLAS, cmocka, hwloc, liburing, ...)
#     on-device.sh  unpacks both there and runs a command in the checkout
#
# There: bash .gpu/on-device.sh COMMAND...   e.g. bash .gpu/on-device.sh bash scripts/gpu-session.sh
#
# The tree is unpacked at the same absolute path as here because ctest's
# files name absolute paths. on-device.sh puts the carried libraries, the
# build's own and the CUDA/NCCL libraries of the machine's Python
# environment on LD_LIBRARY_PATH. It leaves OPENBLAS_CORETYPE alone: plait
# chooses OpenBLAS's kernels from cpuid itself (docs/cpu.md). Normally
# called by scripts/gpu-session.sh --pack.
set -euo pipefail
build=${1:-build}
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ -d "$build" ] || { echo "gpu-bundle: no build directory '$build': build first" >&2; exit 1; }
build=$(cd "$build" && pwd)
case $build in
  "$root"/*) ;;
  *) echo "gpu-bundle: the build directory $build must be inside the checkout $root" >&2; exit 1 ;;
esac
# .gpu/ stays out of git's view without touching the tracked .gitignore
if [ -d .git ] || [ -f .git ]; then
  ex=$(git rev-parse --git-path info/exclude)
  grep -qx '/.gpu/' "$ex" 2>/dev/null || { mkdir -p "$(dirname "$ex")"; echo '/.gpu/' >>"$ex"; }
fi
rm -rf .gpu && mkdir -p .gpu/libs
rel=${root#/}
brel=${build#/}
# the tree: sources and the build, without git, run outputs, the tests'
# scratch folders (BUILD/tests/*-work, each made again by its test),
# objects and the checkout's other build directories (CI's sanitizer, clang
# and fuzzing builds would take the bundle past the 64 MiB a device call carries)
other_builds=()
for d in "$root"/*/; do
  d=${d%/}
  if [ -f "$d/CMakeCache.txt" ] && [ "$d" != "$build" ]; then other_builds+=(--exclude="${d#/}"); fi
done
tar -C / -cJf .gpu/tree.txz --exclude="$rel/.git" --exclude="$rel/.gpu" --exclude="$rel/runs" \
  --exclude="$brel/tests/*-work" --exclude='*.o' "${other_builds[@]}" "$rel"
# the Debian libraries the build links (ldd of its programs and plugins,
# which names their libraries' own needs too): every one but the C
# library's parts and the compiler's runtime, which the GPU machine has, and
# CUDA's, which it has in its own version
# (ldd fails on the scripts among them: not dynamic executables)
{ find "$build/bin" "$build/lib" "$build/tests" -type f \( -name '*.so*' -o -perm -u+x \) \
  ! -path '*-work/*' ! -path '*/CMakeFiles/*' -exec ldd {} + 2>/dev/null || true; } |
  awk '$2 == "=>" && $3 ~ /^\/(usr\/)?lib/ { print $3 }' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|libutil|ld-linux[^/]*|libgcc_s|libstdc\+\+)\.so' |
  while read -r p; do cp -L "$p" .gpu/libs/; done
[ -n "$(ls .gpu/libs)" ] || echo "gpu-bundle: no library found to carry (ldd of $build)" >&2
tar -C .gpu -cJf .gpu/libs.txz libs && rm -rf .gpu/libs
cat >.gpu/on-device.sh <<EOS
#!/usr/bin/env bash
# Written by scripts/gpu-bundle.sh: unpacks the checkout and runs a command in it.
set -e
here=\$(cd "\$(dirname "\$0")" && pwd)
[ -d "/$brel" ] || tar -C / -xJf "\$here/tree.txz"
mkdir -p /tmp/plait-libs && tar -C /tmp/plait-libs -xJf "\$here/libs.txz"
nv=\$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
lp=/$brel/lib:/tmp/plait-libs/libs
for d in "\$nv/nvidia/nccl/lib" "\$nv/nvidia/cu13/lib" "\$nv/nvidia/cu12/lib" "\$nv/nvidia/cublas/lib" \\
         "\$nv/nvidia/cuda_runtime/lib" /usr/local/cuda/lib64; do
  [ -d "\$d" ] && lp=\$lp:\$d
done
export LD_LIBRARY_PATH=\$lp\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
cd "/$rel"
"\$@"
EOS
chmod +x .gpu/on-device.sh
du -sh .gpu
