#!/usr/bin/env bash
# Weights in and out, without PyTorch: [run] init_from of the
# committed Hugging Face GPT-2 fixture gives the same parameters, bit for
# bit, in one process, dp 2 x tp 2 x pp 2 and dp 2 x pp 2 with ZeRO-3 (one
# step at lr 0 writes them into a checkpoint); a model trained from it,
# exported as hf and as nanogpt (no tokenizer files: the run read its text
# as bytes, which the export says, pointing at no GPT-2 files), imports back bit-identical, and so does
# its run directory given as init_from (its newest checkpoint); a resumed run
# keeps its checkpoint over init_from; a shape mismatch stops the run
# before anything is written, naming the file, the tensor and both shapes
# (a plait checkpoint's head count too);
# export's bad arguments are refused.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/weights_lib.sh"
Z="run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from=$HF"
train imp_one $Z
train imp_d3 $Z parallel.plugin=hybrid parallel.dp=2 parallel.tp=2 parallel.pp=2 data.micro_batch=1
train imp_z3 $Z parallel.plugin=hybrid parallel.dp=2 parallel.pp=2 optim.plugin=zero3 data.micro_batch=1
grep -q "initial weights from $HF (Hugging Face GPT2LMHeadModel" "$E2E_WORK/imp_one.out" ||
  fail "no line naming the weights and their layout"
for r in imp_d3 imp_z3; do same_params imp_one $r 0; done

# trained from the fixture, exported both ways, imported back
train trained run.steps=5 run.init_from=$HF
for fmt in hf nanogpt; do
  "$PLAIT_BIN" export "$E2E_WORK/trained" --format $fmt --out "$E2E_WORK/exp_$fmt" >"$E2E_WORK/exp_$fmt.out" 2>&1 ||
    fail "export --format $fmt: $(cat "$E2E_WORK/exp_$fmt.out")"
  [ -s "$E2E_WORK/exp_$fmt/config.json" ] && [ -s "$E2E_WORK/exp_$fmt/model.safetensors" ] || fail "export $fmt: files missing"
  ! ls "$E2E_WORK/exp_$fmt" | grep -q tmp || fail "export $fmt left a temporary file"
  train back_$fmt run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/exp_$fmt"
  same_params trained back_$fmt 0
done
grep -q '"model_type": "gpt2"' "$E2E_WORK/exp_hf/config.json" && grep -q '"n_head": 4' "$E2E_WORK/exp_hf/config.json" ||
  fail "hf config.json: $(cat "$E2E_WORK/exp_hf/config.json")"
grep -q '"block_size": 24' "$E2E_WORK/exp_nanogpt/config.json" || fail "nanogpt config.json"
grep -q "plait/nanoGPT" "$E2E_WORK/back_nanogpt.out" || fail "the nanogpt export was not read as Linear weights"
# a run on token files records no tokenizer: none exported, and said
[ ! -e "$E2E_WORK/exp_hf/vocab.json" ] && [ ! -e "$E2E_WORK/exp_hf/tokenizer_config.json" ] ||
  fail "a run without a tokenizer exported tokenizer files"
grep -q "note: no tokenizer written: the run recorded none and its model's ids are bytes (a byte-level model)" \
  "$E2E_WORK/exp_hf.out" || fail "no note that the ids are bytes: $(cat "$E2E_WORK/exp_hf.out")"
