#!/bin/sh
# Rebuild data/corpus.txt, the bundled training corpus, from Debian's
# dict-devil package: Ambrose Bierce's "The Devil's Dictionary" (1911 text,
# public domain). No download: the text comes from the installed package.
#
#   sh data/make_corpus.sh            # writes data/corpus.txt next to this script
#   sh data/make_corpus.sh OUT.txt    # writes OUT.txt
#
# Needs the package (apt-get install dict-devil); building and testing plait
# do not, since the corpus is committed.
set -eu

src=/usr/share/dictd/devil.dict.dz
out=${1:-"$(dirname "$0")/corpus.txt"}

if [ ! -r "$src" ]; then
    echo "make_corpus.sh: $src not found: install the Debian package dict-devil" >&2
    echo "  (apt-get install dict-devil)" >&2
    exit 1
fi

# The .dict.dz file is gzip-compatible (dictzip). It holds dictfmt's own
# entries (00-database-*: URL, short name, notes) before the text; the text
# starts at the Internet Wiretap edition's title block and ends before the
# final "00-database-alphabet" entry (a line listing the letters). Lines are
# kept as they are: plain ASCII, LF line ends.
tmp="$out.tmp.$$"
trap 'rm -f "$tmp"' EXIT
gzip -dc "$src" |
    sed -n '/The Internet Wiretap 1st Online Edition of/,$p' |
    sed '/^ abcdefghijklmnopqrstuvwxyz$/d' |
    awk '{ lines[NR] = $0 } END { n = NR; while (n > 0 && lines[n] == "") n--;
           for (i = 1; i <= n; i++) print lines[i] }' >"$tmp"

# Refuse anything but plain ASCII (the corpus is byte-level, vocab 256, and
# the README promises ASCII) and anything over the 2 MB budget.
if LC_ALL=C grep -q '[^ -~	]' "$tmp"; then
    echo "make_corpus.sh: unexpected non-ASCII or control bytes in the output" >&2
    exit 1
fi
size=$(wc -c <"$tmp")
if [ "$size" -gt 2000000 ]; then
    echo "make_corpus.sh: corpus is $size bytes, over the 2 MB budget" >&2
    exit 1
fi
mv "$tmp" "$out"
trap - EXIT
echo "make_corpus.sh: wrote $out ($size bytes)"
