#!/usr/bin/env bash
# [data] val_sets: named validation sets scored at every evaluation as
# metrics.csv's val_loss_<name>. A set of the files val_path names scores
# val_loss bit for bit (the same windows of the same tokens); another set
# scores otherwise, the same on dp 2 and pp 2 as on one process
# (deterministic); sets alone (no val_path, val_fraction 0) let eval_every
# evaluate; --eval-only prints each; a malformed item, a name given twice,
# a name no column can carry and a pattern matching nothing are refused
# before the run directory, naming the key.
source "$(dirname "$0")/lib.sh"
D=$E2E_WORK/data
mkdir -p "$D"
head -c 200000 "$PLAIT_SOURCE_DIR/data/corpus.txt" >"$D/train.txt"
tail -c 30000 "$PLAIT_SOURCE_DIR/data/corpus.txt" >"$D/val.txt"
head -c 20000 "$PLAIT_SOURCE_DIR/README.md" >"$D/other.txt"
S=(run.steps=4 run.eval_every=2 run.eval_batches=2 run.deterministic=true run.progress=off "data.path=$D/train.txt")
SETS="data.val_sets=same=$D/val.txt, other=$D/other.*"

train one "${S[@]}" "data.val_path=$D/val.txt" "$SETS"
[ "$(column one val_loss | tr '\n' ' ')" = "$(column one val_loss_same | tr '\n' ' ')" ] ||
  fail "the set of val_path's file scored otherwise: $(column one val_loss | tr '\n' ' ') vs $(column one val_loss_same | tr '\n' ' ')"
[ "$(column one val_loss_other | grep -c .)" = 2 ] || fail "val_loss_other at $(column one val_loss_other | grep -c .) steps, not 2 (steps 2 and 4)"
[ "$(column one val_loss_other | sed -n 4p)" != "$(column one val_loss | sed -n 4p)" ] || fail "the other set scored val_loss"
for lay in dp2 pp2; do
  L=(parallel.dp=2)
  [ $lay = pp2 ] && L=(parallel.pp=2 parallel.plugin=hybrid)
  train "$lay" -n 2 "${L[@]}" "${S[@]}" "data.val_path=$D/val.txt" "$SETS"
  for col in val_loss val_loss_same val_loss_other; do
    [ "$(column one $col | tr '\n' ' ')" = "$(column $lay $col | tr '\n' ' ')" ] ||
      fail "$lay: $col $(column $lay $col | tr '\n' ' ') against one process's $(column one $col | tr '\n' ' ')"
  done
done

# sets alone: evaluation runs, val_loss stays empty
train alone "${S[@]}" data.val_fraction=0 "data.val_sets=other=$D/other.txt"
[ "$(column alone val_loss | grep -c .)" = 0 ] || fail "val_loss without a validation split"
[ "$(column alone val_loss_other | tr '\n' ' ')" = "$(column one val_loss_other | tr '\n' ' ')" ] ||
  fail "the set alone scored otherwise than beside val_path"

out=$("$PLAIT_BIN" train "$CFG" --eval-only "run.out_dir=$E2E_WORK/one" "${S[@]}" "data.val_path=$D/val.txt" "$SETS" 2>&1) ||
  fail "--eval-only: $out"
grep -q '^eval: step 4: validation set same: loss' <<<"$out" && grep -q '^eval: step 4: validation set other: loss' <<<"$out" ||
  fail "--eval-only printed no set: $out"

for bad in "same=$D/val.txt other" "a=$D/val.txt a=$D/other.txt" "a.b=$D/val.txt" "gone=$D/absent-*.bin"; do
  case $bad in
    *" other") want="is not NAME=PATTERN" ;;
    *" a="*) want="names 'a' twice" ;;
    a.b=*) want="the name 'a.b' is not 1 to 32 letters" ;;
    *) want="[data] val_sets = $D/absent-*.bin: no such file" ;;
  esac
  train_refused refused "$want" "run.out_dir=$E2E_WORK/refused" "${S[@]}" "data.val_sets=$bad"
  [ ! -e "$E2E_WORK/refused" ] || fail "val_sets = $bad made the run directory"
  [[ $bad == gone=* ]] && continue # config check notes missing data beside its ok
  out=$("$PLAIT_BIN" config check "$CFG" "data.val_sets=$bad" 2>&1) && fail "config check accepted val_sets = $bad: $out"
  grep -qF -- "$want" <<<"$out" || fail "config check's refusal of val_sets = $bad: $out"
done
echo "val_sets: val_path's file scores val_loss bit for bit, another set otherwise, dp 2 and pp 2 alike; refusals before the run directory"
