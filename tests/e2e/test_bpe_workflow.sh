#!/usr/bin/env bash
# Text to tokens to a trained model and back, as a user runs it: plait
# tokenizer train, plait data prepare (shards), plait train on the shards
# with the tokenizer named, plait sample encoding the prompt and decoding
# the output with it (also with a Llama-3-style tokenizer.json), plait
# export writing the model with that tokenizer
# (read back by plait, and by transformers' AutoTokenizer where importable). Also: encode/decode round trip through the CLI (any
# bytes), tokenizer train and data prepare refusing a compressed or binary
# input, and
# bad inputs (a shard with a bad header, a malformed vocab.json, a token id
# out of range) failing with the file and the offset.
source "$(dirname "$0")/lib.sh"
W=$E2E_WORK
rm -rf "$W/tok" "$W/ds"
"$PLAIT_BIN" tokenizer train data/corpus.txt --vocab 1024 --out "$W/tok" >"$W/train-tok.out" 2>&1 ||
  fail "tokenizer train: $(cat "$W/train-tok.out")"
grep -q "1024 tokens (767 merges)" "$W/train-tok.out" || fail "tokenizer train: $(cat "$W/train-tok.out")"
# piped, its progress is plain lines ending with the phase's closing line
! grep -q $'\r' "$W/train-tok.out" || fail "tokenizer train wrote carriage returns into a pipe"
grep -Eq "^learning merges: vocabulary 1024 / 1024 in [0-9.]+ s$" "$W/train-tok.out" ||
  fail "tokenizer train: no closing progress line: $(cat "$W/train-tok.out")"

# encode then decode is byte-exact, on text and on arbitrary bytes
"$PLAIT_BIN" tokenizer encode "$W/tok" data/corpus.txt >"$W/ids"
"$PLAIT_BIN" tokenizer decode "$W/tok" "$W/ids" | cmp -s - data/corpus.txt || fail "corpus round trip differs"
head -c 20000 /dev/urandom >"$W/noise"
"$PLAIT_BIN" tokenizer encode data/tokenizers/gpt2 "$W/noise" | "$PLAIT_BIN" tokenizer decode data/tokenizers/gpt2 |
  cmp -s - "$W/noise" || fail "random bytes do not round trip through GPT-2's tokenizer"
echo "round trips OK: corpus $(wc -w <"$W/ids") tokens for $(stat -c %s data/corpus.txt) bytes"
# text in, for what trains: a compressed or binary file is refused naming what it is, nothing written
gzip -c data/corpus.txt >"$W/corpus.txt.gz"
printf 'text\0with a NUL\n' >"$W/nul.txt"
for bad in corpus.txt.gz:"is a gzip-compressed file" nul.txt:"byte 4 is NUL"; do
  f=$W/${bad%%:*}
  rm -rf "$W/refused-tok" "$W/refused-ds"
  if "$PLAIT_BIN" tokenizer train "$f" --vocab 300 --out "$W/refused-tok" >"$W/refused.out" 2>&1; then
    fail "tokenizer train accepted $f"; fi
  grep -qF "${bad#*:}" "$W/refused.out" || fail "tokenizer train: unclear refusal: $(cat "$W/refused.out")"
  if "$PLAIT_BIN" data prepare "$f" --tokenizer data/tokenizers/gpt2 --out "$W/refused-ds" >"$W/refused.out" 2>&1; then
    fail "data prepare accepted $f"; fi
  grep -qF "${bad#*:}" "$W/refused.out" || fail "data prepare: unclear refusal: $(cat "$W/refused.out")"
  [ ! -e "$W/refused-tok" ] && [ ! -e "$W/refused-ds" ] || fail "a refused input left an output directory"
done

"$PLAIT_BIN" data prepare data/corpus.txt --tokenizer "$W/tok" --out "$W/ds" --shard-tokens 40000 \
  >"$W/prepare.out" 2>"$W/prepare.err" || fail "data prepare: $(cat "$W/prepare.err")"
grep -Eq "training tokens in 4 shards, [0-9]+ validation tokens in 1 shard \(uint16\)" "$W/prepare.out" ||
  fail "data prepare: $(cat "$W/prepare.out")"
grep -q "100.0%" "$W/prepare.err" || fail "no progress bar reached 100%: $(cat "$W/prepare.err")"
! grep -q $'\r' "$W/prepare.err" || fail "data prepare wrote carriage returns into a pipe"
ls "$W"/ds/train_00000[0-3].bin "$W/ds/val_000000.bin" "$W/ds/vocab.json" "$W/ds/merges.txt" >/dev/null

