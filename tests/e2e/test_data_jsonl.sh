#!/usr/bin/env bash
# plait data prepare of JSON Lines: the bundled corpus's paragraphs as a
# .jsonl file (one object a paragraph, the text under "body") prepared with
# --json-key body gives a document-start token a paragraph and trains;
# the same lines gzipped and piped to `-` with --format jsonl give the same
# shards; [data] eod_mask_loss without eod_token masks after the
# tokenizer's <|endoftext|>, as eod_token = 50256 does; without --json-key the lines are refused naming the file and
# line, and the output directory is not made.
source "$(dirname "$0")/lib.sh"
jsonl=$E2E_WORK/corpus.jsonl
python3 - "$PLAIT_SOURCE_DIR/data/corpus.txt" "$jsonl" <<'PY'
import json, sys
paras = [p for p in open(sys.argv[1], encoding="utf-8").read().split("\n\n") if p.strip()]
with open(sys.argv[2], "w", encoding="utf-8") as f:
    for i, p in enumerate(paras):
        f.write(json.dumps({"id": i, "body": p + "\n"}) + "\n")
print(len(paras))
PY
paras=$(wc -l <"$jsonl")
out=$("$PLAIT_BIN" data prepare "$jsonl" --json-key text --tokenizer data/tokenizers/gpt2 --out "$E2E_WORK/none" 2>&1) &&
  fail "prepare took lines without \"text\": $out"
grep -q "corpus.jsonl: line 1: the object has no \"text\" (name the document's member with --json-key)" <<<"$out" ||
  fail "the refusal: $out"
[ ! -e "$E2E_WORK/none" ] || fail "a refused prepare left its output directory"
"$PLAIT_BIN" data prepare "$jsonl" --json-key body --tokenizer data/tokenizers/gpt2 --out "$E2E_WORK/ds" \
  >"$E2E_WORK/prepare.out" 2>&1 || fail "prepare: $(tail -n 3 "$E2E_WORK/prepare.out")"
docs=$(python3 - "$E2E_WORK/ds" <<'PY'
import glob, struct, sys
n = 0
for path in sorted(glob.glob(sys.argv[1] + "/*_*.bin")):
    data = open(path, "rb").read()
    toks = struct.unpack("<%dH" % ((len(data) - 1024) // 2), data[1024:])
    n += sum(1 for t in toks if t == 50256)
print(n)
PY
)
[ "$docs" = "$paras" ] || fail "$paras paragraphs gave $docs document starts"
gzip -c "$jsonl" >"$jsonl.gz"
gzip -dc "$jsonl.gz" | "$PLAIT_BIN" data prepare - --format jsonl --json-key body --tokenizer data/tokenizers/gpt2 \
  --out "$E2E_WORK/piped" >"$E2E_WORK/piped.out" 2>&1 || fail "prepare from stdin: $(tail -n 3 "$E2E_WORK/piped.out")"
for f in train_000000.bin val_000000.bin; do
  cmp -s "$E2E_WORK/ds/$f" "$E2E_WORK/piped/$f" || fail "$f from stdin differs from the file's"
done
D=(run.steps=2 run.deterministic=true model.vocab_size=50304 "data.path=$E2E_WORK/ds/train_*.bin"
  "data.val_path=$E2E_WORK/ds/val_*.bin" data.tokenizer=data/tokenizers/gpt2)
train jsonl "${D[@]}"
# eod_mask_loss takes the tokenizer's <|endoftext|> (50256) when eod_token is not given
train auto "${D[@]}" data.eod_mask_loss=true
train explicit "${D[@]}" data.eod_mask_loss=true data.eod_token=50256
same_losses auto explicit 0
[ "$(column auto loss | sed -n 1p)" != "$(column jsonl loss | sed -n 1p)" ] || fail "masking after <|endoftext|> changed nothing"
echo "data prepare: $paras JSON Lines documents, each with its start token; the same through a pipe; trained; a wrong key refused"
