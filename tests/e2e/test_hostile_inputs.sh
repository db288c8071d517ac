#!/usr/bin/env bash
# What plait reads, attacked: every input is recognised for what it is or
# refused naming why, and nothing waits forever.
#  1. a FIFO with no writer in place of any path a command reads or writes
#     (corpora, inputs to encode and decode, tokenizer files, the
#     --comm-csv table, a run directory's metrics.csv, rank log and .lock, a
#     resumed run's metrics.csv, the MFU cache, a plugin file):
#     refused at once naming "a FIFO" (every command runs under a 60 s
#     timeout: a hang fails the test).
#  2. `data prepare` interrupted (SIGINT, SIGTERM) removes its staging
#     directory and ends by the signal; one killed (SIGKILL) leaves it, and
#     the next run removes it.
#  3. plugin files that crash (SIGSEGV in a constructor or a probe), exit
#     or hang while loaded: `plait plugins` lists every other plugin and
#     names each broken file with what happened; a command that loads one
#     dies naming the file.
#  4. garbage and extreme numbers in every kind of input: config values,
#     command-line flags, launcher variables, config files, data paths,
#     tokenizer files; each refused at once naming the value and what is
#     allowed. As another user (when run as root): an unwritable out_dir,
#     an unreadable data file or checkpoint.
#  5. the newest paths: llama configs and Hugging Face llama directories
#     changed one way each, tokenizer.json files, cluster files, gradient
#     compression beside ZeRO, pipeline schedules, `plait doctor` and the
#     plugin path: each refused naming what and why.
source "$(dirname "$0")/lib.sh"
rm -rf "${E2E_WORK:?}"/* # what a failed run kept (FIFOs, staging directories)

# refused NAME EXPECTED CMD...: CMD exits non-zero printing EXPECTED; one
# still running after 60 s (a refusal takes well under a second) hangs
refused() {
  local name=$1 want=$2 rc=0; shift 2
  timeout 60 "$@" </dev/null >"$E2E_WORK/$name.out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "$name: $* still ran after 60 s"
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
refused fifo-comm-csv "plait: error: --comm-csv file $fifo is a FIFO" "$PLAIT_BIN" plan "$CFG" --ranks 2 --comm-csv "$fifo"
refused fifo-cluster "plait: error: cluster file $fifo is a FIFO" "$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$fifo"
refused fifo-plan-config "plait: error: config file $fifo is a FIFO" "$PLAIT_BIN" plan "$fifo" --ranks 2
refused fifo-sample "$fifo is a FIFO; plait sample reads a checkpoint directory" "$PLAIT_BIN" sample "$fifo"
refused fifo-export "$fifo is a FIFO, not a checkpoint" "$PLAIT_BIN" export "$fifo" --format hf --out "$E2E_WORK/ex"
[ ! -e "$E2E_WORK/tk" ] && [ ! -e "$E2E_WORK/dp" ] || fail "a refused command left an output directory"
# a plugin file that is a FIFO (dlopen would wait for a writer) or a link to a device
mkdir -p "$E2E_WORK/plugfifo"
mkfifo "$E2E_WORK/plugfifo/libplait-optim-ff.so"
ln -s /dev/zero "$E2E_WORK/plugfifo/libplait-optim-zz.so"
refused fifo-plugin "plugin file $E2E_WORK/plugfifo/libplait-optim-ff.so is a FIFO" env "PLAIT_PLUGIN_PATH=$E2E_WORK/plugfifo" \
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/plugrun" optim.plugin=ff
refused zero-plugin "plugin file $E2E_WORK/plugfifo/libplait-optim-zz.so is a character device" \
  env "PLAIT_PLUGIN_PATH=$E2E_WORK/plugfifo" "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/plugrun" optim.plugin=zz
refused fifo-plugin-test "plugin file $E2E_WORK/plugfifo/libplait-optim-ff.so is a FIFO" \
  "$PLAIT_BIN" plugin test "$E2E_WORK/plugfifo/libplait-optim-ff.so"
PLAIT_PLUGIN_PATH=$E2E_WORK/plugfifo timeout 60 "$PLAIT_BIN" plugins >"$E2E_WORK/plugfifo.out" 2>&1 ||
  fail "plait plugins with a FIFO in the plugin path failed or hung: $(tail -n 2 "$E2E_WORK/plugfifo.out")"
grep -qF "plugin file $E2E_WORK/plugfifo/libplait-optim-ff.so is a FIFO" "$E2E_WORK/plugfifo.out" ||
  fail "plait plugins did not name a FIFO in the plugin path: $(grep -A1 ff "$E2E_WORK/plugfifo.out")"
# a resumed run's metrics.csv, and the MFU cache, as FIFOs
rm -rf "${E2E_WORK:?}/resfifo"
"$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/resfifo" run.steps=1 >"$E2E_WORK/resfifo.out" 2>&1 || fail "a run failed"
rm "$E2E_WORK/resfifo/metrics.csv"
mkfifo "$E2E_WORK/resfifo/metrics.csv"
refused fifo-resume "$E2E_WORK/resfifo/metrics.csv is a FIFO" \
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/resfifo" run.steps=2 --resume
mkdir -p "$E2E_WORK/cache/plait"
mkfifo "$E2E_WORK/cache/plait/peak.tsv"
# (without a hand-set OPENBLAS_CORETYPE, which doctor counts a problem of
# its own on a CPU whose kernels it holds back: some machines' environments
# set one)
XDG_CACHE_HOME=$E2E_WORK/cache timeout 60 env -u OPENBLAS_CORETYPE "$PLAIT_BIN" doctor >"$E2E_WORK/cachefifo.out" 2>&1 ||
  fail "plait doctor with a FIFO as the MFU cache: $(tail -n 2 "$E2E_WORK/cachefifo.out")"
grep -q "^mfu peak  *not measured yet" "$E2E_WORK/cachefifo.out" || fail "a FIFO as the MFU cache was read as one"
for f in metrics.csv memory.csv rank-0.log .lock; do
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
PLAIT_PLUGIN_PATH=$crashing PLAIT_PLUGIN_SCAN_TIMEOUT=10 timeout 120 "$PLAIT_BIN" plugins >"$E2E_WORK/plugins.out" 2>&1 || rc=$?
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
grep -A1 "libplait-optim-hangprobe.so" "$E2E_WORK/plugins.out" | grep -q "did not finish within 10 s" ||
  fail "plait plugins did not name hangprobe's hang"
rc=0
PLAIT_PLUGIN_PATH=$crashing timeout 30 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/crash" optim.plugin=crashctor \
  >"$E2E_WORK/crash.out" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "plait train with a crashing optim plugin exited $rc"
grep -qF "the plugin file $crashing/libplait-optim-crashctor.so crashed while it was loaded (signal 11)" "$E2E_WORK/crash.out" ||
  fail "plait train died of a crashing plugin without naming it: $(tail -n 2 "$E2E_WORK/crash.out")"

# --- 4. garbage and extreme numbers everywhere
W=$E2E_WORK/g
mkdir -p "$W"
# numbers in the config and on the command line
while IFS='|' read -r want args; do
  # shellcheck disable=SC2086
  refused num "$want" "$PLAIT_BIN" $args
done <<EOF2
value '-1' is out of range [0, 1000000000000]|config check $CFG run.steps=-1
value '9223372036854775807' is out of range|config check $CFG run.steps=9223372036854775807
value '0' is out of range [1, 4096]|config check $CFG model.n_layer=0
global_batch is not a multiple of dp x micro_batch|config check $CFG data.micro_batch=1000000000
sizes too large|config check $CFG model.block_size=1000000
value '-1' is out of range [0, 9200000000000000000]|config check $CFG run.seed=-1
value '0' is out of range [0.01, 1e+07]|config check $CFG comm.timeout=0
value 'nan' is not a finite number|config check $CFG optim.lr=nan
value '1e999' is not a finite number|config check $CFG optim.lr=1e999
--tokens -5: must be 0..1000000|sample $W --tokens -5
--temperature nan: must be 0..100|sample $W --temperature nan
--top-k 99999999999: must be 0 (all) .. 1073741824|sample $W --top-k 99999999999
--top-p 0: must be above 0 and at most 1|sample $W --top-p 0
--top-p 1.5: must be above 0 and at most 1|sample $W --top-p 1.5
--seed -1: must be an integer from 0 to 18446744073709551615|sample $W --seed -1
--vocab 4294967296: must be an integer 257..10000000|tokenizer train $CFG --vocab 4294967296 --out $W/tk
--shard-tokens 99999999999: must be 1..2147483647|data prepare $CFG --tokenizer $GPT2 --out $W/dp --shard-tokens 99999999999
--val-fraction nan: must be 0 <= F < 1|data prepare $CFG --tokenizer $GPT2 --out $W/dp --val-fraction nan
--dtype u8: must be auto, u16 or u32|data prepare $CFG --tokenizer $GPT2 --out $W/dp --dtype u8
bad size '16E'|bench comm -n 2 --op allreduce --max 16E
--factor must be > 1|bench comm -n 2 --op allreduce --factor 1
use --threads N instead of -n|bench comm -n 2 --op allreduce --comm threads
-n needs a number of ranks in 1..4096|train $CFG -n 99999999999
-n needs a number of ranks in 1..4096|train $CFG -n -1
ranks must be 1..1048576, not '0'|plan $CFG --ranks 0
tp 3 (the values given) does not divide 4 ranks|plan $CFG --ranks 4 --tp 3
no combination of the axes' values has dp x cp x tp x pp = 4 ranks|plan $CFG --ranks 4 --dp 4 --tp 2 --pp 1
tp 2 (the values given) does not divide 3 ranks|bench sweep $CFG -n 3 --tp 2
EOF2
# the launcher's variables (torchrun-style), garbage
while IFS='|' read -r want vars; do
  # shellcheck disable=SC2086
  refused env "$want" env $vars "$PLAIT_BIN" train "$CFG" "run.out_dir=$W/env" comm.timeout=5
done <<EOF2
WORLD_SIZE='0' is not an integer in 1..1000000|RANK=0 WORLD_SIZE=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555
RANK=5 is not below WORLD_SIZE=2|RANK=5 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555
RANK='x' is not an integer|RANK=x WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555
is not host:port with a port in 1..65535|RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=70000
key 'timeout' in [comm]: value 'abc' is not a finite number|PLAIT_COMM_TIMEOUT=abc
did you mean PLAIT_RUN_STEPS?|PLAIT_RUN_STEPZ=3
EOF2
# config files that are not INI text
mkdir -p "$W/cdir"
printf '[model]\nn_lay\0er = 3\n' >"$W/nul.ini"
head -c 3000 /dev/urandom | tr -d '\n' | tr '\000' x >"$W/rand.ini"
printf '[model]\nn_layer = 2\n[model]\nn_layer = 3\n' >"$W/dup.ini"
refused cfg-dir "config file $W/cdir is a directory" "$PLAIT_BIN" config check "$W/cdir"
refused cfg-nul "$W/nul.ini: contains NUL bytes; not a text file" "$PLAIT_BIN" config check "$W/nul.ini"
refused cfg-rand "$W/rand.ini" "$PLAIT_BIN" config check "$W/rand.ini"
refused cfg-dup "[model] key 'n_layer' is given twice (first on line 2)" "$PLAIT_BIN" config check "$W/dup.ini"
refused cfg-null "config file /dev/null is a character device" "$PLAIT_BIN" config check /dev/null
printf '\357\273\277[model]\r\nn_layer = 3\r\n' >"$W/bom-crlf.ini"
"$PLAIT_BIN" config show "$W/bom-crlf.ini" >"$W/bom-crlf.out" 2>&1 || fail "a config with a BOM and CRLF lines was refused"
grep -q "^n_layer = 3 " "$W/bom-crlf.out" || fail "a config with a BOM and CRLF lines was misread"
# data paths that are not data
: >"$W/empty.txt"
printf x >"$W/one.txt"
ln -sf /dev/zero "$W/zero.bin"
ln -sf "$W/nothing-here" "$W/dangling.txt"
while IFS='|' read -r want path; do
  refused data "$want" "$PLAIT_BIN" train "$CFG" "run.out_dir=$W/data" "data.path=$path" run.steps=1
done <<EOF2
data file $W/cdir is a directory|$W/cdir
no such file (tried $W/none*.bin|$W/none*.bin
data file $W/empty.txt is empty|$W/empty.txt
is too short: 1 tokens|$W/one.txt
data file $W/zero.bin is a character device|$W/zero.bin
cannot open data file $W/dangling.txt: No such file or directory|$W/dangling.txt
EOF2
# a data path that names nothing: refused where it is set, before the run
# directory, by a run of one process and once by the launcher of -n 2 or of
# a bench (its layout or -n 2; no rank started); config check notes it and
# says ok (the data may be prepared later, or live where the ranks run)
want="command line 'data.path=$W/none.bin': [data] path = $W/none.bin: no such file"
refused data-none-1 "$want" "$PLAIT_BIN" train "$CFG" "run.out_dir=$W/dnone" "data.path=$W/none.bin"
refused data-none-n2 "$want" "$PLAIT_BIN" train "$CFG" -n 2 parallel.dp=2 "run.out_dir=$W/dnone" "data.path=$W/none.bin"
refused data-none-dp2 "$want" "$PLAIT_BIN" train "$CFG" parallel.dp=2 "run.out_dir=$W/dnone" "data.path=$W/none.bin"
refused data-none-bench "$want" "$PLAIT_BIN" bench train "$CFG" --steps 1 --warmup 0 parallel.dp=2 "data.path=$W/none.bin"
refused data-none-bench-n2 "$want" "$PLAIT_BIN" bench train "$CFG" -n 2 --steps 1 --warmup 0 parallel.dp=2 \
  "data.path=$W/none.bin"
[ ! -e "$W/dnone" ] || fail "train made its run directory for data that is not there: $(ls -A "$W/dnone")"
for n in n2 dp2 bench bench-n2; do
  grep -q "rank [01] failed" "$E2E_WORK/data-none-$n.out" && fail "a rank reported the missing data: $(cat "$E2E_WORK/data-none-$n.out")"
done
out=$("$PLAIT_BIN" config check "$CFG" "data.path=$W/none.bin" 2>&1) || fail "config check refused a config whose data is not there: $out"
grep -qF "note: $want" <<<"$out" || fail "config check did not note the missing data: $out"
# [run] init_from that names nothing, on the job's first start: refused the
# same way. Where the run directory exists, a checkpoint in it would be
# resumed instead of init_from, so the run looks first, and the weights'
# reader refuses the path once nothing is there to resume
want="command line 'run.init_from=$W/none.safetensors': [run] init_from = $W/none.safetensors: No such file or directory"
for n in 1 n2 dp2; do
  case $n in 1) layout=() ;; n2) layout=(-n 2 parallel.dp=2) ;; dp2) layout=(parallel.dp=2) ;; esac
  refused "init-none-$n" "$want" "$PLAIT_BIN" train "$CFG" "${layout[@]}" "run.out_dir=$W/inone" "run.init_from=$W/none.safetensors"
  grep -q "rank [01] failed" "$E2E_WORK/init-none-$n.out" && fail "a rank reported the missing init_from: $(cat "$E2E_WORK/init-none-$n.out")"
done
[ ! -e "$W/inone" ] || fail "train made its run directory for an init_from that is not there: $(ls -A "$W/inone")"
out=$("$PLAIT_BIN" config check "$CFG" "run.out_dir=$W/inone" "run.init_from=$W/none.safetensors" 2>&1) ||
  fail "config check refused a config whose init_from is not there: $out"
grep -qF "note: $want" <<<"$out" || fail "config check did not note the missing init_from: $out"
mkdir "$W/inone"
refused init-none-later "[run] init_from = $W/none.safetensors: No such file or directory" \
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$W/inone" "run.init_from=$W/none.safetensors" run.steps=1
grep -qF "$want" "$E2E_WORK/init-none-later.out" && fail "init_from refused before an existing run directory was looked at"
# tokenizer files that are not tokenizer files
mkdir -p "$W/tz1" "$W/tz2"
ln -sf /dev/zero "$W/tz1/vocab.json"
cp "$GPT2/merges.txt" "$W/tz1/"
: >"$W/tz2/tokenizer.json"
refused tok-zero "$W/tz1/vocab.json is a character device" "$PLAIT_BIN" tokenizer encode "$W/tz1" "$CFG"
refused tok-empty "$W/tz2/tokenizer.json: byte 0: expected a value, found end of input" "$PLAIT_BIN" tokenizer encode "$W/tz2" "$CFG"
echo "1 2 99999999999999999999" >"$W/ids"
refused tok-bigid "$W/ids: byte 4: expected a token id 0..50256" "$PLAIT_BIN" tokenizer decode "$GPT2" "$W/ids"
# as another user: what cannot be written or read is named. nobody cannot
# reach a clone under a private home (root's is 0700 on Debian), so it runs
# a copy of plait, its libraries and plugins, the config and the corpus from
# a world-readable temporary directory, where the unwritable directory, the
# unreadable file and a directory nobody may write lie too.
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  N=$(mktemp -d /tmp/plait-nobody-XXXXXX)
  at_exit "rm -rf '$N'"
  chmod 755 "$N"
  mkdir "$N/bin" "$N/ro" "$N/rw"
  cp "$PLAIT_BIN" "$N/bin/plait"
  cp -r "$(dirname "$PLAIT_BIN")/../lib" "$N/lib"
  cp "$CFG" "$N/tiny.ini"
  cp data/corpus.txt "$N/corpus.txt"
  cp data/corpus.txt "$N/secret.txt"
  chmod -R a+rX "$N"
  chmod 555 "$N/ro"
  chmod 1777 "$N/rw"
  chmod 600 "$N/secret.txt"
  as_nobody=(env "LD_LIBRARY_PATH=$N/lib" "XDG_CACHE_HOME=$N/cache" setpriv --reuid=nobody --regid=nogroup --clear-groups)
  if ! err=$(cd "$N" && "${as_nobody[@]}" "$N/bin/plait" --version 2>&1); then
    echo "permissions: skipped (nobody cannot run plait from $N: $err)"
  else
    (cd "$N" && refused nobody-out "cannot create $N/ro/run: Permission denied" \
      "${as_nobody[@]}" "$N/bin/plait" train "$N/tiny.ini" "run.out_dir=$N/ro/run" run.steps=1 "data.path=$N/corpus.txt")
    (cd "$N" && refused nobody-data "cannot open data file $N/secret.txt: Permission denied" \
      "${as_nobody[@]}" "$N/bin/plait" train "$N/tiny.ini" "run.out_dir=$N/rw/run" run.steps=1 "data.path=$N/secret.txt")
  fi
else
  echo "permissions: skipped (needs root and setpriv to act as another user)"
fi
# --- 5. the newest paths: llama configs, Hugging Face llama directories,
# tokenizer.json files, cluster files, compression, pipeline schedules,
# doctor and the plugin path; each refused at once, naming what and why
W5=$E2E_WORK/n
mkdir -p "$W5"
LL=$PLAIT_SOURCE_DIR/configs/llama-tiny.ini
while IFS='|' read -r want args; do
  # shellcheck disable=SC2086
  refused newest "$want" "$PLAIT_BIN" $args
done <<EOF2
n_kv_head = 3 does not divide n_head = 4|config check $LL model.n_kv_head=3
n_kv_head = 8 does not divide n_head = 4|config check $LL model.n_kv_head=8
the llama arch's head size must be even|config check $LL model.n_embd=20 model.n_head=4 model.n_kv_head=2
n_embd = 66 is not a multiple of n_head = 4|config check $LL model.n_embd=66
tp = 4 does not divide [model] n_kv_head = 2|config check $LL parallel.plugin=hybrid parallel.tp=4
value '0' is out of range|config check $LL model.rope_theta=0
[model] n_kv_head is a key of arch = llama, and this model is arch = gpt|config check $CFG model.n_kv_head=2
[model] rope_theta is a key of arch = llama, and this model is arch = gpt|config check $CFG model.rope_theta=500000
[model] head_dim is a key of arch = llama, and this model is arch = gpt|config check $CFG model.head_dim=16
[model] qkv_bias is a key of arch = llama, and this model is arch = gpt|config check $CFG model.qkv_bias=true
[model] qk_norm is a key of arch = llama, and this model is arch = gpt|config check $CFG model.qk_norm=true
[model] recompute_offload = host moves the blocks' kept inputs of recompute = full to host memory, and this model has recompute = selective|config check $CFG model.recompute=selective model.recompute_offload=host
[model] recompute_offload = host moves the blocks' kept inputs from a device's memory to the host's, and the cpu device's memory is host memory already|config check $CFG model.recompute=full model.recompute_offload=host
[parallel.dp] grad_compression = onebit does nothing here: the optimizer (zero1) reduces the gradients itself|config check $CFG parallel.dp=2 optim.plugin=zero1 parallel.dp.grad_compression=onebit
[parallel.dp] grad_compression = bf16 does nothing here: the optimizer (zero1) reduces the gradients itself|config check $CFG parallel.cp=2 optim.plugin=zero1 parallel.dp.grad_compression=bf16
value 'fp4' is not allowed (one of: none, bf16, int8, onebit)|config check $CFG parallel.dp=2 parallel.dp.grad_compression=fp4
not a trace merged by plait (one starts with|trace summary $CFG
grad_accum = bf16 with [run] deterministic = true and 4 micro-batches a step|config check $CFG parallel.dp=2 optim.plugin=zero1 optim.zero1.grad_accum=bf16 run.deterministic=true data.micro_batch=1
[optim] min_lr = 0.0001 (its default) is above lr = 0: the cosine schedule decays from lr to min_lr|config check $CFG optim.lr=0
[optim] min_lr = 0.5 is above lr = 0.1|train $CFG optim.min_lr=0.5 optim.lr=0.1 run.out_dir=$W5/min-lr
[optim] min_lr = 0.0001 (its default) is above lr = 0: the linear schedule decays from lr to min_lr|config check $CFG optim.lr=0 optim.lr_schedule=linear
[optim] lr_schedule = wsd needs lr_wsd_decay_steps, the steps of its final decay to min_lr (1 to 15 here: [run] steps (lr_decay_steps = 0) = 20 less warmup_steps = 5|config check $CFG optim.lr_schedule=wsd run.steps=20 optim.warmup_steps=5
[optim] lr_wsd_decay_steps = 9 is longer than the steps between the warmup and the decay's end ([optim] lr_decay_steps = 12 less warmup_steps = 5: 7)|train $CFG optim.lr_schedule=wsd optim.lr_wsd_decay_steps=9 optim.lr_decay_steps=12 optim.warmup_steps=5 run.out_dir=$W5/wsd
[optim] lr_schedule = wsd: its decay ends at step 5 ([optim] lr_decay_steps), not after the warmup (warmup_steps = 5)|config check $CFG optim.lr_schedule=wsd optim.lr_wsd_decay_steps=2 optim.lr_decay_steps=5 optim.warmup_steps=5
value 'exp' is not allowed (one of: linear, cosine, sqrt, exponential)|config check $CFG optim.lr_schedule=wsd optim.lr_wsd_decay_style=exp
virtual_stages = 2 needs schedule = interleaved (zb1 runs one model chunk per stage)|config check $CFG parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1 parallel.pp.virtual_stages=2
schedule = interleaved needs virtual_stages >= 2|config check $CFG parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=interleaved
ranges overlap or are out of model order|config check $CFG parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=zb1 parallel.pp.stages=0-3,3-3
EOF2
# the planner sets aside the layouts that optimizer would refuse: zero1's
# bf16 sums over more than one micro-batch a deterministic step
out=$(timeout 60 "$PLAIT_BIN" plan "$CFG" --ranks 2 --axes dp,optim,micro_batch --top all run.deterministic=true \
  optim.zero1.grad_accum=bf16 2>&1) || fail "plan with zero1's bf16 sums: $out"
grep -Eq '^ +[0-9]+ +dp2 tp1 pp1 mb4 zero1 ' <<<"$out" || fail "plan dropped zero1 at one micro-batch a step: $out"
grep -Eq '^ +[0-9]+ +dp2 tp1 pp1 mb[12] zero1 .* yes$' <<<"$out" &&
  fail "plan kept zero1 summing micro-batches in bf16 under deterministic: $out"
# a rule that sets every layout aside is what each family's line names,
# not a memory limit none of them reached
out=$(timeout 60 "$PLAIT_BIN" plan "$CFG" --ranks 2 optim.offload=host 2>&1) &&
  fail "plan of a CPU node kept a layout for offload = host: $out"
grep -q "^# does not fit: dp2 tp1 pp1 ([0-9]* layouts): none fits: command line 'optim.offload=host': \[optim\] offload = host: this device's memory is host memory already" <<<"$out" ||
  fail "plan's family line does not name offload = host: $out"
grep -q 'none fits: the least memory' <<<"$out" && fail "plan blames memory for offload = host: $out"
# a rule between the core's keys holds for every layout: plan refuses it
# once, in config check's words, not layout by layout
out=$(timeout 60 "$PLAIT_BIN" plan "$CFG" --ranks 2 optim.offload_params=true 2>&1) &&
  fail "plan accepted offload_params without offload: $out"
[ "$(grep -c 'offload_params = true needs \[optim\] offload = host or nvme' <<<"$out")" -eq 1 ] ||
  fail "plan did not refuse offload_params without offload once: $out"
grep -q '^# skipped' <<<"$out" && fail "plan weighed layouts of a config that breaks a key rule: $out"
# recompute_offload on a device whose memory is host memory: plan refuses
# it in config check's words, once, rather than planning without it
out=$(timeout 60 "$PLAIT_BIN" plan "$CFG" --ranks 2 model.recompute=full model.recompute_offload=host 2>&1) &&
  fail "plan of a CPU node kept recompute_offload = host: $out"
[ "$(grep -c "command line 'model.recompute_offload=host': \[model\] recompute_offload = host moves the blocks' kept inputs from a device's memory to the host's, and the cpu device's memory is host memory already" <<<"$out")" -eq 1 ] ||
  fail "plan did not refuse recompute_offload on the cpu device once: $out"
grep -q '^# rank' <<<"$out" && fail "plan weighed layouts with recompute_offload on the cpu device: $out"
# a run of one process has no launcher: it runs the layout's preflight
# itself, before its run directory (the model refused it after)
refused one-process "[model] moe_top_k = 9 is more than moe_experts = 8" "$PLAIT_BIN" train \
  "$PLAIT_SOURCE_DIR/configs/moe-tiny.ini" model.moe_top_k=9 "run.out_dir=$W5/top-k"
[ ! -e "$W5/top-k" ] || fail "a run of one process made its directory for a model config check refuses"
# ...and `train -n 2` refuses it once, before any rank starts
refused bf16-sums-n2 "grad_accum = bf16 with [run] deterministic = true and 4 micro-batches a step" \
  "$PLAIT_BIN" train "$CFG" -n 2 parallel.dp=2 optim.plugin=zero1 optim.zero1.grad_accum=bf16 run.deterministic=true \
  data.micro_batch=1 "run.out_dir=$W5/bf16-sums"
[ ! -e "$W5/min-lr" ] || fail "train made the run directory of a min_lr above lr"
[ ! -e "$W5/wsd" ] || fail "train made the run directory of a wsd decay longer than the schedule"
[ ! -e "$W5/bf16-sums" ] || fail "train -n 2 started ranks for zero1's bf16 sums: $(ls "$W5/bf16-sums")"
grep -q "rank [01] failed" "$E2E_WORK/bf16-sums-n2.out" && fail "a rank reported zero1's bf16 sums: $(cat "$E2E_WORK/bf16-sums-n2.out")"
# cluster files
while IFS='|' read -r want text; do
  printf "$text" >"$W5/cluster.ini"
  refused cluster "$want" "$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$W5/cluster.ini"
done <<'EOF2'
[node] gpus describes GPU nodes, but [node] kind is cpu (the default)|[node]\ngpus = 8\nmemory = 80G\n
[node] cores describes CPU nodes, but [node] kind is gpu|[node]\nkind = gpu\ngpus = 8\ncores = 64\nmemory = 80G\npeak_gflops = 19500\n
value '0' is out of range [1, 1000000]|[cluster]\nnodes = 0\n
value '80X' is not a byte size|[node]\nkind = gpu\ngpus = 8\nmemory = 80X\npeak_gflops = 100\n
key 'cores' is given twice (first on line 2)|[node]\ncores = 2\ncores = 4\n
section [gpu] is not known|[gpu]\ncount = 8\n
value 'nan' is not a finite number|[node]\npeak_gflops = nan\n
kind = gpu needs gpus >= 1, memory > 0 and peak_gflops > 0|[node]\nkind = gpu\ngpus = 8\nmemory = 0\npeak_gflops = 100\n
EOF2
mkdir -p "$W5/cdir"
refused cluster "is a directory, not a regular file" "$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$W5/cdir"
# tokenizer.json files (GPT-2's byte alphabet, one merge "a b" -> 256)
python3 - "$W5" <<'PY'
import json, os, sys
w = sys.argv[1]
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
vocab["ab"] = 256
base = {"model": {"type": "BPE", "vocab": vocab, "merges": ["a b"]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False}}
def put(name, obj):
    os.makedirs(f"{w}/{name}", exist_ok=True)
    open(f"{w}/{name}/tokenizer.json", "w").write(obj if isinstance(obj, str) else json.dumps(obj))
def model(**kw):
    return dict(base, model=dict(base["model"], **kw))
put("wordpiece", {"model": {"type": "WordPiece", "vocab": {"a": 0}}})
put("empty", {})
put("negative", model(vocab=dict(vocab, zz=-5)))
put("twice", model(vocab=dict(vocab, cd=256), merges=["a b", "c d"]))
put("badmerge", model(merges=["a b", "q xyz"]))
put("truncated", json.dumps(base)[:500])
put("deep", "[" * 200000 + "]" * 200000)
put("gap", model(vocab=dict(vocab, ab=100000)))
put("dropout", model(dropout=0.1))
put("fallback", model(byte_fallback=True))
put("normalizer", dict(base, normalizer={"type": "NFKC"}))
put("dupmember", '{"model":{"type":"BPE","type":"WordPiece","vocab":{},"merges":[]}}')
put("sameadded", dict(base, added_tokens=[{"id": 257, "content": "<x>"}, {"id": 258, "content": "<x>"}]))
put("nul", json.dumps(base)[:-1] + '\u0000}')
PY
printf 'ab cd' >"$W5/in.txt"
while IFS='|' read -r name want; do
  refused "tok-$name" "$want" "$PLAIT_BIN" tokenizer encode "$W5/$name" "$W5/in.txt"
done <<'EOF2'
wordpiece|model type "WordPiece" is not supported
empty|no "model" object (not a tokenizer.json?)
negative|the id of token "zz" must be an integer 0..2147483646
twice|token id 256 is used twice, by "ab" and by "cd"
badmerge|merge part "xyz" is not in the vocabulary
truncated|found end of input
deep|nesting deeper than 32 levels
gap|no token has id 256, but ids go up to 100000
dropout|asks for BPE dropout
fallback|asks for byte fallback tokens
normalizer|asks for a normalizer other than NFC
dupmember|duplicate member name "type"
sameadded|token id 258 has the same bytes as id 257
nul|found byte 0x00
EOF2
# Hugging Face llama directories: one exported from a plait llama, then
# each changed in one way
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/llama" run.steps=1 run.progress=off >"$W5/llama.out" 2>&1 ||
  fail "llama run: $(tail -n 3 "$W5/llama.out")"
"$PLAIT_BIN" export "$W5/llama" --format hf --out "$W5/hf" >"$W5/hf.out" 2>&1 || fail "llama export: $(cat "$W5/hf.out")"
while IFS='|' read -r name change want; do
  rm -rf "${W5:?}/$name"
  cp -r "$W5/hf" "$W5/$name"
  (cd "$W5/$name" && eval "$change")
  refused "hf-$name" "$want" "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-$name" run.steps=1 run.init_from="$W5/$name"
done <<'EOF2'
scaling|python3 -c 'import json; c = json.load(open("config.json")); c["rope_scaling"] = {"rope_type": "yarn", "factor": 8.0}; json.dump(c, open("config.json", "w"))'|scaled in a way plait does not implement (allowed: null, default or llama3)
llama3|python3 -c 'import json; c = json.load(open("config.json")); c["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0}; json.dump(c, open("config.json", "w"))'|rope_scaling = type 'llama3', but the run has [model] rope_scaling = none
act|sed -i 's/"silu"/"gelu"/' config.json|the MLP's activation is not SiLU (allowed: silu)
bias|sed -i 's/"attention_bias": false/"attention_bias": true/' config.json|attention_bias = true: the projections have biases
headdim|sed -i 's/"head_dim": 32/"head_dim": 16/' config.json|head_dim = 16, but the run has [model] head_dim = 32: the model in the file is another one (give model.head_dim=16 to load it)
window|sed -i 's/"mlp_bias": false/"mlp_bias": false, "sliding_window": 64/' config.json|attention sees a sliding window (allowed: null)
mistral|sed -i 's/"model_type": "llama"/"model_type": "mistral"/' config.json|sliding_window = 4096 (MistralConfig's default: the file leaves it out): attention sees a sliding window (allowed: null)
gemma|sed -i 's/"model_type": "llama"/"model_type": "gemma"/' config.json|model_type = gemma: [model] arch = llama reads Hugging Face Llama models (model_type llama or mistral)
tied|sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' config.json|give model.tie_embeddings=true to load it
kvtext|sed -i 's/"num_key_value_heads": 2/"num_key_value_heads": "2"/' config.json|'num_key_value_heads' is not a number
vocabneg|sed -i 's/"vocab_size": 256/"vocab_size": -1/' config.json|'vocab_size' is not above 0 (the file is damaged, or not a Llama model's config.json)
context|sed -i 's/"max_position_embeddings": 128/"max_position_embeddings": 64/' config.json|the model was not made for contexts that long (allowed: block_size <= 64)
cfgjson|printf '{"model_type": "llama",' >config.json|expected a member name in quotes, found end of input
escape|mv model.safetensors model-00001-of-00001.safetensors && echo '{"weight_map": {"model.embed_tokens.weight": "../hf/model.safetensors"}}' >model.safetensors.index.json|allowed is a .safetensors file beside the index
noshard|rm model.safetensors && echo '{"weight_map": {"model.embed_tokens.weight": "model-00002-of-00002.safetensors"}}' >model.safetensors.index.json|cannot open safetensors file
truncated|truncate -s 100000 model.safetensors|(truncated file)
EOF2
# Qwen2 directories ([model] qkv_bias): a llama one for a run with the
# biases, a Qwen2 one (exported from a plait run with them) for a run
# without, and with a layer under a sliding window
refused hf-llama-qkv "a Llama model's projections have no biases: give model.qkv_bias=false" "$PLAIT_BIN" train \
  "$LL" "run.out_dir=$W5/imp-llama-qkv" run.steps=1 run.init_from="$W5/hf" model.qkv_bias=true
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/qwen2" run.steps=1 run.progress=off model.qkv_bias=true >"$W5/qwen2.out" 2>&1 ||
  fail "qwen2 run: $(tail -n 3 "$W5/qwen2.out")"
"$PLAIT_BIN" export "$W5/qwen2" --format hf --out "$W5/hf-qwen2" >"$W5/hf-qwen2.out" 2>&1 ||
  fail "qwen2 export: $(cat "$W5/hf-qwen2.out")"
grep -q '"model_type": "qwen2"' "$W5/hf-qwen2/config.json" || fail "a qkv_bias run not exported as Qwen2"
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/moe-qkv" run.steps=1 run.progress=off model.qkv_bias=true \
  model.moe_experts=4 model.moe_top_k=2 >"$W5/moe-qkv.out" 2>&1 || fail "a mixture of experts with qkv_bias: $(tail -n 3 "$W5/moe-qkv.out")"
refused moe-qkv-export "[model] qkv_bias = true, which Hugging Face's MixtralForCausalLM does not compute" \
  "$PLAIT_BIN" export "$W5/moe-qkv" --format hf --out "$W5/moe-qkv-hf"
refused hf-qwen2-nobias "a Qwen2 model's q, k and v projections have biases: give model.qkv_bias=true" \
  "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-qwen2-nobias" run.steps=1 run.init_from="$W5/hf-qwen2"
while IFS='|' read -r name change want; do
  rm -rf "${W5:?}/$name"
  cp -r "$W5/hf-qwen2" "$W5/$name"
  (cd "$W5/$name" && eval "$change")
  refused "hf-$name" "$want" "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-$name" run.steps=1 \
    run.init_from="$W5/$name" model.qkv_bias=true
done <<'EOF2'
qwindow|sed -i 's/"use_sliding_window": false/"use_sliding_window": true/; s/"sliding_window": null/"sliding_window": 16/; s/"max_window_layers": 4/"max_window_layers": 1/' config.json|use_sliding_window = true: the layers from max_window_layers on attend within a sliding window
qtypes|sed -i 's/"max_window_layers": 4,/"max_window_layers": 4, "layer_types": ["full_attention", "full_attention", "full_attention", "sliding_attention"],/' config.json|layer_types = sliding_attention: a layer's attention is not full (allowed: full_attention)
EOF2
# Qwen3 directories ([model] qk_norm): one exported from a plait run with
# the norms, read by a run without them, and a Llama one by a run with
# them; a model with both the norms and q, k and v biases, which no
# Hugging Face class computes, refused at export; a Qwen3 file with a
# layer under a sliding window
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/qwen3" run.steps=1 run.progress=off model.qk_norm=true >"$W5/qwen3.out" 2>&1 ||
  fail "qwen3 run: $(tail -n 3 "$W5/qwen3.out")"
"$PLAIT_BIN" export "$W5/qwen3" --format hf --out "$W5/hf-qwen3" >"$W5/hf-qwen3.out" 2>&1 ||
  fail "qwen3 export: $(cat "$W5/hf-qwen3.out")"
grep -q '"model_type": "qwen3"' "$W5/hf-qwen3/config.json" || fail "a qk_norm run not exported as Qwen3"
refused hf-qwen3-nonorm "a Qwen3 model's heads have q and k norms: give model.qk_norm=true" \
  "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-qwen3-nonorm" run.steps=1 run.init_from="$W5/hf-qwen3"
refused hf-llama-qk "the heads of a model of another type have no q and k norms: give model.qk_norm=false" \
  "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-llama-qk" run.steps=1 run.init_from="$W5/hf" model.qk_norm=true
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/qk-qkv" run.steps=1 run.progress=off model.qk_norm=true \
  model.qkv_bias=true >"$W5/qk-qkv.out" 2>&1 || fail "qk_norm with qkv_bias: $(tail -n 3 "$W5/qk-qkv.out")"
refused qk-qkv-export "[model] qk_norm = true with qkv_bias = true, which no Hugging Face class computes" \
  "$PLAIT_BIN" export "$W5/qk-qkv" --format hf --out "$W5/qk-qkv-hf"
rm -rf "${W5:?}/q3window"
cp -r "$W5/hf-qwen3" "$W5/q3window"
sed -i 's/"use_sliding_window": false/"use_sliding_window": true/; s/"sliding_window": null/"sliding_window": 16/; s/"max_window_layers": 4/"max_window_layers": 1/' \
  "$W5/q3window/config.json"
refused hf-q3window "use_sliding_window = true: the layers from max_window_layers on attend within a sliding window" \
  "$PLAIT_BIN" train "$LL" "run.out_dir=$W5/imp-q3window" run.steps=1 run.init_from="$W5/q3window" model.qk_norm=true
# Qwen3-MoE directories (experts with q and k norms): one exported from a
# plait run, read by a run with experts but without the norms; a model
# with shared experts, which Qwen3-MoE has not, refused at export
Q3M="model.qk_norm=true model.moe_experts=4 model.moe_top_k=2"
# shellcheck disable=SC2086
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/qwen3moe" run.steps=1 run.progress=off $Q3M >"$W5/qwen3moe.out" 2>&1 ||
  fail "qwen3-moe run: $(tail -n 3 "$W5/qwen3moe.out")"
"$PLAIT_BIN" export "$W5/qwen3moe" --format hf --out "$W5/hf-qwen3moe" >"$W5/hf-qwen3moe.out" 2>&1 ||
  fail "qwen3-moe export: $(cat "$W5/hf-qwen3moe.out")"
grep -q '"model_type": "qwen3_moe"' "$W5/hf-qwen3moe/config.json" || fail "experts with qk_norm not exported as Qwen3-MoE"
refused hf-qwen3moe-nonorm "a Qwen3-MoE model needs model.qk_norm=true" "$PLAIT_BIN" train "$LL" \
  "run.out_dir=$W5/imp-qwen3moe-nonorm" run.steps=1 run.init_from="$W5/hf-qwen3moe" model.moe_experts=4 model.moe_top_k=2
# shellcheck disable=SC2086
"$PLAIT_BIN" train "$LL" "run.out_dir=$W5/qwen3moe-shared" run.steps=1 run.progress=off $Q3M \
  model.moe_shared_experts=1 >"$W5/qwen3moe-shared.out" 2>&1 || fail "qwen3-moe with a shared expert: $(tail -n 3 "$W5/qwen3moe-shared.out")"
refused qwen3moe-shared-export "[model] moe_shared_experts = 1, which Hugging Face's Qwen3MoeForCausalLM does not compute" \
  "$PLAIT_BIN" export "$W5/qwen3moe-shared" --format hf --out "$W5/qwen3moe-shared-hf"
# doctor and the plugin path: a directory that is not there, a file, a
# plugin file that is no shared object
printf 'junk' >"$W5/libplait-optim-junk.so"
PLAIT_PLUGIN_PATH=/nonexistent-plait-dir:$W5/in.txt refused doctor-path "PLAIT_PLUGIN_PATH names /nonexistent-plait-dir, which does not exist" "$PLAIT_BIN" doctor
grep -qF "PLAIT_PLUGIN_PATH names $W5/in.txt, which is not a directory" "$E2E_WORK/doctor-path.out" ||
  fail "doctor: a file in PLAIT_PLUGIN_PATH not named: $(grep -i plugin_path "$E2E_WORK/doctor-path.out")"
PLAIT_PLUGIN_PATH=$W5 refused doctor-junk "libplait-optim-junk.so: file too short" "$PLAIT_BIN" doctor
PLAIT_PLUGIN_PATH=$W5 refused junk-optim "[optim] plugin = junk: $W5/libplait-optim-junk.so: cannot load" "$PLAIT_BIN" config check "$CFG" optim.plugin=junk
rm -f "$W5/libplait-optim-junk.so"
echo "the newest paths: llama configs and directories, tokenizer.json files, cluster files, compression, schedules, doctor"
echo "ok"
