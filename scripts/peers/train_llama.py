#!/usr/bin/env python3
"""Hugging Face transformers' LlamaForCausalLM trained with AdamW: the
throughput peer of plait's `[model] arch = llama`, on the CPU in float32, or
on a GPU (--device cuda) in float32 or under bf16 autocast (--bf16),
optionally torch.compile'd (--compile).

Usage (any python with torch and transformers; PLAIT_TORCH_PYTHON in
scripts/bench-llama-torch.sh names it; scripts/gpu-issues.sh runs the GPU form):
  train_llama.py --threads 2 [--n_layer 4 --n_head 4 --n_kv_head 2 --n_embd 128
                 --ffn_hidden 352 --block 128 --batch 8 --warmup 3 --steps 10]
  train_llama.py --device cuda --bf16 --compile [the same shape options]

The model is the one plait builds for the same keys (RMSNorm, rotary
positions with rope_theta, SwiGLU of width ffn_hidden, grouped-query
attention, no biases, untied head unless --tied), initialised as
transformers does (normal, std 0.02). The tokens are the bytes of
data/corpus.txt's training part (its first 1 - val_fraction), random windows
of block + 1 bytes, as plait's byte-level runs read them. AdamW as plait's
adam plugin: betas (0.9, 0.99), weight decay 0.1 on the matrices only (not on
the norms' weights), the global gradient norm clipped to 1.0, constant lr
(a schedule costs nothing measurable). The loss is the mean cross-entropy of
every position's next byte, computed from the logits as plait does (no
`labels=`, which would drop the last position).

On a GPU the model's weights and AdamW's state are float32 (bf16 autocast
computes the products in bf16, as plait's `precision = bf16` does), AdamW is
PyTorch's fused one, and each step is timed from a synchronize to a
synchronize. A vocabulary over 256 draws the same bytes (the token values
change no step's time).

Prints one RESULT line: the median step time over --steps steps after
--warmup steps, tokens/s at that median, FLOPs a token counted as
`plait bench train` counts them (6N + 12·L·C·T, N the parameters), and on a
GPU the allocator's peak (max_memory_allocated, in GB of 1e9 bytes). Exits
77, saying why, when torch or transformers cannot be imported, or when
--device cuda finds no GPU."""
import argparse
import math
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--n_layer", type=int, default=4)
ap.add_argument("--n_head", type=int, default=4)
ap.add_argument("--n_kv_head", type=int, default=2)
ap.add_argument("--n_embd", type=int, default=128)
ap.add_argument("--ffn_hidden", type=int, default=352)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--block", type=int, default=128)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--rope_theta", type=float, default=10000.0)
ap.add_argument("--tied", action="store_true", help="tie the output head to the token embedding")
ap.add_argument("--attn", default="sdpa", help="transformers' attn_implementation: sdpa (its default) or eager")
ap.add_argument("--threads", type=int, default=1)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=10)
ap.add_argument("--lr", type=float, default=3e-3)
ap.add_argument("--corpus", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                                                 "corpus.txt"))
ap.add_argument("--val_fraction", type=float, default=0.1)
ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
ap.add_argument("--bf16", action="store_true", help="bf16 autocast (float32 weights and optimizer state)")
ap.add_argument("--compile", action="store_true", help="torch.compile the model")
a = ap.parse_args()

# before torch loads: its OpenMP and BLAS pools size themselves from these
os.environ["OMP_NUM_THREADS"] = str(a.threads)
os.environ["MKL_NUM_THREADS"] = str(a.threads)
os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
try:
    import torch
    import torch.nn.functional as F
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
except ImportError as e:
    print(f"SKIP: {sys.executable} cannot import torch and transformers: {e}")
    sys.exit(77)
torch.set_num_threads(a.threads)
if a.device == "cuda" and not torch.cuda.is_available():
    print(f"SKIP: torch {torch.__version__} in {sys.executable} sees no CUDA device")
    sys.exit(77)
dev = torch.device(a.device)

with open(a.corpus, "rb") as f:
    buf = f.read()
buf = buf[: int(len(buf) * (1.0 - a.val_fraction))]
if a.vocab < 256:
    sys.exit(f"--vocab {a.vocab}: byte tokens need at least 256")
data = torch.frombuffer(bytearray(buf), dtype=torch.uint8).long()
g = torch.Generator().manual_seed(1337)


def batch():
    ix = torch.randint(len(data) - a.block - 1, (a.batch,), generator=g)
    x = torch.stack([data[i:i + a.block] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + a.block] for i in ix])
    return x.to(dev), y.to(dev)


torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.n_embd, intermediate_size=a.ffn_hidden,
                  num_hidden_layers=a.n_layer, num_attention_heads=a.n_head, num_key_value_heads=a.n_kv_head,
                  max_position_embeddings=a.block, rms_norm_eps=1e-5, rope_theta=a.rope_theta, hidden_act="silu",
                  attention_bias=False, mlp_bias=False, tie_word_embeddings=a.tied, bos_token_id=None,
                  eos_token_id=None, pad_token_id=None, use_cache=False)
cfg._attn_implementation = a.attn
model = LlamaForCausalLM(cfg).float().to(dev)
model.train()
N = sum(p.numel() for p in model.parameters())
decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=a.lr, betas=(0.9, 0.99), **({"fused": True} if a.device == "cuda" else {}))
run = torch.compile(model) if a.compile else model


def sync():
    if a.device == "cuda":
        torch.cuda.synchronize()

ts, losses = [], []
for step in range(a.warmup + a.steps):
    x, y = batch()
    sync()
    t0 = time.perf_counter()
    with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16):
        logits = run(input_ids=x, use_cache=False).logits
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)).float(), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    sync()
    dt = time.perf_counter() - t0
    losses.append(loss.item())
    if step >= a.warmup:
        ts.append(dt)
ts.sort()
med = ts[len(ts) // 2]
tok_step = a.batch * a.block
fpt = 6 * N + 12 * a.n_layer * a.n_embd * a.block
peak = torch.cuda.max_memory_allocated() / 1e9 if a.device == "cuda" else 0.0
mode = f"device={a.device} bf16={int(a.bf16)} compile={int(a.compile)} peak_mem_GB={peak:.2f}"
print(f"RESULT peer=torch-{torch.__version__}_transformers-{transformers.__version__} attn={a.attn} {mode} "
      f"cfg=L{a.n_layer}_H{a.n_head}_KV{a.n_kv_head}_C{a.n_embd}_F{a.ffn_hidden}_V{a.vocab}_T{a.block}_B{a.batch} "
      f"threads={a.threads} omp_wait={os.environ.get('OMP_WAIT_POLICY', 'default')} params={N} "
      f"ms_step_median={med * 1e3:.2f} ms_step_min={ts[0] * 1e3:.2f} ms_step_max={ts[-1] * 1e3:.2f} "
      f"tok_s={tok_step / med:.0f} flops_per_tok={fpt} GFLOPs={fpt * tok_step / med / 1e9:.2f} "
      f"loss_first={losses[0]:.3f} loss_last={losses[-1]:.3f} steps={a.steps}", flush=True)
