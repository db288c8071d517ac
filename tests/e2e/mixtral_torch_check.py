"""plait's llama mixture of experts against Hugging Face transformers'
MixtralForCausalLM and Qwen3MoeForCausalLM.

  mixtral_torch_check.py make DIR TOKENS [qwen3_moe | qwen3_moe_step2] [KEY=JSON ...]
      a random MixtralForCausalLM (2 layers, hidden 64, 4 heads, 2
      key/value heads, 4 experts of width 96, top 2, vocabulary 256,
      rope_theta 10000; weights drawn from N(0, 0.08), the routers' from
      N(0, 0.5) so that no token's second and third expert nearly tie, the
      norms' from U(0.5, 1.5)), or with qwen3_moe a Qwen3MoeForCausalLM of
      the same shape (q and k norms of 16, norm_topk_prob true; with
      qwen3_moe_step2 decoder_sparse_step 2: block 0 a dense MLP of width
      176, block 1 sparse), saved with save_pretrained into DIR and
      sharded (max_shard_size 40KB: an index and a file a few tensors) into
      DIR-sharded; and TOKENS, a safetensors file with "tokens" [2, 32]
      (float32 ids, as tests/checkpoint/weights_logits.c reads them);
      for each KEY=JSON, DIR-KEY: DIR's config.json with KEY set to JSON,
      and symbolic links to DIR's other files.
  mixtral_torch_check.py CHECK [+ CHECK ...]
      each CHECK in one process (transformers loads once):
  logits DIR TOKENS PLAIT_LOGITS
      DIR loaded by AutoModelForCausalLM.from_pretrained, the class its
      config.json names (nothing missing,
      nothing unexpected); its float32 logits on TOKENS equal PLAIT_LOGITS
      within 1e-4 of the largest logit (max |diff| / max |logit|, printed).
  same A B
      the safetensors files A and B hold the same tensor names, shapes and
      bits.

Nothing is downloaded. Exit 0 when the check holds, 1 otherwise.
"""
import json
import os
import shutil
import sys

import torch
from safetensors.torch import load_file
from transformers import (AutoModelForCausalLM, MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig,
                          Qwen3MoeForCausalLM)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_check import compare, load, randomize, save  # noqa: E402


def make(out_dir, tokens_path, configs):
    torch.manual_seed(4321)
    shape = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 max_position_embeddings=64, rms_norm_eps=1e-5, rope_theta=10000.0, hidden_act="silu",
                 num_experts_per_tok=2, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                 pad_token_id=None)
    family = configs[0] if configs and configs[0].startswith("qwen3_moe") else None
    configs = configs[1:] if family else configs
    if family:
        cfg = Qwen3MoeConfig(intermediate_size=176, moe_intermediate_size=96, num_experts=4, head_dim=16,
                             norm_topk_prob=True, decoder_sparse_step=2 if family.endswith("step2") else 1,
                             mlp_only_layers=[], attention_bias=False, use_sliding_window=False, **shape)
        model = Qwen3MoeForCausalLM(cfg).float()
    else:
        cfg = MixtralConfig(intermediate_size=96, num_local_experts=4, router_jitter_noise=0.0, **shape)
        model = MixtralForCausalLM(cfg).float()
    randomize(model, router="gate.weight")
    save(model, out_dir, tokens_path)
    for kv in configs:
        key, value = kv.split("=", 1)
        config(out_dir, out_dir + "-" + key, key, value)
    return 0


def logits(model_dir, tokens_path, plait_path):
    model = load(AutoModelForCausalLM, model_dir)
    return 1 if model is None else compare(model, model_dir, tokens_path, plait_path)


def same(a_path, b_path):
    a, b = load_file(a_path), load_file(b_path)
    if sorted(a) != sorted(b):
        print(f"tensor names differ: only in {a_path}: {sorted(set(a) - set(b))}, "
              f"only in {b_path}: {sorted(set(b) - set(a))}")
        return 1
    bad = [k for k in a if a[k].shape != b[k].shape or a[k].dtype != b[k].dtype
           or not torch.equal(a[k].view(torch.int32), b[k].view(torch.int32))]
    print(f"{len(a)} tensors, {len(bad)} differ{': ' + ', '.join(bad[:5]) if bad else ''}")
    return 1 if bad else 0


def config(src, dst, key, value):
    shutil.rmtree(dst, ignore_errors=True)
    os.makedirs(dst)
    for f in os.listdir(src):
        if f != "config.json":
            os.symlink(os.path.join(os.path.abspath(src), f), os.path.join(dst, f))
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg[key] = json.loads(value)
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    return 0


def main(argv):
    torch.set_num_threads(1)
    if argv[0] == "make":
        return make(argv[1], argv[2], argv[3:])
    rc = 0
    while argv:
        check, argv = (argv[:argv.index("+")], argv[argv.index("+") + 1:]) if "+" in argv else (argv, [])
        if check[0] == "logits" and len(check) == 4:
            rc |= logits(*check[1:4])
        elif check[0] == "same" and len(check) == 3:
            rc |= same(check[1], check[2])
        else:
            print(__doc__)
            return 2
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
