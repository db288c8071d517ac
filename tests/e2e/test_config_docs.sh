#!/usr/bin/env bash
# The configs users start from: each is valid, and every key in them carries
# a comment (inline '; ...'), so a reader never has to guess what a value does.
source "$(dirname "$0")/lib.sh"
# (valid anywhere: whether a config fits this machine's memory is another
# question, which gpt2-124m's 24 GiB at micro-batch 16 answers no on a small
# one; test_memory_fit checks that answer)
for f in configs/*.ini configs/large/*.ini; do
  "$PLAIT_BIN" config check "$f" run.memory_check=false >/dev/null 2>"$E2E_WORK/check.err" || fail "$f: $(cat "$E2E_WORK/check.err")"
  bare=$(awk '/^[A-Za-z_0-9.]+ *=/ && !/;/ { printf "%s:%d: %s\n", FILENAME, FNR, $0 }' "$f")
  [ -z "$bare" ] || fail "keys without a comment:
$bare"
done
# the cluster files of plait plan: they load, and every key is commented too
for f in configs/clusters/*.ini; do
  "$PLAIT_BIN" plan configs/gpt-tiny.ini --ranks 1 --cluster "$f" >/dev/null 2>"$E2E_WORK/plan.err" ||
    fail "$f: $(cat "$E2E_WORK/plan.err")"
  bare=$(awk '/^[A-Za-z_0-9.]+ *=/ && !/;/ { printf "%s:%d: %s\n", FILENAME, FNR, $0 }' "$f")
  [ -z "$bare" ] || fail "keys without a comment:
$bare"
done
# the models of configs/large/ are planned, never trained here: each finds a
# layout that fits a Selene-like cluster
for f in configs/large/*.ini; do
  "$PLAIT_BIN" plan "$f" --ranks 1536 --cluster configs/clusters/selene.ini >"$E2E_WORK/plan.out" 2>&1 ||
    fail "$f: $(cat "$E2E_WORK/plan.out")"
done
# the Llama 3.1 and Qwen3 shapes: the parameters `config check` counts within 1% of
# the published 8.0B, 70.6B and 405.9B (Meta) and 8.2B and 30.5B (Qwen)
for pair in "llama3-8b 8.0e9" "llama3-70b 70.6e9" "llama3-405b 405.9e9" "qwen3-8b 8.2e9" "qwen3-30b-a3b 30.5e9"; do
  read -r name want <<<"$pair"
  n=$("$PLAIT_BIN" config check "configs/large/$name.ini" run.memory_check=false |
    sed -n 's/^model: .*: \([0-9]*\) parameters.*/\1/p')
  awk -v n="$n" -v w="$want" 'BEGIN { d = n - w; if (d < 0) d = -d; exit !(n != "" && d <= 0.01 * w) }' ||
    fail "configs/large/$name.ini: config check counts ${n:-no} parameters, not within 1% of $want"
  echo "$name: $n parameters (published $want)"
done
echo "config docs OK: $(ls configs/*.ini configs/large/*.ini | wc -l) configs, $(ls configs/clusters/*.ini | wc -l) cluster files"
