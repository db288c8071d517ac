#!/usr/bin/python3
"""plait's exports loaded into PyTorch give plait's logits.

  weights_torch_check.py HF_DIR NANOGPT_DIR TOKENS PLAIT_LOGITS

HF_DIR (plait export --format hf) is loaded into a GPT2LMHeadModel-format
module (tests/reference/make_hf_fixture.py: Conv1D projections) from its
config.json and model.safetensors with load_state_dict: the only keys it
may lack are the causal-mask buffers and the tied lm_head. NANOGPT_DIR
(--format nanogpt) is loaded with strict=True into nanoGPT's format
(nn.Linear projections, lm_head tied to wte). Each model's float64 logits
on TOKENS must equal PLAIT_LOGITS within 1e-4 relative (max |diff| over
max |logit|). Exit 0 when they do, 1 otherwise.
"""
import json, os, sys
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "reference")]
import make_hf_fixture as hf  # noqa: E402
import make_gpt_fixture as nano  # noqa: E402  (nanoGPT's format: nn.Linear, tied head)
from torch_check import logits_agree  # noqa: E402


def compare(what, logits, want):
    return logits_agree(what, logits, want, who="PyTorch")


def main():
    hf_dir, ng_dir, tokens_path, plait_path = sys.argv[1:5]
    tokens = hf.load_safetensors(tokens_path)[0]["tokens"].long()
    want = hf.load_safetensors(plait_path)[0]["logits"].double()
    ok = True

    cfg = json.load(open(os.path.join(hf_dir, "config.json")))
    assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"], cfg
    m = hf.GPT2LMHead(cfg["vocab_size"], cfg["n_positions"], cfg["n_layer"], cfg["n_head"], cfg["n_embd"])
    state, _ = hf.load_safetensors(os.path.join(hf_dir, "model.safetensors"))
    res = m.load_state_dict(state, strict=False)
    allowed = [k for k in res.missing_keys if k.endswith((".attn.bias", ".attn.masked_bias")) or k == "lm_head.weight"]
    if res.unexpected_keys or len(allowed) != len(res.missing_keys):
        print(f"hf export: unexpected {res.unexpected_keys}, missing {res.missing_keys}")
        ok = False
    with torch.no_grad():
        ok &= compare("hf export in GPT2LMHeadModel format", m.double()(tokens), want)

    cfg = json.load(open(os.path.join(ng_dir, "config.json")))
    n = nano.GPT(*(cfg[k] for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")), attention=True)
    state, _ = hf.load_safetensors(os.path.join(ng_dir, "model.safetensors"))
    n.load_state_dict(state, strict=True)
    with torch.no_grad():
        ok &= compare("nanogpt export in nanoGPT format", n.double()(tokens, tokens)[0], want)
    return 0 if ok else 1


if __name__ == "__main__":
    torch.set_num_threads(1)
    sys.exit(main())
