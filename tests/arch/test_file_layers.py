#!/usr/bin/env python3
"""Calls between the files of one core folder flow one way.

A folder of core/ that has a LAYERS file lists its .c files (without the
extension), lowest first, as core/LAYERS lists the folders: a file may call
the functions that files listed before it define, never those of a file
listed after it, so the folder's files form layers with no circle of calls.
Every .c file of such a folder must be listed, and every listed name must
be a file. Fails naming each call upward (caller file, line, function,
callee's file) and each unlisted or missing file.

A function is a file's when the file defines it without `static`; a call is
the function's name followed by `(` outside comments and strings. Static
inline helpers in headers belong to no file and are not counted.
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])

DEF = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b([a-z_][a-z0-9_]*)\s*\([^;{]*?\)\s*\{", re.M)
CALL = re.compile(r"\b([a-z_][a-z0-9_]*)\s*\(")


def strip(src):
    """The source without comments and string or character literals (line breaks kept)."""
    out = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    out = re.sub(r"//[^\n]*", "", out)
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', '""', out)


def check(folder):
    problems = []
    listed = [l.strip() for l in (folder / "LAYERS").read_text().splitlines()
              if l.strip() and not l.lstrip().startswith("#")]
    rank = {name: i for i, name in enumerate(listed)}
    files = {p.stem: p for p in folder.glob("*.c")}
    rel = folder.relative_to(root)
    for name in sorted(set(files) - set(rank)):
        problems.append(f"{rel}/{name}.c is not in {rel}/LAYERS (add it where it belongs)")
    for name in sorted(set(rank) - set(files)):
        problems.append(f"{rel}/LAYERS names {name}, which is no .c file there")
    owner = {}
    text = {}
    for name, path in files.items():
        text[name] = strip(path.read_text())
        for m in DEF.finditer(text[name]):
            owner[m.group(1)] = name
    for name, src in sorted(text.items()):
        if name not in rank:
            continue
        for lineno, line in enumerate(src.splitlines(), 1):
            for m in CALL.finditer(line):
                callee = owner.get(m.group(1))
                if callee is None or callee == name or callee not in rank:
                    continue
                if rank[callee] > rank[name]:
                    problems.append(f"{rel}/{name}.c:{lineno}: calls {m.group(1)} of {callee}.c, "
                                    f"a higher layer in {rel}/LAYERS")
    return problems


folders = sorted(p.parent for p in (root / "core").glob("*/LAYERS"))
problems = [p for f in folders for p in check(f)]
for p in problems:
    print("FAIL:", p)
if problems:
    sys.exit(1)
print("file layers ok:", " ".join(str(f.relative_to(root)) for f in folders))
