#!/usr/bin/env python3
"""The bytes of one traced step over all ranks of a run (docs/trace.md):
wire_bytes.py TRACE CLASS, CLASS one of act (the tp group's activation
collectives), stat (its cross-entropy statistics) or pp (the pipeline's
sends and receives). A compressed collective's span carries its wire bytes,
a bf16 tensor's its own: what crossed ranks either way."""
import json
import sys


def kind_of(e):
    a = e.get("args", {})
    if "bytes" not in a or e.get("cat") not in ("coll", "p2p"):
        return None
    if e["cat"] == "p2p":
        return "pp" if a.get("comm") == "pp" else None
    if a.get("comm") == "tp":
        return "stat" if "cross-entropy" in e["name"] else "act"
    return None


def main():
    d = json.load(open(sys.argv[1]))
    events = d["traceEvents"] if isinstance(d, dict) else d
    print(sum(e["args"]["bytes"] for e in events if kind_of(e) == sys.argv[2]))


main()
