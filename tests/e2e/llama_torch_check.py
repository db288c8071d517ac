"""plait's llama against Hugging Face transformers' LlamaForCausalLM (and
Qwen2ForCausalLM, plait's llama with [model] qkv_bias, Qwen3ForCausalLM,
plait's llama with [model] qk_norm, and MistralForCausalLM without a
sliding window).

  llama_torch_check.py make DIR TOKENS [tied] [llama3] [qwen2 | qwen3 | mistral] [headdim]
      a random LlamaForCausalLM (2 layers, hidden 64, 4 heads, 2 key/value
      heads, intermediate 176, vocabulary 256, rope_theta 10000; weights
      drawn from N(0, 0.08), the norms' from U(0.5, 1.5), so that no weight
      is trivially 0 or 1), saved with save_pretrained(safe_serialization=
      True) into DIR, sharded (max_shard_size 40KB: an index and a file
      a tensor or so) into DIR-sharded, and in bfloat16 into DIR-bf16;
      llama3: with Llama 3.1's rope scaling (rope_type llama3, factor 8,
      low_freq_factor 1, high_freq_factor 4, and an original context of 16
      positions, so that the 32 tokens meet kept, blended and divided
      frequencies alike);
      qwen2: a Qwen2ForCausalLM of the same shape instead (q, k and v
      with biases, drawn as the norms' weights, from U(0.5, 1.5));
      qwen3: a Qwen3ForCausalLM of the same shape (q and k norms, their
      weights from U(0.5, 1.5), no biases);
      mistral: a MistralForCausalLM of the same shape (sliding_window
      null: Mistral 7B v0.3's); headdim: heads of 32 (head_dim), not
      hidden_size / num_attention_heads = 16;
      and TOKENS, a safetensors file with "tokens" [2, 32] (float32 ids,
      as tests/checkpoint/weights_logits.c reads them).
  llama_torch_check.py logits DIR TOKENS PLAIT_LOGITS
      DIR loaded by AutoModelForCausalLM.from_pretrained, the class its
      config.json names (LlamaForCausalLM, Qwen2ForCausalLM,
      Qwen3ForCausalLM, MistralForCausalLM; nothing missing but a
      tied lm_head, nothing unexpected); its float32 logits on TOKENS equal
      PLAIT_LOGITS within 1e-4 of the largest logit (max |diff| / max
      |logit|, printed).
  llama_torch_check.py rounded DIR32 DIR16 DTYPE
      DIR16 (plait export --dtype bf16 or fp16 of the model DIR32 was
      exported from) loaded by AutoModelForCausalLM.from_pretrained with
      dtype "auto" holds its tensors in DTYPE (bfloat16 | float16), as its
      config.json names it, and each equals torch's rounding of DIR32's
      float32 tensor to DTYPE bit for bit (round to nearest, ties to even).
  llama_torch_check.py greedy DIR PROMPT N SAMPLE_OUT
      transformers' greedy continuation of PROMPT's bytes by N tokens
      equals the bytes `plait sample --temperature 0` wrote (the prompt,
      N tokens, a line break).

Nothing is downloaded: every model is built here or read from DIR. Exit 0
when the check holds, 1 otherwise.
"""
import os
import sys

import torch
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check import compare, load, randomize, save  # noqa: E402


def make(out_dir, tokens_path, tied=False, llama3=False, qwen2=False, mistral=False, headdim=False, qwen3=False):
    torch.manual_seed(1234)
    scaling = None
    if llama3:
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16}
    shape = dict(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0,
                 rope_scaling=scaling, hidden_act="silu", tie_word_embeddings=tied, bos_token_id=None,
                 eos_token_id=None, pad_token_id=None)
    if headdim:
        shape["head_dim"] = 32
    if qwen3:  # Qwen3Config's head_dim is 128 where it is not given
        shape.setdefault("head_dim", 16)
        model = Qwen3ForCausalLM(Qwen3Config(use_sliding_window=False, attention_bias=False, **shape)).float()
    elif qwen2:
        model = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=False, **shape)).float()
    elif mistral:
        model = MistralForCausalLM(MistralConfig(sliding_window=None, **shape)).float()
    else:
        model = LlamaForCausalLM(LlamaConfig(attention_bias=False, mlp_bias=False, **shape)).float()
    randomize(model)
    save(model, out_dir, tokens_path)
    model.to(torch.bfloat16).save_pretrained(out_dir + "-bf16", safe_serialization=True)
    return 0


def logits(model_dir, tokens_path, plait_path):
    model = load(AutoModelForCausalLM, model_dir)
    if model is None:
        return 1
    return compare(model, model_dir, tokens_path, plait_path)


def rounded(dir32, dir16, dtype_name):
    dtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype_name]
    full = load(AutoModelForCausalLM, dir32)
    if full is None:
        return 1
    try:
        half = AutoModelForCausalLM.from_pretrained(dir16, dtype="auto")
    except TypeError:  # transformers before 4.56 names it torch_dtype
        half = AutoModelForCausalLM.from_pretrained(dir16, torch_dtype="auto")
    want = full.state_dict()
    bad = []
    for name, t in half.state_dict().items():
        if t.dtype != dtype:
            bad.append(f"{name} is {t.dtype}")
        elif not torch.equal(t.view(torch.int16), want[name].to(dtype).view(torch.int16)):
            bad.append(f"{name} differs from torch's rounding in {(t != want[name].to(dtype)).sum().item()} elements")
    print(f"rounded: {len(half.state_dict())} tensors of {dir16} in {dtype_name}: " + ("; ".join(bad) or "each equals torch's rounding"))
    return 1 if bad else 0


def greedy(model_dir, prompt, n, sample_out):
    model = load(AutoModelForCausalLM, model_dir)
    if model is None:
        return 1
    ids = torch.tensor([list(prompt.encode())])
    with torch.no_grad():
        for _ in range(n):
            nxt = model(input_ids=ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
    want = bytes(ids[0].tolist()) + b"\n"
    got = open(sample_out, "rb").read()
    print(f"greedy: transformers {list(want[:-1])}\n        plait        {list(got[:-1])}")
    return 0 if got == want else 1


def main(argv):
    torch.set_num_threads(1)
    if argv[0] == "make":
        return make(argv[1], argv[2], "tied" in argv[3:], "llama3" in argv[3:], "qwen2" in argv[3:],
                    "mistral" in argv[3:], "headdim" in argv[3:], "qwen3" in argv[3:])
    if argv[0] == "logits":
        return logits(*argv[1:4])
    if argv[0] == "rounded":
        return rounded(*argv[1:4])
    if argv[0] == "greedy":
        return greedy(argv[1], argv[2], int(argv[3]), argv[4])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
