#!/usr/bin/python3
"""The peer of `plait bench train ... model.recompute=none|full` (docs/benchmarks.md):
nanoGPT's GPT (tests/reference/make_gpt_fixture.py) in PyTorch, float32,
AdamW, with each block wrapped in torch.utils.checkpoint for --recompute full
(PyTorch has no selective mode of its own). Prints ms/step (median over the
timed steps) and the process's peak RSS.

  OMP_WAIT_POLICY=PASSIVE /usr/bin/python3 scripts/peer-torch-recompute.py --recompute full
Shape defaults are configs/gpt-small.ini's (random tokens: a speed test).
"""
import argparse, os, resource, statistics, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("--recompute", choices=["none", "full"], default="none")
ap.add_argument("--n_layer", type=int, default=8)
ap.add_argument("--n_head", type=int, default=8)
ap.add_argument("--n_embd", type=int, default=256)
ap.add_argument("--block", type=int, default=256)
ap.add_argument("--vocab", type=int, default=256)
ap.add_argument("--batch", type=int, default=8)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=10)
a = ap.parse_args()
os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
import torch
import torch.utils.checkpoint as ckpt

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from make_gpt_fixture import GPT  # noqa: E402

torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = GPT(a.vocab, a.block, a.n_layer, a.n_head, a.n_embd, attention=True)
if a.recompute == "full":
    for b in model.transformer.h:
        b.forward = (lambda f: lambda x: ckpt.checkpoint(f, x, use_reentrant=False))(b.forward)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
times = []
for step in range(a.warmup + a.steps):
    x = torch.randint(a.vocab, (a.batch, a.block))
    y = torch.randint(a.vocab, (a.batch, a.block))
    t0 = time.perf_counter()
    _, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    if step >= a.warmup:
        times.append(time.perf_counter() - t0)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(f"RESULT torch recompute={a.recompute} ms_step_median={1e3 * statistics.median(times):.1f} "
      f"tok_s={a.batch * a.block / statistics.median(times):.0f} peak_rss_mb={rss:.0f} loss={loss.item():.4f}")