CFG=$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini
train bpe run.steps=4 model.vocab_size=1024 "data.path=$W/ds/train_*.bin" "data.val_path=$W/ds/val_*.bin" \
  "data.tokenizer=$W/ds"
"$PLAIT_BIN" sample "$W/bpe" --prompt "LOVE, n." --tokens 20 --temperature 0 >"$W/sample.out" 2>"$W/sample.err" ||
  fail "sample: $(cat "$W/sample.err")"
[ "$(head -c 8 "$W/sample.out")" = "LOVE, n." ] || fail "sample does not start with the prompt: $(head -c 60 "$W/sample.out")"
# decoded text, not ids: 20 tokens of at least a byte each after the prompt, then a newline
[ "$(stat -c %s "$W/sample.out")" -ge $((8 + 20 + 1)) ] || fail "sample output too short: $(cat "$W/sample.out")"
! grep -Eq '^LOVE, n\.[0-9]+ ([0-9]+ )+$' "$W/sample.out" || fail "sample printed token ids: $(cat "$W/sample.out")"
# a tokenizer with more ids than the model is refused
! "$PLAIT_BIN" sample "$W/bpe" --tokenizer data/tokenizers/gpt2 --tokens 2 >/dev/null 2>"$W/sample2.err" ||
  fail "GPT-2's tokenizer accepted for a 1024-token model"
grep -q "50257 ids, more than the model's 1024" "$W/sample2.err" || fail "sample: $(cat "$W/sample2.err")"
# a Llama-3-style tokenizer.json (its ids fit the model's 1024): the prompt
# as given, then text decoded with it
"$PLAIT_BIN" sample "$W/bpe" --tokenizer tests/tokenizer/llama3-mini.json --prompt "the" --tokens 2 \
  --temperature 0 >"$W/sample3.out" 2>"$W/sample3.err" || fail "sample with Llama 3's tokenizer: $(cat "$W/sample3.err")"
[ "$(head -c 3 "$W/sample3.out")" = "the" ] ||
  fail "sample with Llama 3's tokenizer does not start with the prompt: $(head -c 60 "$W/sample3.out")"
echo "sample OK: $(head -c 80 "$W/sample.out" | tr '\n' ' ')"
# exported for Hugging Face: the end-of-text id is the run's tokenizer's (the
# last of its 1024), not GPT-2's 50256
rm -rf "$W/exp"
"$PLAIT_BIN" export "$W/bpe" --format hf --out "$W/exp" >"$W/exp.out" 2>&1 || fail "export: $(cat "$W/exp.out")"
grep -q "\"eos_token_id\": 1023," "$W/exp/config.json" || fail "export: eos_token_id is not the tokenizer's: $(grep token_id "$W/exp/config.json")"
"$PLAIT_BIN" export "$W/bpe" --format hf --out "$W/exp" >"$W/exp.out" 2>&1 || fail "export again into its own files: $(cat "$W/exp.out")"
# ... and the run's tokenizer beside the model: the files plait's tokenizer
# writes, which read back encode as the run's tokenizer does
for f in vocab.json merges.txt; do
  cmp -s "$W/exp/$f" "$W/ds/$f" || fail "export: $f is not the run's tokenizer's"
done
grep -q "the run's tokenizer as $W/exp/vocab.json, merges.txt, tokenizer_config.json" "$W/exp.out" ||
  fail "export does not name the tokenizer files: $(cat "$W/exp.out")"
grep -q '"tokenizer_class": "GPT2Tokenizer"' "$W/exp/tokenizer_config.json" &&
  grep -q '"eos_token": "<|endoftext|>"' "$W/exp/tokenizer_config.json" &&
  grep -q '"model_max_length": 32' "$W/exp/tokenizer_config.json" ||
  fail "export: tokenizer_config.json: $(cat "$W/exp/tokenizer_config.json")"
SAMPLE='Fair “quoted” café — 20 naïve 🙂 words,  spaced\tand
new lines.'
printf '%s' "$SAMPLE" >"$W/sample.txt"
"$PLAIT_BIN" tokenizer encode "$W/exp" data/corpus.txt | cmp -s - "$W/ids" ||
  fail "the exported tokenizer encodes the corpus otherwise than the run's"
