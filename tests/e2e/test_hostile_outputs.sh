#!/usr/bin/env bash
# What plait writes and deletes, attacked: nothing is written into a
# checkpoint or over files plait did not write, no temporary name is shared
# by two writers, nothing follows a symbolic link out of a run directory, and
# pruning never deletes the checkpoint a run resumed from nor keeps a damaged
# one in its place.
#  1. export: --out a checkpoint or a run directory is refused (the
#     checkpoint still resumes); a downloaded model.safetensors or
#     config.json in --out is not overwritten; an earlier export is; two
#     exports into one --out at once never mix their tensors. A fresh run
#     never writes over a metrics.csv or memory.csv it did not write. bench comm
#     and bench train --csv, bench sweep --report never write over a run's
#     files or files they did not write.
#  2. links: a ckpt-* link to another directory is neither pruned through
#     nor written through (a run that would save there is refused before
#     its first step, naming the link; so is a file or FIFO by that name,
#     and a ckpt-* directory holding a directory by a checkpoint file's name);
#     metrics.csv, memory.csv and rank-0.log links are refused, their
#     targets untouched; so are hard links to them (and to .lock), the
#     file under its other name unchanged. bench sweep's --csv, its logs
#     directory and a layout's log as links, and its --csv as a FIFO, are
#     refused, nothing written where they point.
#  3. pruning after a resume that skipped a damaged newest checkpoint keeps
#     the checkpoint resumed from and the new one.
#  4. a file size limit (ulimit -f) reached by a checkpoint, data prepare or
#     export: "File too large" named, nothing half-written left; a killed
#     export's temporary file is removed by the next export.
source "$(dirname "$0")/lib.sh"

# refused NAME EXPECTED CMD...: CMD exits non-zero printing EXPECTED
refused() {
  local name=$1 want=$2; shift 2
  if "$@" >"$E2E_WORK/$name.out" 2>&1; then fail "$name: $* succeeded: $(tail -n 3 "$E2E_WORK/$name.out")"; fi
  grep -qF -- "$want" "$E2E_WORK/$name.out" || fail "$name: unclear refusal: $(tail -n 3 "$E2E_WORK/$name.out")"
}
sums() { (cd "$1" && find . -type f | sort | xargs md5sum); }

# --- 1. export
train exp run.steps=4 run.ckpt_every=2
ck=$E2E_WORK/exp/ckpt-00000004
before=$(sums "$E2E_WORK/exp")
refused exp-into-ckpt "$ck is a checkpoint directory" "$PLAIT_BIN" export "$E2E_WORK/exp" --format hf --out "$ck"
refused exp-into-run "$E2E_WORK/exp is a run directory" "$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/exp"
[ "$(sums "$E2E_WORK/exp")" = "$before" ] || fail "a refused export changed the run directory"
train exp run.steps=5 --resume
mkdir -p "$E2E_WORK/downloaded"
printf '{"model_type": "llama"}\n' >"$E2E_WORK/downloaded/config.json"
head -c 4096 /dev/urandom >"$E2E_WORK/downloaded/model.safetensors"
before=$(sums "$E2E_WORK/downloaded")
refused exp-foreign "$E2E_WORK/downloaded/model.safetensors was not written by plait export" \
  "$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/downloaded"
rm "$E2E_WORK/downloaded/model.safetensors"
refused exp-foreign-config "$E2E_WORK/downloaded/config.json was not written by plait export" \
  "$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/downloaded"
[ "$(cat "$E2E_WORK/downloaded/config.json")" = '{"model_type": "llama"}' ] || fail "export overwrote a foreign config.json"
for f in hf nanogpt hf; do # an earlier export is replaced, in either format
  "$PLAIT_BIN" export "$ck" --format $f --out "$E2E_WORK/mine" >"$E2E_WORK/exp-mine.out" 2>&1 ||
    fail "export over an earlier export failed: $(tail -n 2 "$E2E_WORK/exp-mine.out")"
  cp "$E2E_WORK/mine/model.safetensors" "$E2E_WORK/ref-$f.safetensors"
done
for round in 1 2 3 4; do
  rm -rf "${E2E_WORK:?}/both"
  "$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/both" >"$E2E_WORK/both-hf.out" 2>&1 &
  a=$!
  "$PLAIT_BIN" export "$ck" --format nanogpt --out "$E2E_WORK/both" >"$E2E_WORK/both-nanogpt.out" 2>&1 || true
  wait $a || true
  cmp -s "$E2E_WORK/both/model.safetensors" "$E2E_WORK/ref-hf.safetensors" ||
    cmp -s "$E2E_WORK/both/model.safetensors" "$E2E_WORK/ref-nanogpt.safetensors" ||
    fail "round $round: two exports into one --out at once left a model.safetensors that is neither"
  [ -z "$(find "$E2E_WORK/both" -name '*.tmp*')" ] || fail "round $round: temporary files left: $(ls "$E2E_WORK/both")"
