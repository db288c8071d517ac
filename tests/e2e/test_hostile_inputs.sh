#!/usr/bin/env bash
# What plait reads, attacked: every input is recognised for what it is or
# refused naming why, and nothing waits forever.
#  1. a FIFO with no writer in place of any path a command reads or writes
#     (corpora, inputs to encode and decode, tokenizer files, the
#     --comm-csv table, a run directory's metrics.csv, rank log and .lock):
#     refused at once naming "a FIFO" (every command runs under a 10 s
#     timeout: a hang fails the test).
#  2. `data prepare` interrupted (SIGINT, SIGTERM) removes its staging
#     directory and ends by the signal; one killed (SIGKILL) leaves it, and
#     the next run removes it.
#  3. plugin files that crash (SIGSEGV in a constructor or a probe), exit
#     or hang while loaded: `plait plugins` lists every other plugin and
#     names each broken file with what happened; a command that loads one
#     dies naming the file.
source "$(dirname "$0")/lib.sh"

# refused NAME EXPECTED CMD...: CMD exits non-zero within 10 s printing EXPECTED
refused() {
  local name=$1 want=$2 rc=0; shift 2
  timeout 10 "$@" </dev/null >"$E2E_WORK/$name.out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "$name: $* still ran after 10 s"
  [ $rc -ne 0 ] || fail "$name: $* succeeded: $(tail -n 3 "$E2E_WORK/$name.out")"
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: unclear refusal: $(tail -n 3 "$E2E_WORK/$name.out")"
}
GPT2=$PLAIT_SOURCE_DIR/data/tokenizers/gpt2

# --- 1. FIFOs without a writer
fifo=$E2E_WORK/fifo
mkfifo "$fifo"
refused fifo-train-corpus "input file $fifo is a FIFO" "$PLAIT_BIN" tokenizer train "$fifo" --vocab 300 --out "$E2E_WORK/tk"
refused fifo-encode "input file $fifo is a FIFO" "$PLAIT_BIN" tokenizer encode "$GPT2" "$fifo"
refused fifo-decode "input file $fifo is a FIFO" "$PLAIT_BIN" tokenizer decode "$GPT2" "$fifo"
refused fifo-prepare "input file $fifo is a FIFO" "$PLAIT_BIN" data prepare "$fifo" --tokenizer "$GPT2" --out "$E2E_WORK/dp"
refused fifo-tokenizer "tokenizer $fifo is a FIFO" "$PLAIT_BIN" tokenizer encode "$fifo" "$CFG"
mkdir -p "$E2E_WORK/tokfifo"
cp "$GPT2/vocab.json" "$E2E_WORK/tokfifo/"
mkfifo "$E2E_WORK/tokfifo/merges.txt"
refused fifo-merges "merges.txt is a FIFO" "$PLAIT_BIN" tokenizer encode "$E2E_WORK/tokfifo" "$CFG"
refused fifo-comm-csv "--comm-csv file $fifo is a FIFO" "$PLAIT_BIN" plan "$CFG" --ranks 2 --comm-csv "$fifo"
[ ! -e "$E2E_WORK/tk" ] && [ ! -e "$E2E_WORK/dp" ] || fail "a refused command left an output directory"
for f in metrics.csv rank-0.log .lock; do
  rm -rf "${E2E_WORK:?}/runfifo"
  mkdir -p "$E2E_WORK/runfifo"
  mkfifo "$E2E_WORK/runfifo/$f"
  rc=0
  timeout 30 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/runfifo" run.steps=2 >"$E2E_WORK/runfifo.out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "a FIFO named $f in the run directory: plait train hung"
  grep -qF "$E2E_WORK/runfifo/$f is a FIFO, not a regular file" "$E2E_WORK/runfifo.out" ||
    fail "a FIFO named $f in the run directory was not named: $(tail -n 2 "$E2E_WORK/runfifo.out")"
done