"$PLAIT_BIN" tokenizer encode "$W/ds" "$W/sample.txt" >"$W/sample.ids"
"$PLAIT_BIN" tokenizer encode "$W/exp" "$W/sample.txt" | cmp -s - "$W/sample.ids" ||
  fail "the exported tokenizer encodes the sample otherwise than the run's"
# transformers, where importable (PLAIT_HF_PYTHON names another python):
# AutoTokenizer of the export gives plait's ids and decodes them back
PY=${PLAIT_HF_PYTHON:-/usr/bin/python3}
if "$PY" -c "import transformers" 2>/dev/null; then
  "$PY" - "$W/exp" data/corpus.txt "$W/ids" "$W/sample.txt" "$W/sample.ids" <<'PYCHECK' || fail "AutoTokenizer of the export differs from plait's tokenizer"
import sys
from transformers import AutoTokenizer
out, *pairs = sys.argv[1:]
names = []
for kw in ({}, {"use_fast": False}):  # the tokenizers library's, and the Python one where there is one
    tok = AutoTokenizer.from_pretrained(out, **kw)
    names.append(type(tok).__name__)
    assert tok.eos_token_id == tok.bos_token_id == 1023 and len(tok) == 1024, (tok.eos_token_id, len(tok))
    for text_path, ids_path in zip(pairs[::2], pairs[1::2]):
        text = open(text_path, encoding="utf-8").read()
        want = [int(x) for x in open(ids_path).read().split()]
        got = tok(text)["input_ids"]
        assert got == want, f"{names[-1]}, {text_path}: {len(got)} ids, plait {len(want)}; first difference at " \
            f"{next(i for i, (a, b) in enumerate(zip(got + [-1], want + [-1])) if a != b)}"
        assert tok.decode(got) == text, f"{names[-1]}, {text_path}: decoding does not give the text back"
print(f"AutoTokenizer ({', '.join(sorted(set(names)))}) of the export encodes and decodes as plait's tokenizer")
PYCHECK
else
  echo "note: $PY cannot import transformers: the AutoTokenizer check of the export is skipped"
fi
# the nanogpt export writes no tokenizer (nanoGPT names tiktoken's gpt2)
rm -rf "$W/exp-ng"
"$PLAIT_BIN" export "$W/bpe" --format nanogpt --out "$W/exp-ng" >"$W/exp-ng.out" 2>&1 || fail "export nanogpt: $(cat "$W/exp-ng.out")"
[ "$(ls "$W/exp-ng")" = "$(printf 'config.json\nmodel.safetensors')" ] || fail "nanogpt export wrote $(ls "$W/exp-ng")"
# a tokenizer file export did not write is not replaced (nor one that is a
# link), unless it holds what export writes
for foreign in other link same; do
  rm -rf "$W/exp-$foreign" && mkdir "$W/exp-$foreign"
  case $foreign in
    other) echo '{"a": 0}' >"$W/exp-$foreign/vocab.json" ;;
    link) ln -s "$W/ds/merges.txt" "$W/exp-$foreign/merges.txt" ;;
    same) cp "$W/ds/vocab.json" "$W/ds/merges.txt" "$W/exp-$foreign/" ;;
  esac
  if "$PLAIT_BIN" export "$W/bpe" --format hf --out "$W/exp-$foreign" >"$W/exp-$foreign.out" 2>&1; then
    [ $foreign = same ] || fail "export replaced a $foreign tokenizer file"
  else
    [ $foreign != same ] || fail "export refused its own tokenizer files: $(cat "$W/exp-$foreign.out")"
    grep -Eq "exp-$foreign/(vocab.json was not written by plait export|merges.txt is a symbolic link)" \
      "$W/exp-$foreign.out" ||
      fail "unclear refusal of a $foreign tokenizer file: $(cat "$W/exp-$foreign.out")"
  fi
done
[ "$(cat "$W/exp-other/vocab.json")" = '{"a": 0}' ] && [ ! -e "$W/exp-other/model.safetensors" ] ||
  fail "a refused export changed its --out"
# a tokenizer changed since the run trained with it: said, and not exported
cp "$W/ds/merges.txt" "$W/merges.keep"
head -n -1 "$W/merges.keep" >"$W/ds/merges.txt"
rm -rf "$W/exp-changed"
"$PLAIT_BIN" export "$W/bpe" --format hf --out "$W/exp-changed" >"$W/exp-changed.out" 2>&1 ||
  fail "export with a changed tokenizer: $(cat "$W/exp-changed.out")"
