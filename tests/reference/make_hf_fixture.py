#!/usr/bin/python3
"""Fixtures for plait's GPT-2 weight import and export.

Builds a small GPT-2 in the Hugging Face GPT2LMHeadModel layout, written
here from its documented state dict (transformers is not a Debian package;
when it is importable, the same weights are also loaded into
transformers.GPT2LMHeadModel and its logits must agree): Conv1D projections
whose weight is [in, out] (y = x @ W + b), the tied lm_head left out as
save_pretrained does, the "transformer." prefix, and each block's
non-parameter buffers attn.bias (the causal mask) and attn.masked_bias as
older transformers versions stored them. Random float32 weights (no
download), one forward in float64 on fixed tokens.

Usage (Debian's PyTorch):  /usr/bin/python3 tests/reference/make_hf_fixture.py
Writes, in tests/reference/:
  hf_gpt2_tiny.safetensors      the model, as a Hugging Face file
  hf_gpt2_tiny_ref.safetensors  "tokens" [B, T] (token ids as F32) and
                                "logits" [B, T, V] (F32, computed in float64)

The module is also imported by tests/e2e/weights_torch_check.py, which loads
plait's exports back into it.
"""
import json, math, os, struct, sys
import torch, torch.nn as nn, torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
L, H, C, T, V, B = 2, 4, 32, 24, 50, 2


class Conv1D(nn.Module):
    """GPT-2's projection: weight [in, out], y = x @ W + b."""
    def __init__(s, n_in, n_out):
        super().__init__()
        s.weight = nn.Parameter(torch.empty(n_in, n_out))
        s.bias = nn.Parameter(torch.empty(n_out))

    def forward(s, x):
        return x @ s.weight + s.bias


class Attention(nn.Module):
    def __init__(s, C, H, T):
        super().__init__()
        s.H = H
        s.c_attn = Conv1D(C, 3 * C)
        s.c_proj = Conv1D(C, C)
        s.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T))
        s.register_buffer("masked_bias", torch.tensor(-1e4))

    def forward(s, x):
        B_, T_, C_ = x.shape
        q, k, v = s.c_attn(x).split(C_, dim=2)
        q, k, v = (t.view(B_, T_, s.H, C_ // s.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(s.bias[:, :, :T_, :T_] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return s.c_proj(y.transpose(1, 2).contiguous().view(B_, T_, C_))


class MLP(nn.Module):
    def __init__(s, C):
        super().__init__()
        s.c_fc = Conv1D(C, 4 * C)
        s.c_proj = Conv1D(4 * C, C)

    def forward(s, x):  # gelu_new: the tanh approximation
        return s.c_proj(F.gelu(s.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(s, C, H, T):
        super().__init__()
        s.ln_1 = nn.LayerNorm(C, eps=1e-5)
        s.attn = Attention(C, H, T)
        s.ln_2 = nn.LayerNorm(C, eps=1e-5)
        s.mlp = MLP(C)

    def forward(s, x):
        x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class GPT2LMHead(nn.Module):
    def __init__(s, V, T, L, H, C):
        super().__init__()
        s.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block(C, H, T) for _ in range(L)]), ln_f=nn.LayerNorm(C, eps=1e-5)))
        s.lm_head = nn.Linear(C, V, bias=False)
        s.lm_head.weight = s.transformer.wte.weight

    def forward(s, idx):
        x = s.transformer.wte(idx) + s.transformer.wpe(torch.arange(idx.shape[1]))
        for b in s.transformer.h:
            x = b(x)
        return s.lm_head(s.transformer.ln_f(x))


def randomize(model):
    """Weights in every non-linearity's interesting range."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:  # Conv1D [in, out]
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[0]))


def save_safetensors(path, tensors, metadata=None):
    """The safetensors format (header length, JSON header, raw little-endian data)."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        a = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(a)]}
        blobs.append(a)
        off += len(a)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for a in blobs:
            f.write(a)
    os.replace(path + ".tmp", path)


def load_safetensors(path):
    """Read a safetensors file of F32 tensors into torch tensors."""
    import numpy as np
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, d in header.items():
        if name == "__metadata__":
            continue
        assert d["dtype"] == "F32", (path, name, d["dtype"])
        b, e = d["data_offsets"]
        a = np.frombuffer(raw, dtype="<f4", count=(e - b) // 4, offset=8 + n + b)
        out[name] = torch.from_numpy(a.copy()).reshape(d["shape"])
    return out, header.get("__metadata__", {})


def build(seed=2024):
    torch.manual_seed(seed)
    model = GPT2LMHead(V, T, L, H, C)
    randomize(model)
    return model


def hf_state(model):
    """What GPT2LMHeadModel.save_pretrained writes: no lm_head (tied)."""
    return {n: t for n, t in model.state_dict().items() if n != "lm_head.weight"}


def check_transformers(state, tokens, logits):
    try:
        import transformers
    except ImportError:
        print("transformers not importable: the layout is the documented GPT2LMHeadModel state dict")
        return
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=H,
                                  activation_function="gelu_new", resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    m = transformers.GPT2LMHeadModel(cfg).eval()
    m.load_state_dict(state, strict=False)
    ref = m.double()(tokens).logits
    err = (ref - logits).abs().max().item()
    assert err < 1e-9, err
    print(f"transformers {transformers.__version__} agrees (max diff {err:.2e})")


if __name__ == "__main__":
    torch.set_num_threads(1)
    model = build()
    state = hf_state(model)
    torch.manual_seed(7)
    tokens = torch.randint(V, (B, T))
    with torch.no_grad():
        logits = model.double()(tokens)
    check_transformers(state, tokens, logits)
    save_safetensors(os.path.join(HERE, "hf_gpt2_tiny.safetensors"), state, {"format": "pt"})
    save_safetensors(os.path.join(HERE, "hf_gpt2_tiny_ref.safetensors"),
                     {"tokens": tokens.float(), "logits": logits.float()})
    print(f"hf_gpt2_tiny: L={L} H={H} C={C} T={T} V={V}; logits |max| {logits.abs().max().item():.3f}")
