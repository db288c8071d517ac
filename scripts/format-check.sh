#!/usr/bin/env bash
# Are the lines a commit changed formatted as .clang-format says? Only those
# lines are checked (clang-format 14's git-clang-format): the tree is not
# reformatted wholesale. .ci/run runs it on HEAD.
#
#   scripts/format-check.sh [COMMIT]   default HEAD, against its parent
#
# Exits 1 showing the diff clang-format wants, 0 when there is none (or no
# parent to compare with, said so).
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:-HEAD}
if ! git rev-parse --verify -q "$commit~1" >/dev/null; then
  echo "format check skipped: $commit has no parent here (a root commit or a shallow clone)"
  exit 0
fi
# git-clang-format 14 exits 0 either way: what it prints says it
out=$(git clang-format-14 --binary clang-format-14 --diff "$commit~1" "$commit")
if grep -q '^diff --git' <<<"$out"; then
  echo "$out"
  echo "format check: the lines above, changed by $(git rev-parse --short "$commit"), are not formatted as"
  echo ".clang-format says; on a checkout of it, run"
  echo "  git clang-format-14 --binary clang-format-14 HEAD~1"
  echo "and amend the commit"
  exit 1
fi
echo "format check: the lines $(git rev-parse --short "$commit") changes are formatted"