"$PLAIT_BIN" export "$W/bpe" --format hf --out "$W/exp" >"$W/exp-changed2.out" 2>&1 ||
  fail "export with a changed tokenizer over an earlier export: $(cat "$W/exp-changed2.out")"
mv "$W/merges.keep" "$W/ds/merges.txt"
grep -q "the vocab.json and merges.txt already in $W/exp are left as they were" "$W/exp-changed2.out" ||
  fail "an earlier export's tokenizer kept without a note: $(cat "$W/exp-changed2.out")"
grep -q "has changed since this run trained with it .*no tokenizer files are written" "$W/exp-changed.out" ||
  fail "a changed tokenizer not said: $(cat "$W/exp-changed.out")"
[ ! -e "$W/exp-changed/vocab.json" ] && grep -q '"eos_token_id": null' "$W/exp-changed/config.json" ||
  fail "a changed tokenizer was exported"

# a shard with a bad header: the file and the offset of the field
cp "$W/ds/val_000000.bin" "$W/bad.bin"
printf '\x05' | dd of="$W/bad.bin" bs=1 seek=8 conv=notrunc status=none
! "$PLAIT_BIN" train "$CFG" model.vocab_size=1024 "data.path=$W/ds/train_*.bin" "data.val_path=$W/bad.bin" \
  "run.out_dir=$W/badrun" >"$W/bad.out" 2>&1 || fail "a shard with a bad header was accepted"
grep -Eq "bad.bin: byte 8: llm.c header says [0-9]+ tokens .* but the file has [0-9]+ bytes" "$W/bad.out" || fail "bad header: $(tail -3 "$W/bad.out")"
# a model vocabulary smaller than the data's ids: the file and the byte offset
! "$PLAIT_BIN" train "$CFG" model.vocab_size=300 "data.path=$W/ds/train_*.bin" "data.val_path=$W/ds/val_*.bin" \
  "run.out_dir=$W/badrun" >"$W/small.out" 2>&1 || fail "tokens beyond vocab_size were accepted"
grep -Eq "train_000000.bin: token [0-9]+ at byte offset [0-9]+ \(token index [0-9]+\) is not below \[model\] vocab_size = 300" \
  "$W/small.out" || fail "vocab too small: $(tail -3 "$W/small.out")"
# a malformed vocab.json and an id out of range for decode
mkdir -p "$W/broken" && cp "$W/tok/merges.txt" "$W/broken/" && head -c 500 "$W/tok/vocab.json" >"$W/broken/vocab.json"
! "$PLAIT_BIN" tokenizer encode "$W/broken" data/corpus.txt >/dev/null 2>"$W/broken.err" || fail "a truncated vocab.json loaded"
grep -q "broken/vocab.json: byte 500" "$W/broken.err" || fail "truncated vocab.json: $(cat "$W/broken.err")"
! echo "5 1024 7" | "$PLAIT_BIN" tokenizer decode "$W/tok" >/dev/null 2>"$W/decode.err" || fail "id 1024 decoded"
grep -q "stdin: byte 2: expected a token id 0..1023" "$W/decode.err" || fail "decode: $(cat "$W/decode.err")"
echo "bad inputs OK"

# the run's tokenizer replaced in place (tokenizer train --out the same
# directory): sample refuses the recorded path, naming the change; the
# files given again with --tokenizer are used as asked
"$PLAIT_BIN" tokenizer train data/corpus.txt --vocab 600 --out "$W/tok600" >/dev/null 2>&1 || fail "tokenizer train 600"
cp "$W/tok600/vocab.json" "$W/tok600/merges.txt" "$W/ds/"
! "$PLAIT_BIN" sample "$W/bpe" --prompt "LOVE" --tokens 2 >/dev/null 2>"$W/changed.err" ||
  fail "sample decoded with a tokenizer replaced since training"
grep -q "has changed since this run trained with it" "$W/changed.err" || fail "sample: $(cat "$W/changed.err")"
"$PLAIT_BIN" sample "$W/bpe" --tokenizer "$W/ds" --prompt "LOVE" --tokens 2 >/dev/null 2>"$W/changed.err" ||
  fail "sample --tokenizer: $(cat "$W/changed.err")"
echo "a replaced tokenizer: refused unless named"
