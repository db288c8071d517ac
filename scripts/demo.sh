#!/usr/bin/env bash
# `make demo`: the main job plait can run today.
set -euo pipefail
build=${1:-build}
plait=$build/bin/plait
echo "== plait $($plait --version | cut -d' ' -f2-)"
echo "== plugins"
$plait plugins
