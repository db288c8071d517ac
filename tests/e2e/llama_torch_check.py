"""plait's llama against Hugging Face transformers' LlamaForCausalLM.

  llama_torch_check.py make DIR TOKENS [tied] [llama3]
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
      and TOKENS, a safetensors file with "tokens" [2, 32] (float32 ids,
      as tests/checkpoint/weights_logits.c reads them).
  llama_torch_check.py logits DIR TOKENS PLAIT_LOGITS
      DIR loaded by LlamaForCausalLM.from_pretrained (nothing missing but a
      tied lm_head, nothing unexpected); its float32 logits on TOKENS equal
      PLAIT_LOGITS within 1e-4 of the largest logit (max |diff| / max
      |logit|, printed).
  llama_torch_check.py greedy DIR PROMPT N SAMPLE_OUT
      transformers' greedy continuation of PROMPT's bytes by N tokens
      equals the bytes `plait sample --temperature 0` wrote (the prompt,
      N tokens, a line break).

Nothing is downloaded: every model is built here or read from DIR. Exit 0
when the check holds, 1 otherwise.
"""
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM


def make(out_dir, tokens_path, tied=False, llama3=False):
    torch.manual_seed(1234)
    scaling = None
    if llama3:
        scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 16}
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      rms_norm_eps=1e-5, rope_theta=10000.0, rope_scaling=scaling, hidden_act="silu",
                      attention_bias=False, mlp_bias=False, tie_word_embeddings=tied, bos_token_id=None,
                      eos_token_id=None, pad_token_id=None)
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.08)
    model.save_pretrained(out_dir, safe_serialization=True)
    model.save_pretrained(out_dir + "-sharded", safe_serialization=True, max_shard_size="40KB")
    model.to(torch.bfloat16).save_pretrained(out_dir + "-bf16", safe_serialization=True)
    tokens = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(5))
    save_file({"tokens": tokens.float().contiguous()}, tokens_path)
    return 0


def load(model_dir):
    try:
        model, info = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    except TypeError:  # transformers before 4.56 names it torch_dtype
        model, info = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32,
                                                       attn_implementation="eager", output_loading_info=True)
    missing = [k for k in info.get("missing_keys", []) if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        print(f"{model_dir}: missing {missing}, unexpected {info.get('unexpected_keys')}, "
              f"mismatched {info.get('mismatched_keys')}")
        return None
    return model.eval()


def logits(model_dir, tokens_path, plait_path):
    model = load(model_dir)
    if model is None:
        return 1
    return compare(model, model_dir, tokens_path, plait_path)


def compare(model, model_dir, tokens_path, plait_path):
    """0 when `model`'s float32 logits on TOKENS equal PLAIT_LOGITS within
    1e-4 of the largest logit (also mixtral_torch_check.py's)."""
    tokens = load_file(tokens_path)["tokens"].long()
    want = load_file(plait_path)["logits"].double()
    with torch.no_grad():
        got = model(input_ids=tokens).logits.double()
    err = (got - want).abs().max().item()
    scale = want.abs().max().item()
    rel = err / scale if scale > 0 else float("inf")
    print(f"{model_dir}: max |transformers - plait| = {err:.3g}, max |logit| = {scale:.3g}, relative {rel:.3g}")
    return 0 if rel <= 1e-4 else 1


def greedy(model_dir, prompt, n, sample_out):
    model = load(model_dir)
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
        return make(argv[1], argv[2], "tied" in argv[3:], "llama3" in argv[3:])
    if argv[0] == "logits":
        return logits(*argv[1:4])
    if argv[0] == "greedy":
        return greedy(argv[1], argv[2], int(argv[3]), argv[4])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
