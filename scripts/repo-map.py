#!/usr/bin/env python3
"""The map of the repository that README.md and docs/architecture.md show.

The map is made, never written by hand. Its entries, in this order: the
core's folders in the order core/LAYERS gives (lowest layer first), then the
other top-level folders in the order TOP below gives, plugins/ followed by its
folders in the order PLUGIN_FOLDERS gives. Each folder describes itself in
its README.md: the title line (`# <path>/: SUMMARY`) gives the one-line
summary README.md shows, and the paragraph under it (up to the first blank
line) the paragraph docs/architecture.md shows; whatever follows is the
README's own. A folder whose README.md is a document with a title of its own
that is read outside this tree (sdk/README.md: the plugin author's guide,
installed as share/plait/README.md) keeps it, and gives its entry in MAP.md
beside it, in the same form; MAP.md, where it exists, is read instead of
README.md. A folder's description changes there, in the same commit as its
code, and this script carries it into both documents. A top-level folder of
the repository (as git lists it) or a folder of plugins/ that the map leaves
out is an error, so a new folder comes with its entry.

Usage:
  repo-map.py --short [ROOT]   print README.md's map
  repo-map.py --long [ROOT]    print docs/architecture.md's map
  repo-map.py --write [ROOT]   put both maps into the documents
  repo-map.py --check [ROOT]   exit 1, naming each document whose map differs

In each document the map lies between a line `<!-- repo-map KIND -->` and a
line `<!-- end repo-map -->`; what is outside them is the document's own.
"""
import os
import re
import subprocess
import sys
import textwrap

DOCS = (("README.md", "short"), ("docs/architecture.md", "long"))
# The top-level folders after core/, and plugins/' folders, in map order.
TOP = ("plugins", "sdk", "tests", "configs", "data", "docs", "scripts")
PLUGIN_FOLDERS = ("comm", "parallel", "optim", "device", "common")
COMMAND = "python3 scripts/repo-map.py --write"


class MapError(Exception):
    pass


def layers(root):
    """The core's folders, lowest layer first, as core/LAYERS lists them."""
    with open(os.path.join(root, "core", "LAYERS"), encoding="utf-8") as fh:
        return [s for s in (line.strip() for line in fh) if s and not s.startswith("#")]


def describe(root, path):
    """(summary, paragraph) of the folder `path` (`core/cpu`, `sdk`), from its
    MAP.md where it has one, else its README.md."""
    name = "MAP.md" if os.path.exists(os.path.join(root, path, "MAP.md")) else "README.md"
    source = f"{path}/{name}"
    try:
        with open(os.path.join(root, source), encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except OSError:
        raise MapError(f"{source} is missing: every folder of the map has one, "
                       f"its first line `# {path}/: SUMMARY`, then a paragraph")
    title = f"# {path}/: "
    if not lines[0].startswith(title) or not lines[0][len(title):].strip():
        raise MapError(f"{source}:1: the first line must be `{title}SUMMARY`")
    para = []
    for line in lines[1:]:
        if line.strip():
            para.append(line.strip())
        elif para:
            break
    if not para:
        raise MapError(f"{source}: no paragraph after the title line")
    return lines[0][len(title):].strip(), " ".join(para)


def unmapped(root):
    """Folders the map leaves out: plugins/' folders, and the top-level folders
    git tracks files in (none when ROOT is no git checkout)."""
    plugins = os.path.join(root, "plugins")
    missing = [f"plugins/{d}/" for d in sorted(os.listdir(plugins))
               if os.path.isdir(os.path.join(plugins, d)) and d not in PLUGIN_FOLDERS]
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    tops = {f.split("/", 1)[0] for f in out.split("\n") if "/" in f}
    missing += [f"{d}/" for d in sorted(tops) if not d.startswith(".") and d not in ("core",) + TOP]
    return missing


def entries(root):
    """[(depth, name, path)] in map order below core/'s own line."""
    out = [(1, f, f"core/{f}") for f in layers(root)]
    for top in TOP:
        out.append((0, top, top))
        if top == "plugins":
            out += [(1, f, f"plugins/{f}") for f in PLUGIN_FOLDERS]
    return out


def wrap(text, first, indent, width=100):
    """`first` (the entry's name, padded) then `text`, in lines of `width`."""
    return textwrap.wrap(text, width, initial_indent=first, subsequent_indent=" " * indent,
                         break_on_hyphens=False, break_long_words=False)


def short_map(root):
    """README.md's map: an indented code block, one summary a folder."""
    out = ["    core/               libplait in layers, lowest first (core/LAYERS; each folder's",
           "                        README.md; docs/architecture.md says who may call whom)"]
    for depth, name, path in entries(root):
        summary, _ = describe(root, path)
        out += wrap(summary, " " * (4 + 2 * depth) + f"{name + '/':<{20 - 2 * depth}}", 24)
    return out


def long_map(root):
    """docs/architecture.md's map: a fenced block, each folder's paragraph."""
    out = ["```", "core/                  libplait, in layers (core/LAYERS, lowest first)"]
    for depth, name, path in entries(root):
        _, body = describe(root, path)
        out += wrap(body, " " * (2 * depth) + f"{name + '/':<{23 - 2 * depth}}", 23)
    out.append("```")
    return out


MAPS = {"short": short_map, "long": long_map}


def region(text, kind, doc):
    """(before, inside, after) of the document's map lines."""
    lines = text.split("\n")
    begin = f"<!-- repo-map {kind} -->"
    try:
        i = lines.index(begin)
        j = lines.index("<!-- end repo-map -->", i)
    except ValueError:
        raise MapError(f"{doc}: no `{begin}` ... `<!-- end repo-map -->` lines around the map")
    return lines[:i + 1], lines[i + 1:j], lines[j:]


def main(argv):
    if len(argv) < 2 or argv[1] not in ("--short", "--long", "--write", "--check"):
        sys.stderr.write(__doc__)
        return 2
    root = argv[2] if len(argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    try:
        missing = unmapped(root)
        if missing:
            raise MapError(f"{', '.join(missing)}: not in the map; add the folder to TOP or "
                           f"PLUGIN_FOLDERS in scripts/repo-map.py and give it a README.md")
        if argv[1] in ("--short", "--long"):
            print("\n".join(MAPS[argv[1][2:]](root)))
            return 0
        stale = []
        for doc, kind in DOCS:
            path = os.path.join(root, doc)
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
            before, inside, after = region(text, kind, doc)
            want = MAPS[kind](root)
            if inside == want:
                continue
            if argv[1] == "--check":
                stale.append(doc)
            else:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write("\n".join(before + want + after))
        for doc in stale:
            print(f"FAIL: {doc}: its repository map differs from core/LAYERS and the folders' "
                  f"README.md (or MAP.md) files; run `{COMMAND}` and commit the result")
        return 1 if stale else 0
    except MapError as err:
        print(f"FAIL: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