done

# a run directory holding someone else's metrics.csv or memory.csv: a fresh
# run does not write over them, and says so before it trains
for f in metrics.csv memory.csv; do
  rm -rf "${E2E_WORK:?}/foreign"
  mkdir -p "$E2E_WORK/foreign"
  printf 'date,sales\n2024-01-01,3\n' >"$E2E_WORK/foreign/$f"
  refused "foreign-$f" "$E2E_WORK/foreign/$f: a file, which plait did not write" \
    "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/foreign" run.steps=1
  [ "$(cat "$E2E_WORK/foreign/$f")" = "$(printf 'date,sales\n2024-01-01,3')" ] || fail "a fresh run wrote over a foreign $f"
  # refused before the first step, not after the whole run
  [ -z "$(ls -d "$E2E_WORK/foreign"/ckpt-* 2>/dev/null)" ] || fail "a foreign $f was refused only after the run trained"
done

# benchmarks' outputs: never over a run's files or a file they did not write
before=$(sums "$E2E_WORK/exp")
refused bench-comm-csv "--csv $E2E_WORK/exp/metrics.csv: a file, which plait did not write" \
  "$PLAIT_BIN" bench comm --op allreduce -n 2 --csv "$E2E_WORK/exp/metrics.csv"
refused bench-train-csv "--csv $E2E_WORK/exp/metrics.csv: a file, which plait did not write" \
  "$PLAIT_BIN" bench train "$CFG" --steps 1 --warmup 0 --csv "$E2E_WORK/exp/metrics.csv"
refused bench-sweep-report "--report $E2E_WORK/exp is a run directory" \
  "$PLAIT_BIN" bench sweep "$CFG" -n 2 --steps 1 --warmup 0 --report "$E2E_WORK/exp"
[ "$(sums "$E2E_WORK/exp")" = "$before" ] || fail "a refused benchmark changed the run directory"

# --- 2. links out of the run directory
mkdir -p "$E2E_WORK/precious"
for f in model.safetensors optim.safetensors state.json COMPLETE notes.txt; do echo keep >"$E2E_WORK/precious/$f"; done
precious=$(sums "$E2E_WORK/precious")
train links run.steps=4 run.ckpt_every=2 run.keep_checkpoints=10
rm -rf "$E2E_WORK/links/ckpt-00000002"
ln -s "$E2E_WORK/precious" "$E2E_WORK/links/ckpt-00000002"
ln -s "$E2E_WORK/precious" "$E2E_WORK/links/ckpt-00000006"
refused links-save "$E2E_WORK/links/ckpt-00000006 is a symbolic link" "$PLAIT_BIN" train "$CFG" \
  "run.out_dir=$E2E_WORK/links" run.steps=8 run.ckpt_every=2 run.keep_checkpoints=1 run.resume=auto
# refused before a step is trained, not at the save after training to it
[ "$(tail -n 1 "$E2E_WORK/links/metrics.csv" | cut -d, -f1)" = 4 ] ||
  fail "the run trained before refusing the link where its checkpoint goes: $(tail -n 1 "$E2E_WORK/links/metrics.csv")"
rm "$E2E_WORK/links/ckpt-00000006"
train links run.steps=8 run.ckpt_every=2 run.keep_checkpoints=1 run.resume=auto
[ "$(sums "$E2E_WORK/precious")" = "$precious" ] || fail "pruning or saving followed a ckpt-* link out of the run directory"
[ -f "$E2E_WORK/links/ckpt-00000008/COMPLETE" ] || fail "the run beside the links saved no final checkpoint"
for f in metrics.csv memory.csv rank-0.log; do
  rm -rf "${E2E_WORK:?}/linkf"
  mkdir -p "$E2E_WORK/linkf"
  ln -s "$E2E_WORK/precious/notes.txt" "$E2E_WORK/linkf/$f"
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/linkf" run.steps=2 >"$E2E_WORK/linkf.out" 2>&1 || true
  [ "$(sums "$E2E_WORK/precious")" = "$precious" ] || fail "$f as a link: its target was written"
  grep -qF "$E2E_WORK/linkf/$f is a symbolic link" "$E2E_WORK/linkf.out" || fail "$f as a link was not named: $(tail -n 2 "$E2E_WORK/linkf.out")"
