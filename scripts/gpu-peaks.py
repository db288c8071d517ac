#!/usr/bin/env python3
"""The GPU's physical limits, measured in the same call as plait's figures
(scripts/gpu-session.sh), through PyTorch (the GPU machine has it; plait needs no
Python):
  - the bf16 GEMM rate: an 8192^3 product on random data (the measured
    denominator of MFU beside the datasheet's 989 TFLOP/s for an H100 SXM);
  - cudaMemcpyAsync between pinned (page-locked) host memory and the GPU, both
    directions, for --mib MiB (the staging target is 80% of it at 64 MiB);
  - causal attention in bf16 through torch.nn.functional.scaled_dot_product_attention
    (the fused kernel PyTorch picks: FlashAttention or cuDNN's) at --attn's shape,
    GPT-2 124M's at batch 16 by default: the forward, and forward and backward,
    as TFLOP/s with the FLOPs FlashAttention counts for a causal mask (forward
    2·B·NH·T²·HS, backward 2.5 times that), which gpu-session.sh sets beside
    plait's fused attention from its profile.
Each figure is the median of --iters runs timed with CUDA events after 3
untimed ones. The copy is checked: the bytes brought back equal those sent.

usage: gpu-peaks.py [--mib 64] [--iters 20] [--gemm 8192] [--attn B,NH,T,HS]
Prints readable lines and one RESULT line. Exits 77 (saying why) where PyTorch
or a CUDA device is missing."""
import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=64)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--gemm", type=int, default=8192)
ap.add_argument("--attn", default="16,12,1024,64", help="B,NH,T,HS of the attention measured")
a = ap.parse_args()
try:
    import torch
except ImportError as e:
    print(f"SKIP: no PyTorch ({e})")
    sys.exit(77)
if not torch.cuda.is_available():
    print("SKIP: PyTorch sees no CUDA device")
    sys.exit(77)

stream = torch.cuda.Stream()


def median_ms(fn):
    times = []
    with torch.cuda.stream(stream):
        for i in range(3 + a.iters):
            s0 = torch.cuda.Event(enable_timing=True)
            s1 = torch.cuda.Event(enable_timing=True)
            s0.record(stream)
            fn()
            s1.record(stream)
            s1.synchronize()
            if i >= 3:
                times.append(s0.elapsed_time(s1))
    times.sort()
    return times[len(times) // 2]


# bf16 GEMM (random data: zeros run faster than real data)
k = a.gemm
x = torch.randn(k, k, device="cuda", dtype=torch.bfloat16)
y = torch.randn(k, k, device="cuda", dtype=torch.bfloat16)
z = torch.empty(k, k, device="cuda", dtype=torch.bfloat16)
gemm_ms = median_ms(lambda: torch.matmul(x, y, out=z))
tflops = 2 * k**3 / (gemm_ms / 1e3) / 1e12
del x, y, z

# pinned copies
n = a.mib << 20
host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
host.random_(0, 256)
dev = torch.empty(n, dtype=torch.uint8, device="cuda")
h2d = median_ms(lambda: dev.copy_(host, non_blocking=True))
d2h = median_ms(lambda: host.copy_(dev, non_blocking=True))
back = torch.empty(n, dtype=torch.uint8, pin_memory=True)
back.copy_(dev)
if not torch.equal(back, host):
    print("FAIL: the bytes copied back differ from the bytes sent")
    sys.exit(1)


def gbs(ms):
    return n / (ms / 1e3) / 1e9


del host, dev, back

# causal attention, bf16, (B, NH, T, HS) laid out as SDPA takes it; a
# failure here costs the attention figures alone
B, NH, T, HS = (int(x) for x in a.attn.split(","))
attn = {"sdpa_fwd_ms": "n/a", "sdpa_fwd_TFLOPs": "n/a", "sdpa_bwd_ms": "n/a", "sdpa_bwd_TFLOPs": "n/a"}
attn_line = "causal attention: not measured"
try:
    q, kk, v = (torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                for _ in range(3))
    dout = torch.randn(B, NH, T, HS, device="cuda", dtype=torch.bfloat16)
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def attn_fwd():
        with torch.no_grad():
            sdpa(q, kk, v, is_causal=True)

    def attn_fwd_bwd():
        o = sdpa(q, kk, v, is_causal=True)
        torch.autograd.grad(o, (q, kk, v), dout)

    fwd_ms = median_ms(attn_fwd)
    bwd_ms = max(median_ms(attn_fwd_bwd) - fwd_ms, 1e-6)
    attn_flop = 2.0 * B * NH * T * T * HS  # causal: half of the two products' 4·T²·HS
    fwd_tf = attn_flop / (fwd_ms / 1e3) / 1e12
    bwd_tf = 2.5 * attn_flop / (bwd_ms / 1e3) / 1e12
    attn = {"sdpa_fwd_ms": f"{fwd_ms:.3f}", "sdpa_fwd_TFLOPs": f"{fwd_tf:.1f}", "sdpa_bwd_ms": f"{bwd_ms:.3f}",
            "sdpa_bwd_TFLOPs": f"{bwd_tf:.1f}"}
    attn_line = (f"causal attention (SDPA, bf16, B {B} NH {NH} T {T} HS {HS}): forward {fwd_ms:.3f} ms, "
                 f"{fwd_tf:.1f} TFLOP/s; backward {bwd_ms:.3f} ms, {bwd_tf:.1f} TFLOP/s")
except Exception as e:  # noqa: BLE001 - reported, the other figures stand
    attn_line = f"causal attention: failed ({type(e).__name__}: {e})"

name = torch.cuda.get_device_name()
print(f"{name}: bf16 GEMM {k}^3: {gemm_ms:.3f} ms, {tflops:.1f} TFLOP/s")
print(f"pinned host -> device {a.mib} MiB: {h2d:.3f} ms, {gbs(h2d):.2f} GB/s")
print(f"device -> pinned host {a.mib} MiB: {d2h:.3f} ms, {gbs(d2h):.2f} GB/s")
print(attn_line)
print(f"RESULT gemm_bf16_TFLOPs={tflops:.1f} mib={a.mib} h2d_GBps={gbs(h2d):.2f} d2h_GBps={gbs(d2h):.2f} "
      + " ".join(f"{key}={val}" for key, val in attn.items())
      + f" attn_shape={B},{NH},{T},{HS} device={name.replace(' ', '_')}")
