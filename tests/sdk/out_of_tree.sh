#!/usr/bin/env bash
# usage: out_of_tree.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
test -f "$prefix/include/plait/plugin.h"
test -f "$prefix/lib/pkgconfig/plait.pc" || test -f "$prefix/lib/x86_64-linux-gnu/pkgconfig/plait.pc"

# 1. CMake package
cmake -S "$src/sdk/examples/sgd" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" >/dev/null
cmake --build "$work/cmake-build" >/dev/null
lib=$(find "$work/cmake-build" -name 'libplait-optim-sgd.so' | head -n1)
test -n "$lib"

# 2. pkg-config
pcdir=$(dirname "$(find "$prefix" -name plait.pc | head -n1)")
mkdir -p "$work/pc-build"
cc -std=c17 -Wall -Wextra -Werror -fPIC -shared $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags plait) \
   "$src/sdk/examples/sgd/sgd.c" $(PKG_CONFIG_PATH=$pcdir pkg-config --libs plait) -Wl,--no-undefined \
   -o "$work/pc-build/libplait-optim-sgd.so"
# the entry symbol is the only export
exports=$(nm -D --defined-only "$work/pc-build/libplait-optim-sgd.so" | awk '$2 == "T" {print $3}')
[ "$exports" = "plait_plugin_v1" ] || { echo "unexpected exports: $exports"; exit 1; }

# 3. plait lists it, with its ABI, from PLAIT_PLUGIN_PATH
out=$(PLAIT_PLUGIN_PATH=$(dirname "$lib") "$build/bin/plait" plugins)
echo "$out"
echo "$out" | grep -E '^optim +sgd +1\.3\.0 +1\.3 +available' >/dev/null
echo "out-of-tree plugin OK"
