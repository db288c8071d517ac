#!/usr/bin/env bash
# The core's folders form layers (core/LAYERS, lowest first; see
# docs/architecture.md): a file may include headers of its own folder and of
# folders below it, never above. Since a call needs a declaration, this also
# rules out calls upward and circles of mutual calls between folders.
# Fails naming every offending line, and every folder missing from the list.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
cd "$root"
mapfile -t layers < <(grep -v '^\s*#' core/LAYERS | grep -v '^\s*$')
declare -A rank
for i in "${!layers[@]}"; do rank[${layers[$i]}]=$i; done
bad=0
for dir in core/*/; do
    folder=$(basename "$dir")
    if [[ -z "${rank[$folder]+x}" ]]; then
        echo "FAIL: core/$folder is not in core/LAYERS (add it where it belongs; docs/architecture.md says how)"
        bad=1
        continue
    fi
    for f in "$dir"*.[ch]; do
        [[ -e "$f" ]] || continue
        while IFS=: read -r line target; do
            [[ -n "${rank[$target]+x}" ]] || continue
            if (( rank[$target] > rank[$folder] )); then
                echo "FAIL: $f:$line: $folder includes $target/, a higher layer"
                bad=1
            fi
        done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$f" |
                 sed -E 's/^([0-9]+):[[:space:]]*#[[:space:]]*include[[:space:]]*"([a-z_]+)\/.*/\1:\2/')
    done
done
# The CPU kernels are linked into the cpu device plugin too, which cannot link
# the core: they include no other folder of it.
if grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' core/kernels/*.[ch] | grep -v '"kernels/'; then
    echo "FAIL: core/kernels includes another folder of the core (it is linked into the cpu device plugin)"
    bad=1
fi
# The host table is the plugins' door into the core, not the core's own.
if grep -rn 'plait_host_table()' core --include=*.c | grep -v '^core/host/host_table.c:'; then
    echo "FAIL: plait_host_table() is called outside core/host (modules call each other directly)"
    bad=1
fi
if (( bad )); then exit 1; fi
echo "layers ok: ${layers[*]}"
