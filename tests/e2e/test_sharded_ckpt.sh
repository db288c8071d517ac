#!/usr/bin/env bash
# Sharded checkpoints ([run] ckpt_format = sharded) in deterministic mode:
# - a dp 2 ZeRO-1 save (each rank its own shard file, one index.json)
#   resumes at pp 2 and at dp 4 ZeRO-3, and both continue one process's
#   uninterrupted run bit for bit (losses and the final checkpoint);
# - a dp 2 x tp 2 ZeRO-1 save with a vocabulary TP pads (257) resumes at
#   pp 2, at dp 4 ZeRO-3 and in one process exactly as the same layout's
#   gathered checkpoint does (losses bit for bit), and so does a tp 2 x
#   pp 2 interleaved save at dp 2 ZeRO-3;
# - bad input: a damaged shard file, a missing one, another model's shard
#   file in its place, an index.json that does not match its files, and a
#   save that one rank (world rank 1) did not finish are each skipped for
#   the previous complete checkpoint, naming the file and so the rank that
#   wrote it; nothing is lost; a whole checkpoint of another model is
#   refused naming the key that differs;
# - plait export of a sharded checkpoint writes the very file it writes
#   from the gathered checkpoint of the same state;
# - [run] ckpt_async: background saves leave the losses bit for bit, one
#   resumes exactly, a gathered save refuses the key, and a failed
#   background write ends the run naming the rank and the file, the
#   previous checkpoint kept.
source "$(dirname "$0")/lib.sh"
A="run.steps=6 run.ckpt_every=3 parallel.plugin=hybrid data.micro_batch=1 run.deterministic=true"
S="run.ckpt_format=sharded"
Z1="parallel.dp=2 optim.plugin=zero1"

train one $A
train dz $A $Z1 $S run.steps=3
[ -f "$E2E_WORK/dz/ckpt-00000003/index.json" ] || fail "the sharded save wrote no index.json"
for r in 0 1; do
  [ -f "$E2E_WORK/dz/ckpt-00000003/shard-0000$r.safetensors" ] || fail "world rank $r wrote no shard file"
done
grep -q '"begin": 0, "end"' "$E2E_WORK/dz/ckpt-00000003/index.json" || fail "index.json records no slices"
# plait export assembles each tensor from its slices: the same file as from
# the gathered checkpoint of the same state
for f in hf nanogpt; do
  "$PLAIT_BIN" export "$E2E_WORK/dz/ckpt-00000003" --format $f --out "$E2E_WORK/ex_s_$f" >/dev/null
  "$PLAIT_BIN" export "$E2E_WORK/one/ckpt-00000003" --format $f --out "$E2E_WORK/ex_g_$f" >/dev/null
  cmp -s "$E2E_WORK/ex_s_$f/model.safetensors" "$E2E_WORK/ex_g_$f/model.safetensors" ||
    fail "plait export --format $f of the sharded checkpoint differs from the gathered one's"
done
rm -rf "$E2E_WORK/dz_z3"
cp -r "$E2E_WORK/dz" "$E2E_WORK/dz_z3"
train dz $A parallel.pp=2 --resume
train dz_z3 $A parallel.dp=4 optim.plugin=zero3 --resume
for r in dz dz_z3; do
  grep -q "resuming from $E2E_WORK/$r/ckpt-00000003" "$E2E_WORK/$r.out" || fail "$r did not resume from step 3"
  same_losses one "$r" 0
  same_params one "$r" bits
done

# dp 2 x tp 2, vocabulary 257: the same layout's gathered save is the reference
V="model.vocab_size=257 parallel.tp=2"
train g4 $A $Z1 $V run.steps=3
train s4 $A $Z1 $V $S run.steps=3
for to in pp2 z3 one; do
  case $to in
    pp2) L="parallel.pp=2" ;;
    z3) L="parallel.dp=4 optim.plugin=zero3" ;;
    one) L="" ;;
  esac
  rm -rf "$E2E_WORK/g4_$to" "$E2E_WORK/s4_$to"
  cp -r "$E2E_WORK/g4" "$E2E_WORK/g4_$to"
  cp -r "$E2E_WORK/s4" "$E2E_WORK/s4_$to"
  train "g4_$to" $A model.vocab_size=257 $L --resume
  train "s4_$to" $A model.vocab_size=257 $L --resume
  grep -q "resuming from $E2E_WORK/s4_$to/ckpt-00000003" "$E2E_WORK/s4_$to.out" || fail "s4_$to did not resume"
  same_losses "g4_$to" "s4_$to" 0
  same_params "g4_$to" "s4_$to" bits
done

# tp 2 x pp 2 interleaved (two chunks per stage): resumed at dp 2 ZeRO-3
# exactly as the same layout's gathered checkpoint
IV="parallel.tp=2 parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2"
train giv $A $IV run.steps=3
train siv $A $IV $S run.steps=3
train giv $A parallel.dp=2 optim.plugin=zero3 --resume
train siv $A parallel.dp=2 optim.plugin=zero3 --resume
grep -q "resuming from $E2E_WORK/siv/ckpt-00000003" "$E2E_WORK/siv.out" || fail "siv did not resume"
same_losses giv siv 0
same_params giv siv bits

