#!/usr/bin/env python3
"""Inside each folder of the core, calls flow one way: no circle of calls
between its files (docs/architecture.md, "Who may call whom"; test_layers
holds the folders to core/LAYERS' order).

A file calls another when its code names, followed by `(`, a function the
other defines without `static` (comments, literals and preprocessor lines
blanked, as test_function_length.py reads C). A circle is a strongly
connected set of two files or more; fails naming each circle's files and
the calls between them. KNOWN lists the folders whose circles are not
broken yet, each with why; one that has none any more is named too, so that
it leaves the list.

Usage: test_folder_calls.py [ROOT]
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_function_length import blank, functions  # noqa: E402

KNOWN = {
    "kernels": "kernels_table.c lists the products, which call back its warning and its lazy set-up",
}
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")


def calls_between(folder):
    """{file: {other file: names it calls there}} for the folder's .c files."""
    files = sorted(f for f in os.listdir(folder) if f.endswith(".c"))
    owner, code = {}, {}
    for f in files:
        with open(os.path.join(folder, f), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        code[f] = blank(text)
        lines = text.split("\n")
        for name, first, _ in functions(text):
            if not lines[first - 1].startswith("static"):
                owner.setdefault(name, f)
    edges = {f: {} for f in files}
    for f in files:
        for name in set(CALL.findall(code[f])):
            g = owner.get(name)
            if g and g != f:
                edges[f].setdefault(g, set()).add(name)
    return edges


def circles(edges):
    """The strongly connected sets of two files or more (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    core = os.path.join(root, "core")
    bad, checked = [], 0
    for d in sorted(os.listdir(core)):
        folder = os.path.join(core, d)
        if not os.path.isdir(folder):
            continue
        checked += 1
        edges = calls_between(folder)
        found = circles(edges)
        if d in KNOWN:
            if not found:
                bad.append(f"core/{d}/ has no circle of calls any more: take it out of KNOWN in {__file__}")
            continue
        for part in found:
            lines = [f"core/{d}/: a circle of calls between {', '.join(part)}; break it by moving the shared "
                     f"piece down into a file they both call:"]
            for a in part:
                for b in part:
                    if b in edges[a]:
                        lines.append(f"    {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
            bad.append("\n".join(lines))
    for b in bad:
        print(b)
    if bad:
        return 1
    print(f"{checked} folders of the core, calls one way inside each (known circles: {', '.join(sorted(KNOWN))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
