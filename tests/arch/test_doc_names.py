#!/usr/bin/env python3
"""Every plait name that the docs put in backticks exists in the code.

Scanned: the text between backticks in every Markdown file of the tree,
and its code blocks (fenced or indented) whole. Checked there:

- identifiers `plait_*` and `PLAIT_*` (functions, types, macros, fields,
  environment variables): each must be a word of some source file (C,
  CUDA, C++, shell, Python, CMake, INI). An environment variable
  `PLAIT_<SECTION>_<KEY>` of the config (README.md, "Training") counts as
  its key `[section] key`;
- functions in call form, `name()`: a word of some source file;
- struct fields, `host->alloc_kept` or `plait_model_spec.n_kv_head`: the
  field a word of the C sources (the struct being a plait_* name above, or
  any variable before `->`);
- config keys `[section] key`, sections `[section]`, and command-line
  overrides `section.key=value` of the core's sections: the key must be a
  string literal of the C sources, and the section too (the core's schema,
  core/config/core_schema.c, declares them so) or a plugin's, named
  `kind.name` after its folder plugins/kind/name/.

Not checked here: paths (tests/arch/test_doc_paths.py does), other
projects' names (`cblas_sbgemm`, `torch.compile`), shell commands, and
placeholders: a name holding `<`, `*`, `N` in a section (`[optim.zeroN]`)
or ending in `_` is a pattern, not a name. Fails naming each file, line
and missing name.

Usage: test_doc_names.py [ROOT]
"""
import os
import re
import subprocess
import sys

SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".cpp", ".sh", ".py", ".cmake", ".ini", ".txt", ".sbatch", ".in")
C_EXT = (".c", ".h", ".cu", ".cuh", ".cpp")
# Sections of plugins that are no folder of the tree (their docs write them).
FOREIGN_SECTIONS = {
    "comm.shm",   # sdk/README.md's walkthrough writes this plugin
}
SPAN = re.compile(r"`([^`\n]+)`")
IDENT = re.compile(r"(?<![\w<])((?:plait|PLAIT)_[A-Za-z0-9_]*[A-Za-z0-9])(?![\w<*>])")
KEY = re.compile(r"^\[([a-z][a-z0-9_.]*)\](?:\s+([a-z][a-z0-9_]*))?(?:\s*=.*)?$")
CALL = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\(\)$")
FIELD = re.compile(r"(?:\b\w+->|\bplait_\w+\.)([A-Za-z_]\w*)")
OVERRIDE = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*(?:\.[a-z0-9_]+)?)\.([a-z][a-z0-9_]*)=")
DECLARE = re.compile(r'DECLARE\("([a-z]+)"')
LITERAL = re.compile(r'"([a-z][a-z0-9_.]*)"')
WORD = re.compile(r"\b(?:plait|PLAIT)_\w+")


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True)
    return [p for p in out.stdout.split("\n") if p]


def read(root, rel):
    try:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def spans(text):
    """(line, span) for each backticked span; code blocks' lines whole."""
    fenced = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            yield n, line
        else:
            for m in SPAN.finditer(line):
                yield n, m.group(1)


def env_is_key(name, literals):
    """PLAIT_COMM_TCP_STREAMS is [comm.tcp] streams when both are declared."""
    words = name[len("PLAIT_"):].lower().split("_")
    for cut in range(1, len(words)):
        section, key = ".".join(words[:cut]), "_".join(words[cut:])
        if section in literals and key in literals:
            return True
    return False


def check_key(root, literals, rel, n, section, key):
    """The problems with naming `[section] key` (key None: the section)."""
    kind_name = section.split(".")
    plugin = len(kind_name) == 2 and os.path.isdir(os.path.join(root, "plugins", *kind_name))
    if section not in literals and not plugin and section not in FOREIGN_SECTIONS:
        return [f"{rel}:{n}: names the config section `[{section}]`, which no C source declares "
                f"and no plugin folder plugins/{section.replace('.', '/')}/ stands for"]
    if key and key not in literals and section not in FOREIGN_SECTIONS:
        return [f"{rel}:{n}: names the config key `[{section}] {key}`, which no C source declares"]
    return []


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    files = tracked(root)
    words, literals, core_sections, c_words = set(), set(), set(), set()
    for rel in files:
        if not rel.endswith(SOURCE_EXT) and os.path.basename(rel) != "CMakeLists.txt":
            continue
        text = read(root, rel)
        words.update(WORD.findall(text) if not rel.endswith(C_EXT + (".py", ".sh")) else re.findall(r"\w+", text))
        core_sections.update(DECLARE.findall(text) if rel == "core/config/core_schema.c" else ())
        if rel.endswith(C_EXT):
            literals.update(LITERAL.findall(text))
            c_words.update(re.findall(r"\w+", text))
    bad = []
    for rel in files:
        if not rel.endswith(".md"):
            continue
        for n, span in spans(read(root, rel)):
            call = CALL.match(span.strip())
            if call and call.group(1) not in words:
                bad.append(f"{rel}:{n}: names the function `{call.group(1)}()`, which no source file of the tree has")
            for field in FIELD.findall(span):
                if field not in c_words:
                    bad.append(f"{rel}:{n}: names the field `{field}` (in `{span.strip()}`), which no C source has")
            for section, key in OVERRIDE.findall(span):
                if section.split(".")[0] in core_sections:
                    bad += check_key(root, literals, rel, n, section, key)
            for name in IDENT.findall(span):
                if name in words or (name.startswith("PLAIT_") and env_is_key(name, literals)):
                    continue
                bad.append(f"{rel}:{n}: names `{name}`, which no source file of the tree has")
            m = KEY.match(span.strip())
            if not m or re.search(r"[A-Z]", span.split("]")[0]):
                continue
            bad += check_key(root, literals, rel, n, m.group(1), m.group(2))
    for line in bad:
        print("FAIL: " + line)
    if bad:
        print(f"{len(bad)} stale name(s): correct the text, or the code if the name moved")
        return 1
    print(f"every plait name in backticks of {sum(f.endswith('.md') for f in files)} Markdown files exists")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
