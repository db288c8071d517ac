#!/usr/bin/env python3
"""No function of core/ and plugins/ is longer than LIMIT lines, unless the
comment right above it says why it is not split (a line with `long:`, e.g.
`/* long: one switch over every instruction kind, read top to bottom */`,
CONTRIBUTING.md).

A function's length is its lines from the first line of its signature to its
closing brace, both counted. The scan counts braces in C (.c, .h) and CUDA
(.cu, .cuh) source with comments, string and character literals and
preprocessor lines blanked: a brace at file level whose head (the text since
the last `;`, `}` or preprocessor line) ends in `)` opens a function; any
other one (a struct, an enum, an initialiser, `extern "C"`) does not.
Fails naming each file, line, function and length.

Usage: test_function_length.py [ROOT] [--list N]  (--list: every function
of N lines or more, longest first, marked or not)
"""
import os
import re
import sys

LIMIT = 120
MARK = "long:"
DIRS = ("core", "plugins")
EXT = (".c", ".h", ".cu", ".cuh")


# Comments, string and character literals, and preprocessor lines (with
# their continuations), leftmost first: a `//` inside a string is the string's.
NOT_CODE = re.compile(r"""/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*""",
                      re.S | re.M)


def blank(text):
    """Code only: what NOT_CODE matches becomes spaces (newlines kept, so
    line numbers hold)."""
    return NOT_CODE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


NAME = re.compile(r"([A-Za-z_]\w*)\s*\($")


def functions(text):
    """(name, first line, last line) of each function, lines from 1."""
    code = blank(text)
    found = []
    depth = 0          # braces open inside a function or a type/initialiser
    transparent = 0    # open `extern "C" {` blocks (functions live inside)
    head_start = None  # offset where the current file-level head began
    fn = None          # (name, first line) of the function being read
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
            continue
        if depth == 0 and head_start is None and not c.isspace() and c not in ";}{":
            head_start = (i, line)
        if c == "{":
            if depth == 0:
                head = code[head_start[0]:i] if head_start else ""
                if head.rstrip().endswith(")"):
                    paren = head.rstrip()
                    # the name before the parameter list's opening parenthesis
                    level, j = 0, len(paren) - 1
                    while j >= 0:
                        if paren[j] == ")":
                            level += 1
                        elif paren[j] == "(":
                            level -= 1
                            if level == 0:
                                break
                        j -= 1
                    m = NAME.search(paren[:j + 1])
                    fn = (m.group(1) if m else "?", head_start[1])
                elif re.search(r"\bextern\s*$", head) and not re.search(r"=\s*$", head):
                    # extern "C" { (the literal is blanked): not a level
                    transparent += 1
                    head_start = None
                    continue
                else:
                    fn = None
            depth += 1
        elif c == "}":
            if depth == 0:
                transparent = max(0, transparent - 1)
                head_start = None
                continue
            depth -= 1
            if depth == 0:
                if fn:
                    found.append((fn[0], fn[1], line))
                fn = None
                head_start = None
        elif c == ";" and depth == 0:
            head_start = None
    return found


def marked(lines, first):
    """Whether the comment ending right above line `first` says `long:`."""
    k = first - 2  # index of the line above
    if k < 0 or not lines[k].rstrip().endswith("*/") and not lines[k].lstrip().startswith("//"):
        return False
    while k >= 0:
        if MARK in lines[k]:
            return True
        s = lines[k].lstrip()
        if s.startswith("/*") or (s.startswith("//") and not (k > 0 and lines[k - 1].lstrip().startswith("//"))):
            return False
        k -= 1
    return False


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    root = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), "..", ".."))
    list_from = int(argv[argv.index("--list") + 1]) if "--list" in argv else None
    bad, rows = [], []
    for top in DIRS:
        for d, dirs, files in os.walk(os.path.join(root, top)):
            dirs.sort()
            for f in sorted(files):
                if not f.endswith(EXT):
                    continue
                path = os.path.join(d, f)
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                lines = text.split("\n")
                rel = os.path.relpath(path, root)
                for name, first, last in functions(text):
                    n = last - first + 1
                    ok = marked(lines, first)
                    rows.append((n, rel, first, name, ok))
                    if n > LIMIT and not ok:
                        bad.append(f"{rel}:{first}: {name} is {n} lines (at most {LIMIT}): split it into named "
                                   f"steps, or say why not in a `/* {MARK} ... */` comment right above it")
    if list_from is not None:
        for n, rel, first, name, ok in sorted(rows, reverse=True):
            if n >= list_from:
                print(f"{n:5d} {rel}:{first} {name}{'  (long: marked)' if ok else ''}")
        return 0
    if not rows:
        print(f"no function found under {root}: is it plait's tree?")
        return 1
    for b in bad:
        print(b)
    if bad:
        print(f"{len(bad)} function(s) over {LIMIT} lines without a `{MARK}` comment (CONTRIBUTING.md)")
        return 1
    print(f"{len(rows)} functions, none over {LIMIT} lines without a `{MARK}` comment")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