# bad input: each damaged newest checkpoint is skipped for ckpt-3
train bad $A $Z1 $S
train bad_model $A $Z1 $S model.n_layer=1
for how in flip gone other index rank1; do
  rm -rf "$E2E_WORK/bad_$how"
  cp -r "$E2E_WORK/bad" "$E2E_WORK/bad_$how"
  c="$E2E_WORK/bad_$how/ckpt-00000006"
  case $how in
    flip) printf '\x55' | dd of="$c/shard-00001.safetensors" bs=1 seek=300 conv=notrunc status=none
          want="ckpt-00000006/shard-00001.safetensors: checksum mismatch" ;;
    gone) rm "$c/shard-00001.safetensors"
          want="ckpt-00000006/shard-00001.safetensors" ;;
    other) cp "$E2E_WORK/bad_model/ckpt-00000006/shard-00001.safetensors" "$c/"
           want="ckpt-00000006/shard-00001.safetensors: truncated: " ;;
    index) sed -i 's/"end": \([0-9]*\)/"end": 1\1/' "$c/index.json"
           want="ckpt-00000006/index.json: " ;;
    rank1) rm -rf "$c"
           if "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/bad_$how" $A $Z1 $S run.resume=auto \
             run.debug_die_in_save=6 run.debug_die_in_save_rank=1 >"$E2E_WORK/bad_rank1_die.out" 2>&1; then
             fail "a run whose world rank 1 died in its save succeeded"
           fi
           [ -f "$c/shard-00001.safetensors" ] || fail "world rank 1 died before writing its shard"
           [ ! -e "$c/COMPLETE" ] || fail "a save that world rank 1 did not finish is marked complete"
           want="ckpt-00000006 is incomplete: no COMPLETE marker (its save was interrupted; shard files in place: world ranks" ;;
  esac
  train "bad_$how" $A $Z1 $S run.steps=9 run.resume=auto
  grep -qF "$want" "$E2E_WORK/bad_$how.out" || fail "bad_$how: no warning naming $want: $(grep -i ckpt-00000006 "$E2E_WORK/bad_$how.out" | head -n 3)"
  grep -q "resuming from $E2E_WORK/bad_$how/ckpt-00000003" "$E2E_WORK/bad_$how.out" ||
    fail "bad_$how did not resume from the previous complete checkpoint"
  [ -f "$E2E_WORK/bad_$how/ckpt-00000009/COMPLETE" ] || fail "bad_$how: no complete checkpoint at step 9"
done
train_refused bad_model_resume "it holds a model with [model] n_layer = 1, but this run has n_layer = 2" \
  "run.out_dir=$E2E_WORK/bad_model" $A $Z1 $S run.steps=9 --resume
# [run] ckpt_async: saves at steps 2 and 4 written in the background while
# training goes on (the last one waited for); the losses are one process's,
# and a resume from the background save of step 4 continues them bit for bit
AS="$S run.ckpt_async=true run.ckpt_every=2 run.keep_checkpoints=5"
train async $A $Z1 $AS
same_losses one async 0
for s in 2 4 6; do [ -f "$E2E_WORK/async/ckpt-0000000$s/COMPLETE" ] || fail "async: no complete checkpoint of step $s"; done
rm -rf "$E2E_WORK/async/ckpt-00000006"
train async $A parallel.dp=4 optim.plugin=zero3 --resume
grep -q "resuming from $E2E_WORK/async/ckpt-00000004" "$E2E_WORK/async.out" || fail "async did not resume from step 4"
same_losses one async 0
same_params one async bits
rm -rf "${E2E_WORK:?}/async_gathered"
train_refused async_gathered "needs [run] ckpt_format = sharded" "run.out_dir=$E2E_WORK/async_gathered" $A \
  run.ckpt_async=true
[ -e "$E2E_WORK/async_gathered" ] && fail "the refused gathered async run made its directory"
"$PLAIT_BIN" config check "$CFG" run.ckpt_async=true >"$E2E_WORK/async_check.out" 2>&1 &&
  fail "config check accepted ckpt_async with gathered saves"
grep -qF "[run] ckpt_async = true needs [run] ckpt_format = sharded" "$E2E_WORK/async_check.out" ||
  fail "config check's refusal of ckpt_async: $(tail -n 2 "$E2E_WORK/async_check.out")"
# a background write that fails (a directory where world rank 1's shard of
# step 4 goes): reported at a later step naming the rank and the file; the
# save of step 2 stays the run's complete checkpoint
train async_fail $A $Z1 $AS run.steps=2
mkdir -p "$E2E_WORK/async_fail/ckpt-00000004/shard-00001.safetensors"
train_refused async_fail "world rank 1 could not write its shard $E2E_WORK/async_fail/ckpt-00000004/shard-00001.safetensors" \
  "run.out_dir=$E2E_WORK/async_fail" $A $Z1 $AS --resume
[ -f "$E2E_WORK/async_fail/ckpt-00000002/COMPLETE" ] || fail "async_fail: the checkpoint of step 2 is gone"
[ ! -e "$E2E_WORK/async_fail/ckpt-00000004/COMPLETE" ] || fail "async_fail: the failed save is marked complete"
echo "sharded checkpoints OK"
