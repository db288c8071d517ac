#!/usr/bin/env python3
"""The map of the core that README.md and docs/architecture.md show.

The map is made, never written by hand: the core's folders in the order
core/LAYERS gives (lowest layer first), each described by its own README.md,
whose title line (`# core/<name>/: SUMMARY`) gives the one-line summary
README.md shows and whose body gives the paragraph docs/architecture.md
shows. A folder's description changes in its README.md, in the same commit
as its code, and this script carries it into both documents.

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
import sys
import textwrap

DOCS = (("README.md", "short"), ("docs/architecture.md", "long"))
TITLE = re.compile(r"^# core/(\w+)/: (.+)$")
COMMAND = "python3 scripts/repo-map.py --write"


class MapError(Exception):
    pass


def layers(root):
    """The core's folders, lowest layer first, as core/LAYERS lists them."""
    with open(os.path.join(root, "core", "LAYERS"), encoding="utf-8") as fh:
        return [s for s in (line.strip() for line in fh) if s and not s.startswith("#")]


def describe(root, folder):
    """(summary, paragraph) from core/<folder>/README.md."""
    path = os.path.join(root, "core", folder, "README.md")
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
    except OSError:
        raise MapError(f"core/{folder}/README.md is missing: every folder of core/LAYERS has one, "
                       f"its first line `# core/{folder}/: SUMMARY`, then a paragraph")
    m = TITLE.match(lines[0])
    if not m or m.group(1) != folder:
        raise MapError(f"core/{folder}/README.md:1: the first line must be `# core/{folder}/: SUMMARY`")
    body = " ".join(s.strip() for s in lines[1:] if s.strip())
    if not body:
        raise MapError(f"core/{folder}/README.md: no paragraph after the title line")
    return m.group(2).strip(), body


def wrap(text, indent, width):
    return textwrap.wrap(text, width, initial_indent="", subsequent_indent=" " * indent,
                         break_on_hyphens=False, break_long_words=False)


def short_map(root):
    """README.md's map: an indented code block, one line a folder."""
    out = ["    core/               libplait in layers, lowest first (core/LAYERS; each folder's",
           "                        README.md; docs/architecture.md says who may call whom)"]
    for folder in layers(root):
        summary, _ = describe(root, folder)
        head = f"      {folder + '/':<18}"
        lines = wrap(summary, 24, 100 - len(head))
        out.append(head + lines[0])
        out += [" " * 24 + s.strip() for s in lines[1:]]
    return out


def long_map(root):
    """docs/architecture.md's map: a fenced block, each folder's paragraph."""
    out = ["```", "core/                  libplait, in layers (core/LAYERS, lowest first)"]
    for folder in layers(root):
        _, body = describe(root, folder)
        head = f"  {folder + '/':<21}"
        lines = textwrap.wrap(body, 100, initial_indent=head, subsequent_indent=" " * 23,
                              break_on_hyphens=False, break_long_words=False)
        out += lines
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
            print(f"FAIL: {doc}: its map of the core differs from core/LAYERS and the folders' "
                  f"README.md files; run `{COMMAND}` and commit the result")
        return 1 if stale else 0
    except MapError as err:
        print(f"FAIL: {err}")
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
