#!/usr/bin/env python3
"""The GPU's physical limits, measured in the same call as plait's figures
(scripts/gpu-session.sh), through PyTorch (the GPU machine has it; plait needs no
Python):
  - the bf16 GEMM rate: an 8192^3 product on random data (the measured
    denominator of MFU beside the datasheet's 989 TFLOP/s for an H100 SXM);
  - cudaMemcpyAsync between pinned (page-locked) host memory and the GPU, both
    directions, for --mib MiB (the staging target is 80% of it at 64 MiB).
Each figure is the median of --iters runs timed with CUDA events after 3
untimed ones. The copy is checked: the bytes brought back equal those sent.

usage: gpu-peaks.py [--mib 64] [--iters 20] [--gemm 8192]
Prints readable lines and one RESULT line. Exits 77 (saying why) where PyTorch
or a CUDA device is missing."""
import argparse
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--mib", type=int, default=64)
ap.add_argument("--iters", type=int, default=20)
ap.add_argument("--gemm", type=int, default=8192)
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


name = torch.cuda.get_device_name()
print(f"{name}: bf16 GEMM {k}^3: {gemm_ms:.3f} ms, {tflops:.1f} TFLOP/s")
print(f"pinned host -> device {a.mib} MiB: {h2d:.3f} ms, {gbs(h2d):.2f} GB/s")
print(f"device -> pinned host {a.mib} MiB: {d2h:.3f} ms, {gbs(d2h):.2f} GB/s")
print(f"RESULT gemm_bf16_TFLOPs={tflops:.1f} mib={a.mib} h2d_GBps={gbs(h2d):.2f} d2h_GBps={gbs(d2h):.2f} "
      f"device={name.replace(' ', '_')}")
