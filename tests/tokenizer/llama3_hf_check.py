"""plait's encoding of a Llama-3-style tokenizer.json (or a Qwen2-style one)
against Hugging Face tokenizers' own (nothing downloaded).

tokenizers learns a small byte-level BPE with Llama 3's pre-tokenizer (a
Split with Llama 3's pattern, then ByteLevel without GPT-2's), ignore_merges,
<|begin_of_text|> and <|end_of_text|> as added tokens and a TemplateProcessing
putting <|begin_of_text|> first, and saves tokenizer.json; `plait tokenizer
encode` must give the ids tokenizers gives (without the template's token,
which plait's encode leaves to its callers) for texts that go through every
branch of the pattern.

With qwen2, Qwen2's instead (Qwen2, 2.5 and 3): an NFC normalizer, the
pattern with single digits, ignore_merges false, <|endoftext|>,
<|im_start|> and <|im_end|> added, a ByteLevel post-processor; the texts
besides hold characters NFC composes, reorders and decomposes.

usage: llama3_hf_check.py PLAIT_BIN WORKDIR [qwen2]
"""
import os
import subprocess
import sys

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
           r"\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. I'M SURE it's fine; you'RE right, they'll see.\n\n",
    "Numbers: 12345 1,234,567 3.14159 and 2024-06-01, phone 555-0100.\r\n",
    "  Indented line\twith\ttabs   and   spaces.\n    def f(x):\n        return x ** 2\n",
    "Na\u00efve caf\u00e9 r\u00e9sum\u00e9 \u00fcber stra\u00dfe \u00c5ngstr\u00f6m \u2014 \u201cquoted\u201d text!!! ???\n",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\u4e2d\u6587\u6587\u672c\uff0c\u8fd8\u6709\u6807\u70b9\u3002 "
    "\u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0661\u0662\u0663\u0664 \u0440\u0443\u0441\u0441\u043a\u0438\u0439 "
    "\u0442\u0435\u043a\u0441\u0442\n",
    "emoji \U0001f600\U0001f389 and symbols \u00a9\u00ae\u2122 ... (parens) [brackets] {braces} <tags>\n",
]

QWEN2_PATTERN = PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")

# decomposed letters, marks out of order, Hangul jamo, excluded and
# singleton decompositions, marks after digits and at the start
NFC_TEXTS = [
    "cafe\u0301 re\u0301sume\u0301", "A\u030angstro\u0308m", "a\u0316\u0301 a\u0301\u0316", "d\u0307\u0323",
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af", "\u0958\u0915\u093c", "\u212b \u2126 \u2000",
    "\u0301start", "1\u0301 2\u0308 x\u0327\u0301", "Ko\u0308ln 2024 \u0661\u0662\u0663", "\u00c5\u212b\u0041\u030a",
]

TEXTS = [
    "I'M here", "you'RE'll", "don't", "'hello", "'\u017f x", "12345", " 12345", "1,234,567",
    "\u0663\u0664\u0665\u0666", "Hello.\n\nWorld", "end.)\r\n", "a ?!\nb", "(x)", "?\n", "a  b",
    "a   word", "x\n  y", "  \n\n  end", "a\r\n\r\nb", "trailing   ", "\tindent", " \tx",
    "x\u00a0y", "x \u3000y", "na\u00efve caf\u00e9", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "The quick brown fox jumps over the lazy dog.", "    def f(x):\n        return x ** 2\n",
] + CORPUS + ["".join(CORPUS)]


def main():
    plait, work = sys.argv[1], sys.argv[2]
    qwen2 = sys.argv[3:] == ["qwen2"]
    os.makedirs(work, exist_ok=True)
    tok = Tokenizer(models.BPE(ignore_merges=not qwen2))
    if qwen2:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN if qwen2 else PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 3 + (NFC_TEXTS if qwen2 else []), trainer=trainer)
    if qwen2:
        # after the learned ones, as Qwen2's; its post-processor a ByteLevel (offsets only)
        tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        return check(plait, work, tok, TEXTS + NFC_TEXTS, None)
    # after the learned ones and outside the model's vocabulary, as Llama 3's
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return check(plait, work, tok, TEXTS, bos)


def check(plait, work, tok, texts, bos):
    """TOK saved as WORK/tokenizer.json; plait's ids of each text equal
    tokenizers' (without BOS, the template's first token, where one is)."""
    path = os.path.join(work, "tokenizer.json")
    tok.save(path)
    failed = 0
    for i, text in enumerate(texts):
        want = tok.encode(text, add_special_tokens=False).ids
        assert tok.encode(text).ids == ([bos] if bos is not None else []) + want
        src = os.path.join(work, "text%d" % i)
        with open(src, "wb") as f:
            f.write(text.encode("utf-8"))
        out = subprocess.run([plait, "tokenizer", "encode", path, src], capture_output=True, text=True)
        got = [int(x) for x in out.stdout.split()] if out.returncode == 0 else None
        if got != want:
            failed += 1
            print("FAIL %r: plait %s (%s), tokenizers %s" % (text, got, out.stderr.strip(), want))
    print("%d of %d texts encoded as tokenizers %s does" % (len(texts) - failed, len(texts),
                                                           __import__("tokenizers").__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
