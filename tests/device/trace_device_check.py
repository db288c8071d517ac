"""Checks the device's spans in a merged trace (docs/trace.md, "The
device's work"): python3 trace_device_check.py TRACE RANKS [--comm]. On
every rank:
a track named "stream compute" holding kernel spans (cat "kernel", named by
their kernel-table entry) and copies (cat "copy", with their bytes); every
device span inside one of the rank's traced steps; on each stream's track
no two spans overlap (a stream runs one thing at a time); the fused
attention's forward among the kernels, and AdamW's kernels in every step;
with --comm, also a track "stream comm" holding the collectives' staging
copies."""
import collections
import json
import sys

path, ranks, want_comm = sys.argv[1], int(sys.argv[2]), "--comm" in sys.argv[3:]
with open(path) as f:
    events = json.load(f)["traceEvents"]
problems = []


def need(cond, what):
    if not cond:
        problems.append(what)


rank_of = {e["pid"]: e["args"]["rank"] for e in events if e["ph"] == "M" and e["name"] == "plait_rank"}
track_name = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in events if e["ph"] == "X"]
steps = collections.defaultdict(list)
for e in spans:
    if e["cat"] == "step":
        steps[e["pid"]].append((e["ts"], e["ts"] + e["dur"]))
dev = collections.defaultdict(list)
for e in spans:
    if e["cat"] in ("kernel", "copy"):
        dev[(e["pid"], e["tid"])].append(e)

# the file's microseconds have 3 decimals
EPS = 0.0015
for pid, r in sorted(rank_of.items(), key=lambda kv: kv[1]):
    mine = {k: v for k, v in dev.items() if k[0] == pid}
    names = {track_name.get(k) for k in mine}
    need("stream compute" in names, f"rank {r}: no track 'stream compute' (device tracks: {sorted(map(str, names))})")
    if want_comm:
        comm = [e for k, v in mine.items() if track_name.get(k) == "stream comm" for e in v]
        need(comm and all(e["cat"] == "copy" for e in comm), f"rank {r}: no staging copies on 'stream comm'")
    for key, track in mine.items():
        name = track_name.get(key)
        need(name in ("stream compute", "stream comm"), f"rank {r}: device spans on track {name!r}")
        track.sort(key=lambda e: e["ts"])
        kernels = [e for e in track if e["cat"] == "kernel"]
        copies = [e for e in track if e["cat"] == "copy"]
        if name == "stream compute":
            need(len(kernels) > 0, f"rank {r}: no kernel span on the compute stream")
        for e in copies:
            need(e["args"].get("bytes", 0) > 0, f"rank {r}: a copy without its bytes: {e}")
        for a, b in zip(track, track[1:]):
            need(b["ts"] >= a["ts"] + a["dur"] - EPS,
                 f"rank {r} {name}: {a['name']} [{a['ts']}, +{a['dur']}] overlaps {b['name']} at {b['ts']}")
        for e in track:
            need(any(s0 - EPS <= e["ts"] and e["ts"] + e["dur"] <= s1 + EPS for s0, s1 in steps[pid]),
                 f"rank {r} {name}: {e['name']} at [{e['ts']}, +{e['dur']}] lies outside every traced step "
                 f"{steps[pid]}")
    kernel_names = collections.Counter(e["name"] for v in mine.values() for e in v if e["cat"] == "kernel")
    need(any(n.startswith("attention_fused_forward") for n in kernel_names),
         f"rank {r}: no fused attention forward among {sorted(kernel_names)}")
    # one adamw_multi a step, or one adamw a tensor a step
    adamw = kernel_names.get("adamw_multi", 0) + kernel_names.get("adamw", 0)
    need(adamw >= len(steps[pid]) > 0, f"rank {r}: {adamw} AdamW spans in {len(steps[pid])} traced steps")
need(len(rank_of) == ranks, f"{len(rank_of)} ranks in the trace, {ranks} expected")

if problems:
    print("\n".join(problems[:20]), file=sys.stderr)
    sys.exit(1)
n = sum(len(v) for v in dev.values())
print(f"device spans OK: {ranks} rank(s), {n} kernel and copy spans on {len(dev)} stream track(s)")
