#!/usr/bin/python3
"""Reference values for plait's whole-model test (tests/model/test_model_reference.c).

Builds nanoGPT's GPT-2 decoder (and plait's small "mlp" arch: the same model
with attention removed from every block) in PyTorch, gives it random float32
weights (the exact initial values go into the fixture, so the C test does not
depend on any RNG), runs one forward and backward in float64 on a fixed batch
and writes tokens, targets, weights, logits, the mean loss and every parameter
gradient.

Usage (Debian's PyTorch):  /usr/bin/python3 tests/reference/make_gpt_fixture.py
Writes tests/reference/gpt_fixture.bin and tests/reference/mlp_fixture.bin.

File format (little-endian):
  line "PLAITFX1"
  line "config arch <gpt|mlp> n_layer L n_head H n_embd C block_size T vocab_size V batch B"
       (an arch's own keys follow: make_llama_fixture.py's)
  lines "tensor <name> <f32|f64|i32> <ndim> <dims...>"   in data order
  line "end"
  the raw tensors, concatenated in the order listed.
Tensors: tokens, targets (i32 [B,T]); param.<name> (f32, nanoGPT names and
shapes, lm_head excluded: it is tied to wte); logits (f64 [B,T,V]); loss
(f64 [1], mean over tokens); grad.<name> (f64; wte's includes the tied head).
"""
import math, os, sys
import torch, torch.nn as nn, torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class Attention(nn.Module):
    def __init__(s, C, H):
        super().__init__()
        s.H = H
        s.c_attn = nn.Linear(C, 3 * C)
        s.c_proj = nn.Linear(C, C)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, s.H, C // s.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return s.c_proj(y)


class MLP(nn.Module):
    def __init__(s, C):
        super().__init__()
        s.c_fc = nn.Linear(C, 4 * C)
        s.c_proj = nn.Linear(4 * C, C)

    def forward(s, x):
        return s.c_proj(F.gelu(s.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(s, C, H, attention):
        super().__init__()
        if attention:
            s.ln_1 = nn.LayerNorm(C)
            s.attn = Attention(C, H)
        s.ln_2 = nn.LayerNorm(C)
        s.mlp = MLP(C)
        s.attention = attention

    def forward(s, x):
        if s.attention:
            x = x + s.attn(s.ln_1(x))
        return x + s.mlp(s.ln_2(x))


class GPT(nn.Module):
    def __init__(s, V, T, L, H, C, attention):
        super().__init__()
        s.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
            h=nn.ModuleList([Block(C, H, attention) for _ in range(L)]),
            ln_f=nn.LayerNorm(C)))
        s.lm_head = nn.Linear(C, V, bias=False)
        s.lm_head.weight = s.transformer.wte.weight

    def forward(s, idx, targets):
        B, T = idx.shape
        x = s.transformer.wte(idx) + s.transformer.wpe(torch.arange(T))
        for b in s.transformer.h:
            x = b(x)
        logits = s.lm_head(s.transformer.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def randomize(model, C):
    """Weights far from a trained or freshly initialised model on purpose:
    attention patterns, GELU and LayerNorm all in their non-linear range."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if ".ln_" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif "wte" in name or "wpe" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))


def write(path, arch, L, H, C, T, V, B, seed):
    torch.manual_seed(seed)
    model = GPT(V, T, L, H, C, attention=(arch == "gpt"))
    randomize(model, C)
    write_step(path, model, f"arch {arch} n_layer {L} n_head {H} n_embd {C} block_size {T} vocab_size {V} batch {B}",
               V, T, B)


def write_step(path, model, config, V, T, B, check_tokens=None):
    """One forward and backward of the float32 weights MODEL holds, in
    float64, on a batch drawn next from torch's generator (tokens, then
    targets, each [B, T] below V), written as the file format above with
    config's line; check_tokens(tokens) may refuse the batch (an
    assertion)."""
    weights = {n: p.detach().clone().float() for n, p in model.named_parameters()}
    tokens = torch.randint(V, (B, T))
    targets = torch.randint(V, (B, T))
    if check_tokens:
        check_tokens(tokens)
    model = model.double()
    logits, loss = model(tokens, targets)
    loss.backward()
    tensors = [("tokens", "i32", tokens.to(torch.int32)), ("targets", "i32", targets.to(torch.int32))]
    tensors += [("param." + n, "f32", w) for n, w in weights.items()]
    tensors += [("logits", "f64", logits.detach()), ("loss", "f64", loss.detach().reshape(1))]
    tensors += [("grad." + n, "f64", p.grad.detach()) for n, p in model.named_parameters()]
    save_fixture(path, config, tensors)
    print(f"{path}: {os.path.getsize(path)} bytes, loss {loss.item():.6f}")


def save_fixture(path, config, tensors):
    """Writes the file format above: config is the line's text after
    "config ", tensors (name, "i32"|"f32"|"f64", tensor) in data order."""
    head = ["PLAITFX1", "config " + config]
    for name, dt, t in tensors:
        head.append(f"tensor {name} {dt} {t.dim()} " + " ".join(str(d) for d in t.shape))
    head.append("end")
    torch_dtype = {"i32": torch.int32, "f32": torch.float32, "f64": torch.float64}
    with open(path, "wb") as f:
        f.write(("\n".join(head) + "\n").encode())
        for name, dt, t in tensors:
            a = t.to(torch_dtype[dt]).contiguous().numpy()
            f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())


if __name__ == "__main__":
    torch.set_num_threads(1)
    # T = 72 spans two of the attention kernel's 64-row tiles; V = 37 is odd
    write(os.path.join(HERE, "gpt_fixture.bin"), "gpt", L=2, H=2, C=16, T=72, V=37, B=2, seed=1234)
    write(os.path.join(HERE, "mlp_fixture.bin"), "mlp", L=2, H=1, C=8, T=8, V=37, B=3, seed=4321)