! grep -q "GPT-2" "$E2E_WORK/exp_hf.out" || fail "a byte-level model's export points at GPT-2's files: $(cat "$E2E_WORK/exp_hf.out")"
# --dtype bf16 and fp16: half the bytes, config.json's torch_dtype, read
# back within the type's rounding (2^-8 and 2^-11 of a tensor's largest
# value); exported again from the run that read it back, the very same
# file (rounding to nearest is idempotent)
for dt in bf16 fp16; do
  "$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --dtype $dt --out "$E2E_WORK/exp_$dt" >"$E2E_WORK/exp_$dt.out" 2>&1 ||
    fail "export --dtype $dt: $(cat "$E2E_WORK/exp_$dt.out")"
  # its own export of a dtype is replaced as its own (the header read, no tensor converted)
  "$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --dtype $dt --out "$E2E_WORK/exp_$dt" >"$E2E_WORK/exp_$dt.out" 2>&1 ||
    fail "export --dtype $dt over its own: $(cat "$E2E_WORK/exp_$dt.out")"
  torch=bfloat16 tol=0.0040
  [ $dt = fp16 ] && torch=float16 tol=0.0005
  grep -q "\"torch_dtype\": \"$torch\"" "$E2E_WORK/exp_$dt/config.json" || fail "$dt: config.json: $(cat "$E2E_WORK/exp_$dt/config.json")"
  full=$(stat -c %s "$E2E_WORK/exp_hf/model.safetensors") half=$(stat -c %s "$E2E_WORK/exp_$dt/model.safetensors")
  [ $((half * 100 / full)) -le 55 ] || fail "$dt export of $half bytes against float32's $full"
  train back_$dt run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/exp_$dt"
  same_params trained back_$dt $tol
  "$PLAIT_BIN" export "$E2E_WORK/back_$dt" --format hf --dtype $dt --out "$E2E_WORK/again_$dt" >/dev/null 2>&1 ||
    fail "export of back_$dt"
  cmp -s "$E2E_WORK/exp_$dt/model.safetensors" "$E2E_WORK/again_$dt/model.safetensors" ||
    fail "$dt: the export of its own read-back differs"
done
out=$("$PLAIT_BIN" export "$E2E_WORK/trained" --format hf --dtype int8 --out "$E2E_WORK/x" 2>&1) && fail "--dtype int8 accepted"
grep -q "dtype int8: must be fp32" <<<"$out" || fail "unclear --dtype error: $out"

# a run directory as init_from, as sample and export take one: its newest checkpoint
train back_run run.steps=1 optim.lr=0 optim.min_lr=0 run.init_from="$E2E_WORK/trained"
grep -q "initial weights from $E2E_WORK/trained/ckpt-00000005/model.safetensors" "$E2E_WORK/back_run.out" ||
  fail "init_from a run directory: not its newest checkpoint: $(grep -i 'initial weights' "$E2E_WORK/back_run.out")"
same_params trained back_run 0

# a resumed run continues its checkpoint; init_from is for fresh runs
train trained --resume run.steps=6 run.init_from=$HF
grep -q "applies to fresh runs only" "$E2E_WORK/trained.out" || fail "resume did not say init_from is ignored"
[ "$(column trained step | tail -n 1)" = 6 ] || fail "resume did not continue to step 6"

# mismatches: nothing written, the tensor and both shapes named
rm -rf "$E2E_WORK/bad"
if "$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/bad" run.init_from="$HF" model.vocab_size=40 >"$E2E_WORK/bad.out" 2>&1; then
  fail "a 40-token config accepted 50-row weights"
fi
grep -q "$HF: tensor 'transformer.wte.weight' has shape \[50, 32\], the config needs \[40, 32\]" "$E2E_WORK/bad.out" ||
  fail "unclear mismatch error: $(tail -n 3 "$E2E_WORK/bad.out")"
! ls "$E2E_WORK/bad" 2>/dev/null | grep -q ckpt || fail "a refused run wrote a checkpoint"
out=$("$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/bad" run.init_from="$(last_ckpt trained)" model.n_head=8 2>&1) &&
  fail "a checkpoint of 4 heads was accepted for 8"
grep -q "trained with n_head = 4, the config has n_head = 8" <<<"$out" || fail "unclear n_head error: $out"
out=$("$PLAIT_BIN" export "$E2E_WORK/trained" --format onnx --out "$E2E_WORK/x" 2>&1) && fail "--format onnx accepted"
grep -q "must be hf" <<<"$out" || fail "unclear --format error: $out"
out=$("$PLAIT_BIN" export "$E2E_WORK/nothing-here" --format hf --out "$E2E_WORK/x" 2>&1) && fail "a missing checkpoint exported"
grep -q "nothing-here: No such file" <<<"$out" || fail "unclear missing-checkpoint error: $out"
[ ! -e "$E2E_WORK/x" ] || fail "a failed export created its output directory"
echo "weights round trip OK"
