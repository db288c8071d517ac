#!/usr/bin/env python3
"""Calls between the files of one core folder flow one way, in the order
its LAYERS file gives.

A folder of core/ that has a LAYERS file lists its .c files (without the
extension), lowest first, as core/LAYERS lists the folders: a file may call
the functions that files listed before it define, never those of a file
listed after it (which calls are read as test_folder_calls.py reads them).
Every .c file of such a folder must be listed, and every listed name must
be a file. Fails naming each call upward (caller's file, the functions,
the callee's file) and each unlisted or missing file.

Usage: test_file_layers.py [ROOT]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_folder_calls import calls_between  # noqa: E402


def check(root, folder):
    rel = os.path.relpath(folder, root)
    with open(os.path.join(folder, "LAYERS"), encoding="utf-8") as fh:
        listed = [l.strip() for l in fh if l.strip() and not l.lstrip().startswith("#")]
    rank = {name: i for i, name in enumerate(listed)}
    files = {f[:-2] for f in os.listdir(folder) if f.endswith(".c")}
    problems = [f"{rel}/{n}.c is not in {rel}/LAYERS (add it where it belongs)" for n in sorted(files - set(rank))]
    problems += [f"{rel}/LAYERS names {n}, which is no .c file there" for n in sorted(set(rank) - files)]
    for caller, callees in sorted(calls_between(folder).items()):
        for callee, names in sorted(callees.items()):
            a, b = caller[:-2], callee[:-2]
            if a in rank and b in rank and rank[b] > rank[a]:
                problems.append(f"{rel}/{caller} calls {', '.join(sorted(names))} of {callee}, "
                                f"a higher layer in {rel}/LAYERS")
    return problems


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..", ".."))
    core = os.path.join(root, "core")
    folders = sorted(os.path.join(core, d) for d in os.listdir(core) if os.path.isfile(os.path.join(core, d, "LAYERS")))
    problems = [p for f in folders for p in check(root, f)]
    for p in problems:
        print("FAIL:", p)
    if problems:
        return 1
    print("file layers ok:", " ".join(os.path.relpath(f, root) for f in folders))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
