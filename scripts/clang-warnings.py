#!/usr/bin/env python3
"""Run clang's front end over every C file of a configured build.

    scripts/clang-warnings.py BUILD_DIR

BUILD_DIR is a tree configured with CC=clang and
CMAKE_EXPORT_COMPILE_COMMANDS=ON. Each C file's own compile command (its
flags, -Werror included) runs with -fsyntax-only instead of producing an
object: clang's warnings come from its front end, so this checks the tree
is warning-free in clang at a fraction of a build's cost. CUDA files are
nvcc's (with gcc as host compiler) and are left out. Exits 1 printing
clang's messages when any file fails, 0 otherwise.
"""
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor


def syntax_only(entry):
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    cmd, skip = [args[0], "-fsyntax-only"], False
    for a in args[1:]:
        if skip:
            skip = False
        elif a == "-o":
            skip = True  # the object it would have written
        elif a != "-c":
            cmd.append(a)
    p = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
    return entry["file"], p.returncode, p.stdout + p.stderr


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/clang-warnings.py BUILD_DIR")
    path = os.path.join(sys.argv[1], "compile_commands.json")
    try:
        with open(path) as f:
            entries = [e for e in json.load(f) if e["file"].endswith(".c")]
    except OSError as e:
        sys.exit(f"{path}: {e.strerror}; configure with CC=clang -DCMAKE_EXPORT_COMPILE_COMMANDS=ON")
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        results = list(pool.map(syntax_only, entries))
    failed = [r for r in results if r[1] != 0]
    for file, _, out in failed:
        print(out, end="")
    print(f"clang front end: {len(entries)} C files, {len(failed)} with warnings or errors")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
