"""Checks a merged trace (docs/trace.md) of a run: python3 trace_check.py
TRACE RANKS FIRST LAST. It parses as JSON in Chrome's trace-event schema;
each rank is a process with its name and clock; on every track two spans
nest or do not meet (what a viewer draws whole); the traced steps are
exactly FIRST..LAST on every rank; every collective appears on every member
of its group with the same bytes; every send's flow ends at the receive
that matches it (peers, tag and bytes), and every flow has both ends."""
import collections
import json
import sys

path, ranks, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(path) as f:
    doc = json.load(f)
events = doc["traceEvents"]
problems = []


def need(cond, what):
    if not cond:
        problems.append(what)


for e in events:
    need(e.get("ph") in ("M", "X", "s", "f"), f"unknown phase: {e}")
    need(isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"no pid/tid: {e}")
    if e["ph"] == "X":
        need(all(k in e for k in ("ts", "dur", "cat", "name", "args")), f"X event lacks a field: {e}")
        need(e.get("dur", -1) >= 0, f"negative duration: {e}")
    if e["ph"] in ("s", "f"):
        need("id" in e and "ts" in e, f"flow event without id or ts: {e}")

# rank r is process r + 1 (Perfetto keeps pid 0 for the kernel)
names = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
need(names == {r + 1: f"rank {r}" for r in range(ranks)}, f"process names {names}")
rank_of = {e["pid"]: e["args"]["rank"] for e in events if e["ph"] == "M" and e["name"] == "plait_rank"}
need(rank_of == {r + 1: r for r in range(ranks)}, f"processes of the ranks: {rank_of}")
clocks = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "plait_rank" and "clock_offset_ns" in e["args"]}
need(clocks == set(rank_of), f"ranks with a clock offset: {sorted(clocks)}")
threads = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
spans = [e for e in events if e["ph"] == "X"]
for e in spans:
    need((e["pid"], e["tid"]) in threads, f"a span on an unnamed thread: {e}")

# on each track, two spans nest or do not meet (a viewer cuts the others)
tracks = collections.defaultdict(list)
for e in spans:
    tracks[(e["pid"], e["tid"])].append(e)
for key, track in tracks.items():
    track.sort(key=lambda e: (e["ts"], -e["dur"]))
    open_ends = []
    for e in track:
        while open_ends and open_ends[-1] <= e["ts"] + 0.0015:
            open_ends.pop()
        end = e["ts"] + e["dur"]
        need(not open_ends or end <= open_ends[-1] + 0.0015, f"track {key}: {e['name']} at {e['ts']} overlaps its parent")
        open_ends.append(end)

steps = collections.defaultdict(list)
for e in spans:
    if e["cat"] == "step":
        steps[rank_of.get(e["pid"])].append(e["args"]["step"])
for r in range(ranks):
    need(sorted(steps[r]) == list(range(first, last + 1)), f"rank {r} traced steps {sorted(steps[r])}")
cats = {e["cat"] for e in spans}
for c in ("step", "compute", "instr", "coll", "p2p", "optim", "wait", "ckpt"):
    need(c in cats, f"no span of category {c}")

colls = collections.defaultdict(list)
for e in spans:
    if e["cat"] == "coll":
        a = e["args"]
        colls[(a["comm"], a["group"], a["seq"])].append((rank_of.get(e["pid"]), a["bytes"], a["members"], e["name"]))
need(len(colls) > 0, "no collective")
for key, seen in colls.items():
    members = seen[0][2]
    need(len({p for p, _, _, _ in seen}) == members == len(seen),
         f"collective {key} {seen[0][3]} on ranks {sorted(p for p, _, _, _ in seen)}, group of {members}")
    need(len({b for _, b, _, _ in seen}) == 1, f"collective {key} with different bytes: {seen}")

sends = {e["args"]["flow"]: e for e in spans if e["cat"] == "p2p" and e["name"] == "send"}
recvs = {e["args"]["flow"]: e for e in spans if e["cat"] == "p2p" and e["name"] == "recv" and "flow" in e["args"]}
n_p2p = sum(1 for e in spans if e["cat"] == "p2p" and e["name"] == "send")
need(n_p2p > 0 and len(sends) == n_p2p, f"{n_p2p} sends, {len(sends)} with a flow")
for fid, s in sends.items():
    r = recvs.get(fid)
    need(r is not None, f"send {s} has no receive")
    if r is None:
        continue
    need(rank_of.get(r["pid"]) == s["args"]["peer"] and rank_of.get(s["pid"]) == r["args"]["peer"],
         f"flow {fid}: send {s} to receive {r}")
    need(r["args"]["tag"] == s["args"]["tag"] and r["args"]["bytes"] == s["args"]["bytes"], f"flow {fid}: {s} vs {r}")
starts = collections.Counter(e["id"] for e in events if e["ph"] == "s")
ends = collections.Counter(e["id"] for e in events if e["ph"] == "f")
need(starts == ends and set(starts) == set(sends), f"flow events: {len(starts)} starts, {len(ends)} ends")

if problems:
    print("\n".join(problems[:20]), file=sys.stderr)
    sys.exit(1)
print(f"trace OK: {ranks} ranks, {len(spans)} spans, {len(colls)} collectives, {len(sends)} flows")
