#!/usr/bin/python3
"""Reference values of plait's llama arch for tests/model/test_model_reference.c.

A Llama-family decoder written out in PyTorch as Hugging Face's
LlamaForCausalLM computes it (RMSNorm, rotary positions with the pair i,
i + HS/2, grouped-query attention, the SwiGLU MLP, no biases, an untied
lm_head), with random float32 weights in their non-linear range, one
forward and backward in float64 on a fixed batch: tokens, targets, weights,
logits, the mean loss and every parameter gradient, in
make_gpt_fixture.py's file format. Every Llama kernel of a device's table
is on this path: RMSNorm forward and backward with its weight gradient,
the rotation and its inverse, SwiGLU forward and backward, grouped-query
attention forward and backward.

Usage:  /path/to/python-with-torch tests/reference/make_llama_fixture.py
Writes tests/reference/llama_fixture.bin (grouped-query attention) and
llama_mqa_fixture.bin (multi-query attention, a head size of no
specialised kernel, Llama 3.1's rope scaling). Their config line adds,
after make_gpt_fixture.py's keys, the [model] keys of the arch as "key
value" pairs. The rotary angles are float64 here: plait's float32 angles
(core/model/rope_freq.h) are within the float32 tolerances of them at
these positions.
"""
import math, os, sys
import torch, torch.nn as nn, torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from make_gpt_fixture import write_step  # noqa: E402


class RMSNorm(nn.Module):
    def __init__(s, C, eps):
        super().__init__()
        s.weight = nn.Parameter(torch.ones(C))
        s.eps = eps

    def forward(s, x):
        return s.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps))


def rotate(x, cos, sin):
    """Hugging Face's apply_rotary_pos_emb: x·cos + rotate_half(x)·sin."""
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., h:], x[..., :h]), dim=-1) * sin


class Attention(nn.Module):
    def __init__(s, C, H, KV):
        super().__init__()
        s.H, s.KV, s.HS = H, KV, C // H
        s.q_proj = nn.Linear(C, H * s.HS, bias=False)
        s.k_proj = nn.Linear(C, KV * s.HS, bias=False)
        s.v_proj = nn.Linear(C, KV * s.HS, bias=False)
        s.o_proj = nn.Linear(H * s.HS, C, bias=False)

    def forward(s, x, cos, sin):
        B, T, _ = x.shape
        q = s.q_proj(x).view(B, T, s.H, s.HS).transpose(1, 2)
        k = s.k_proj(x).view(B, T, s.KV, s.HS).transpose(1, 2)
        v = s.v_proj(x).view(B, T, s.KV, s.HS).transpose(1, 2)
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        # grouped-query: query head h reads key/value head h / (H / KV)
        k = k.repeat_interleave(s.H // s.KV, dim=1)
        v = v.repeat_interleave(s.H // s.KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(s.HS)
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return s.o_proj((att @ v).transpose(1, 2).reshape(B, T, s.H * s.HS))


class MLP(nn.Module):
    def __init__(s, C, Fw):
        super().__init__()
        s.gate_proj = nn.Linear(C, Fw, bias=False)
        s.up_proj = nn.Linear(C, Fw, bias=False)
        s.down_proj = nn.Linear(Fw, C, bias=False)

    def forward(s, x):
        return s.down_proj(F.silu(s.gate_proj(x)) * s.up_proj(x))


class Layer(nn.Module):
    def __init__(s, C, H, KV, Fw, eps):
        super().__init__()
        s.input_layernorm = RMSNorm(C, eps)
        s.self_attn = Attention(C, H, KV)
        s.post_attention_layernorm = RMSNorm(C, eps)
        s.mlp = MLP(C, Fw)

    def forward(s, x, cos, sin):
        x = x + s.self_attn(s.input_layernorm(x), cos, sin)
        return x + s.mlp(s.post_attention_layernorm(x))


class Llama(nn.Module):
    def __init__(s, V, L, H, KV, C, Fw, theta, eps, scaling):
        super().__init__()
        s.model = nn.Module()
        s.model.embed_tokens = nn.Embedding(V, C)
        s.model.layers = nn.ModuleList([Layer(C, H, KV, Fw, eps) for _ in range(L)])
        s.model.norm = RMSNorm(C, eps)
        s.lm_head = nn.Linear(C, V, bias=False)
        s.HS, s.theta, s.scaling = C // H, theta, scaling

    def forward(s, idx, targets):
        B, T = idx.shape
        inv_freq = 1.0 / s.theta ** (torch.arange(0, s.HS, 2, dtype=torch.float64) / s.HS)
        if s.scaling:
            inv_freq = llama3_scaled(inv_freq, **s.scaling)
        ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().to(s.lm_head.weight.dtype), ang.sin().to(s.lm_head.weight.dtype)
        x = s.model.embed_tokens(idx)
        for layer in s.model.layers:
            x = layer(x, cos, sin)
        logits = s.lm_head(s.model.norm(x))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


def llama3_scaled(inv, factor, low, high, old_len):
    """transformers' _compute_llama3_parameters: wavelengths below
    old_len / high kept, above old_len / low divided by factor, a smooth
    blend between."""
    wavelen = 2 * math.pi / inv
    smooth = (old_len / wavelen - low) / (high - low)
    blended = (1 - smooth) * inv / factor + smooth * inv
    return torch.where(wavelen < old_len / high, inv, torch.where(wavelen > old_len / low, inv / factor, blended))


def randomize(model):
    """Far from a trained or fresh model on purpose: attention patterns,
    SiLU and the norms all in their non-linear range."""
    for name, p in model.named_parameters():
        with torch.no_grad():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif "embed_tokens" in name:
                p.copy_(0.5 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[1]))


def write(path, L, H, KV, C, Fw, T, V, B, theta, eps, seed, scaling=None):
    torch.manual_seed(seed)
    model = Llama(V, L, H, KV, C, Fw, theta, eps, scaling)
    randomize(model)
    keys = f"n_kv_head {KV} ffn_hidden {Fw} rope_theta {theta:g} norm_eps {eps:g}"
    if scaling:
        keys += (f" rope_scaling llama3 rope_factor {scaling['factor']:g} rope_low_freq_factor {scaling['low']:g}"
                 f" rope_high_freq_factor {scaling['high']:g} rope_original_max_pos {scaling['old_len']}")
    config = f"arch llama n_layer {L} n_head {H} n_embd {C} block_size {T} vocab_size {V} batch {B} {keys}"
    write_step(path, model, config, V, T, B, check_tokens=reads_token_0)


def reads_token_0(tokens):
    # test_model_reference's --perturb changes element 5 of token 0's
    # embedding row: the batch must read it
    assert (tokens == 0).any()


if __name__ == "__main__":
    torch.set_num_threads(1)
    # T = 72 spans two of the attention kernel's 64-row tiles; two query
    # heads a key/value head; a MLP width of no power of two; V = 37 odd
    write(os.path.join(HERE, "llama_fixture.bin"), L=2, H=4, KV=2, C=32, Fw=56, T=72, V=37, B=2,
          theta=10000.0, eps=1e-5, seed=2024)
    # one key/value head for 4 query heads of size 12; theta 500000 and
    # the scaling put the 6 frequencies' wavelengths in all three of its
    # bands (6.3 kept, 56 blended, 499 and longer divided by 8)
    write(os.path.join(HERE, "llama_mqa_fixture.bin"), L=1, H=4, KV=1, C=48, Fw=40, T=72, V=37, B=2,
          theta=500000.0, eps=1e-6, seed=77, scaling=dict(factor=8.0, low=1.0, high=4.0, old_len=200))