done

# a file or a FIFO where a checkpoint of the run goes: refused before step 1
for kind in file fifo; do
  rm -rf "${E2E_WORK:?}/ckname"
  mkdir -p "$E2E_WORK/ckname"
  if [ $kind = file ]; then echo keep >"$E2E_WORK/ckname/ckpt-00000002"; else mkfifo "$E2E_WORK/ckname/ckpt-00000002"; fi
  want="a regular file"; [ $kind = fifo ] && want="a FIFO"
  refused "ckname-$kind" "$E2E_WORK/ckname/ckpt-00000002 is $want, where this run saves its checkpoint of step 2" \
    timeout 60 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/ckname" run.steps=3 run.ckpt_every=2
  [ ! -s "$E2E_WORK/ckname/metrics.csv" ] || [ "$(wc -l <"$E2E_WORK/ckname/metrics.csv")" -le 1 ] ||
    fail "ckpt-00000002 as a $kind: the run trained before refusing it"
  [ $kind = fifo ] || [ "$(cat "$E2E_WORK/ckname/ckpt-00000002")" = keep ] || fail "ckpt-00000002 as a file was changed"
done
# a directory by a checkpoint file's name inside a later ckpt-00000004 (left
# by an earlier, longer run; a rename cannot replace it): a resume that will
# save there is refused before its first step
rm -rf "${E2E_WORK:?}/ckname"
"$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/ckname" run.steps=2 run.ckpt_every=2 >"$E2E_WORK/ckname.out" 2>&1 ||
  fail "the run before the planted directory failed: $(tail -n 2 "$E2E_WORK/ckname.out")"
mkdir -p "$E2E_WORK/ckname/ckpt-00000004/state.json"
refused ckname-inner "$E2E_WORK/ckname/ckpt-00000004/state.json is a directory, where a save of this checkpoint puts its state.json file" \
  timeout 60 "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/ckname" run.steps=5 run.ckpt_every=2 --resume
[ "$(wc -l <"$E2E_WORK/ckname/metrics.csv")" -eq 3 ] ||
  fail "state.json as a directory: the resume trained before refusing it: $(cat "$E2E_WORK/ckname/metrics.csv")"

# hard links (cp -al, ln): the file's other name is never written
for f in metrics.csv memory.csv rank-0.log .lock; do
  rm -rf "${E2E_WORK:?}/hardf"
  mkdir -p "$E2E_WORK/hardf"
  ln "$E2E_WORK/precious/notes.txt" "$E2E_WORK/hardf/$f"
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/hardf" run.steps=2 >"$E2E_WORK/hardf.out" 2>&1 || true
  [ "$(sums "$E2E_WORK/precious")" = "$precious" ] || fail "$f as a hard link: the file under its other name was written"
  grep -qF "$E2E_WORK/hardf/$f has 2 names (hard links" "$E2E_WORK/hardf.out" ||
    fail "$f as a hard link was not named: $(tail -n 2 "$E2E_WORK/hardf.out")"
done

# bench sweep's --csv and the CSV.logs directory beside it: a link in
# either place (or at a layout's log), or a FIFO as the CSV, is refused
# naming it, and nothing is written where a link points
mkdir -p "$E2E_WORK/sweepl"
ln -s "$E2E_WORK/precious/notes.txt" "$E2E_WORK/sweepl/a.csv"
ln -s "$E2E_WORK/precious" "$E2E_WORK/sweepl/b.csv.logs"
mkdir "$E2E_WORK/sweepl/c.csv.logs"
ln -s "$E2E_WORK/precious/notes.txt" "$E2E_WORK/sweepl/c.csv.logs/1.log"
mkfifo "$E2E_WORK/sweepl/d.csv"
SW=("$PLAIT_BIN" bench sweep "$CFG" -n 1 --steps 1 --warmup 0 --repeat 1)
refused sweep-csv-link "$E2E_WORK/sweepl/a.csv is a symbolic link" "${SW[@]}" --csv "$E2E_WORK/sweepl/a.csv"
refused sweep-logs-link "$E2E_WORK/sweepl/b.csv.logs is a symbolic link, not the directory of the sweep's logs" \
  "${SW[@]}" --csv "$E2E_WORK/sweepl/b.csv"