# --- 2. interrupted data prepare leaves nothing
for _ in $(seq 8); do cat data/corpus.txt; done >"$E2E_WORK/corpus8.txt"
# prepare_until_staged: start data prepare in the background (its own
# process group, as from a terminal: SIGINT is not ignored) and wait until
# its staging directory exists; its pid in $job
prepare_until_staged() {
  set -m
  "$PLAIT_BIN" data prepare "$E2E_WORK/corpus8.txt" --tokenizer "$GPT2" --out "$E2E_WORK/ds" --shard-tokens 1000 \
    >"$E2E_WORK/ds.out" 2>&1 &
  job=$!
  set +m
  for _ in $(seq 200); do
    [ -d "$E2E_WORK/ds.staging-$job" ] && return 0
    kill -0 $job 2>/dev/null || break
    sleep 0.05
  done
  fail "data prepare made no staging directory: $(tail -n 2 "$E2E_WORK/ds.out")"
}
for sig in INT TERM; do
  prepare_until_staged
  kill -$sig $job
  rc=0
  wait $job || rc=$?
  want=$((128 + $(kill -l $sig)))
  [ $rc -eq $want ] || fail "data prepare after SIG$sig exited $rc, not $want: $(tail -n 2 "$E2E_WORK/ds.out")"
  [ ! -e "$E2E_WORK/ds.staging-$job" ] || fail "SIG$sig left $E2E_WORK/ds.staging-$job ($(ls "$E2E_WORK/ds.staging-$job" | wc -l) files)"
  [ ! -e "$E2E_WORK/ds" ] || fail "SIG$sig: an output directory appeared"
done
prepare_until_staged
kill -KILL $job
wait $job || true
[ -d "$E2E_WORK/ds.staging-$job" ] || fail "SIGKILL: no staging directory left to clean (the test is broken)"
"$PLAIT_BIN" data prepare data/corpus.txt --tokenizer "$GPT2" --out "$E2E_WORK/ds" >"$E2E_WORK/ds2.out" 2>&1 ||
  fail "data prepare after a killed one failed: $(tail -n 2 "$E2E_WORK/ds2.out")"
[ ! -e "$E2E_WORK/ds.staging-$job" ] || fail "the staging directory of a killed data prepare was not removed by the next run"
grep -qF "removed $E2E_WORK/ds.staging-$job, left behind by process $job, which is gone" "$E2E_WORK/ds2.out" ||
  fail "the removal of a stale staging directory was not said: $(head -n 2 "$E2E_WORK/ds2.out")"

# --- 3. plugin files that crash, exit or hang while loaded
crashing=$(dirname "$(dirname "$PLAIT_BIN")")/tests/plugins-crashing
[ -f "$crashing/libplait-optim-crashctor.so" ] || fail "no crashing test plugins in $crashing"
rc=0
PLAIT_PLUGIN_PATH=$crashing PLAIT_PLUGIN_SCAN_TIMEOUT=2 timeout 30 "$PLAIT_BIN" plugins >"$E2E_WORK/plugins.out" 2>&1 || rc=$?
[ $rc -eq 0 ] || fail "plait plugins with a crashing plugin file exited $rc: $(tail -n 3 "$E2E_WORK/plugins.out")"
for want in "optim +fine +0.0.1 .* available" "device +cpu .* available" "comm +tcp .* available"; do
  grep -Eq "^$want" "$E2E_WORK/plugins.out" || fail "plait plugins did not list /$want/ beside crashing files"
done
for f in crashctor crashprobe; do
  grep -A1 "libplait-optim-$f.so" "$E2E_WORK/plugins.out" | grep -q "refused: it crashed while loading or probing (Segmentation fault, signal 11)" ||
    fail "plait plugins did not name $f's crash: $(grep -A1 "$f" "$E2E_WORK/plugins.out")"
done
grep -A1 "libplait-optim-exitctor.so" "$E2E_WORK/plugins.out" | grep -q "ended the process while loading or probing (exit status 3)" ||
  fail "plait plugins did not name exitctor's exit"
grep -A1 "libplait-optim-hangprobe.so" "$E2E_WORK/plugins.out" | grep -q "did not finish within 2 s" ||
  fail "plait plugins did not name hangprobe's hang"
rc=0
PLAIT_PLUGIN_PATH=$crashing timeout 30 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/crash" optim.plugin=crashctor \
  >"$E2E_WORK/crash.out" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "plait train with a crashing optim plugin exited $rc"
grep -qF "the plugin file $crashing/libplait-optim-crashctor.so crashed while it was loaded (signal 11)" "$E2E_WORK/crash.out" ||
  fail "plait train died of a crashing plugin without naming it: $(tail -n 2 "$E2E_WORK/crash.out")"
echo "ok"