"${SW[@]}" --csv "$E2E_WORK/sweepl/c.csv" >"$E2E_WORK/sweep-log-link.out" 2>&1 || true
grep -qF "$E2E_WORK/sweepl/c.csv.logs/1.log is a symbolic link" "$E2E_WORK/sweep-log-link.out" ||
  fail "a layout's log as a link was not named: $(tail -n 2 "$E2E_WORK/sweep-log-link.out")"
refused sweep-csv-fifo "$E2E_WORK/sweepl/d.csv is a FIFO" timeout 60 "${SW[@]}" --csv "$E2E_WORK/sweepl/d.csv"
[ "$(sums "$E2E_WORK/precious")" = "$precious" ] || fail "bench sweep wrote through a link"

# --- 3. pruning after a resume past a damaged newest checkpoint
train prune run.steps=6 run.ckpt_every=2 run.keep_checkpoints=10
printf '\x55' | dd of="$E2E_WORK/prune/ckpt-00000006/model.safetensors" bs=1 seek=2000 conv=notrunc 2>/dev/null
train prune run.steps=5 run.ckpt_every=1 run.keep_checkpoints=1 --resume
grep -q "ckpt-00000006.*checksum mismatch" "$E2E_WORK/prune.out" || fail "the damaged checkpoint was not reported"
for s in 4 5; do
  [ -f "$E2E_WORK/prune/ckpt-0000000$s/COMPLETE" ] || fail "pruning deleted ckpt-0000000$s: $(ls "$E2E_WORK/prune")"
done
[ ! -e "$E2E_WORK/prune/ckpt-00000002" ] || fail "pruning kept ckpt-00000002 with keep_checkpoints = 1"

# --- 4. a file size limit (ulimit -f) reached while writing: reported like a
# full disk ("File too large"), never a silent death by SIGXFSZ, and nothing
# half-written left
rm -rf "${E2E_WORK:?}/fsize" "$E2E_WORK"/fsize-ds*
rc=0
(ulimit -f 200 && "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/fsize" run.steps=2) >"$E2E_WORK/fsize.out" 2>&1 || rc=$?
[ $rc -eq 1 ] || fail "ulimit -f during a checkpoint: exit $rc, not 1: $(tail -n 2 "$E2E_WORK/fsize.out")"
grep -q "checkpoint at step 2: writing .*ckpt-00000002/.*\.tmp at byte [0-9]*: File too large" "$E2E_WORK/fsize.out" ||
  fail "ulimit -f during a checkpoint: the cause is not named: $(tail -n 2 "$E2E_WORK/fsize.out")"
[ ! -e "$E2E_WORK/fsize/ckpt-00000002" ] || fail "the failed save left $(ls "$E2E_WORK/fsize/ckpt-00000002")"
rc=0
(ulimit -f 100 && "$PLAIT_BIN" data prepare data/corpus.txt --tokenizer data/tokenizers/gpt2 --out "$E2E_WORK/fsize-ds") \
  >"$E2E_WORK/fsize-ds.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "File too large" "$E2E_WORK/fsize-ds.out" ||
  fail "ulimit -f during data prepare: exit $rc: $(tail -n 2 "$E2E_WORK/fsize-ds.out")"
[ -z "$(ls -d "$E2E_WORK"/fsize-ds.* 2>/dev/null | grep -v '\.out$')" ] || fail "data prepare left $(ls -d "$E2E_WORK"/fsize-ds.*)"
rc=0
(ulimit -f 100 && "$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/fsize-ex") >"$E2E_WORK/fsize-ex.out" 2>&1 || rc=$?
[ $rc -eq 1 ] && grep -q "File too large" "$E2E_WORK/fsize-ex.out" ||
  fail "ulimit -f during export: exit $rc: $(tail -n 2 "$E2E_WORK/fsize-ex.out")"
[ ! -e "$E2E_WORK/fsize-ex" ] || fail "the failed export left its --out: $(ls -A "$E2E_WORK/fsize-ex")"
# a temporary file of an export that was killed (its pid is gone) is
# removed by the next export into that directory
sh -c 'exit 0' &
gone=$!
wait $gone
: >"$E2E_WORK/mine/model.safetensors.$gone-0badf00d.tmp"
"$PLAIT_BIN" export "$ck" --format hf --out "$E2E_WORK/mine" >"$E2E_WORK/exp-stale.out" 2>&1 ||
  fail "export beside a killed export's temporary file failed: $(tail -n 2 "$E2E_WORK/exp-stale.out")"
[ ! -e "$E2E_WORK/mine/model.safetensors.$gone-0badf00d.tmp" ] || fail "a killed export's temporary file was kept"
echo "ok"
