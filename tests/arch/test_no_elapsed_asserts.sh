#!/usr/bin/env bash
# No test asserts how long something took: on a loaded machine any bound on
# elapsed time fails a correct program. A test asserts the behaviour the
# time stood for (the output names the cause, no rank timed out, the exit
# status, which process ended) and bounds hangs with `timeout`, a count of
# polls, alarm() or ctest's TIMEOUT, none of which asserts a clock reading.
#
# usage: test_no_elapsed_asserts.sh [ROOT [FILE...]]
# Looks at the FILEs given (by default every tests/**/*.sh and tests/**/*.c
# of ROOT outside tests/arch) and fails naming each place that compares a
# clock reading:
#  - shell: $SECONDS, $EPOCHREALTIME or `date +%s`, or a variable assigned
#    from one (or from such a variable), inside [ ], [[ ]] or (( )) with a
#    comparison, or in an awk program that exits on a comparison; printing
#    it is fine;
#  - C: an upper bound (<, <=) on plait_clock_now(), now() or a variable or
#    field assigned from them, in a statement that asserts (assert_*, fail,
#    a result `ok`). A lower bound (a wait lasted at least its deadline)
#    stays: load only lengthens a wait, so it cannot fail a correct program.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/../.." && pwd)}
[ $# -eq 0 ] || shift
cd "$root"
if [ $# -gt 0 ]; then
  files=("$@")
else
  mapfile -t files < <(find tests \( -name '*.sh' -o -name '*.c' \) -not -path 'tests/arch/*' | sort)
fi

# The awk program: with mode=vars, prints the names of the variables that
# hold clock values in its files (assigned from a clock, or from an
# expression using one of those names, until no new one turns up); with
# mode=scan, prints LINE:TEXT for each comparison of a clock reading in its
# one file, given those names as `known` (a|b|c).
# shellcheck disable=SC2016
scan='
function word(n) { return "(^|[^A-Za-z0-9_])" n "([^A-Za-z0-9_]|$)" }
function clocked(s,   v) {
  if (s ~ base) return 1
  for (v in vars) if (s ~ word(v)) return 1
  return 0
}
{ line[++NL] = $0 }
END {
  base = lang == "sh" ? "(^|[^A-Za-z0-9_])(SECONDS|EPOCHREALTIME|EPOCHSECONDS)([^A-Za-z0-9_]|$)|date \\+%s" \
                      : "plait_clock_now\\(\\)|(^|[^A-Za-z0-9_])now\\(\\)|\\.tv_n?sec"
  assign = lang == "sh" ? "[A-Za-z_][A-Za-z0-9_]*=(\\$\\(\\([^)]*\\)\\)|\\$\\([^)]*\\)|[^ \t;]*)" \
                        : "[A-Za-z_][A-Za-z0-9_]*[ \t]*=[^=][^;]*"
  if (mode == "scan") {
    n = split(known, names, "|")
    for (k = 1; k <= n; k++) if (names[k] != "") vars[names[k]] = 1
  } else {
    do {
      changed = 0
      for (i = 1; i <= NL; i++) {
        l = line[i]
        if (l ~ /^[ \t]*(#|\/\/|\/?\*)/) continue
        while (match(l, assign)) {
          a = substr(l, RSTART, RLENGTH); l = substr(l, RSTART + RLENGTH)
          name = a; sub(/[ \t]*=.*/, "", name); rhs = a; sub(/^[^=]*=/, "", rhs)
          if (name ~ /^(deadline|until)$/ || (name in vars)) continue
          if (clocked(rhs)) { vars[name] = 1; changed = 1 }
        }
      }
    } while (changed)
    for (v in vars) print v
    exit
  }
  for (i = 1; i <= NL; i++) {
    l = line[i]
    if (l ~ /^[ \t]*(#|\/\/|\/?\*)/) continue
    if (lang == "sh") {
      hit = 0; s = l
      while (!hit && match(s, /\[\[? [^]]*\]|\(\([^)]*\)\)/)) {
        e = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
        if (clocked(e) && (e ~ /-(lt|le|gt|ge|eq|ne)[ \t]/ || (e ~ /^\(\(/ && e ~ /[<>]/))) hit = 1
      }
      if (!hit && l ~ /awk / && l ~ /exit/ && clocked(l) && l ~ /exit[^}]*[<>]/) hit = 1
      if (hit) printf "%d:%s\n", i, l
    } else {
      # a statement, joined over its lines
      first = i; st = l
      while (st !~ /[;{}][ \t]*(\/\/.*|\/\*.*)?$/ && i < NL) st = st " " line[++i]
      if (st !~ /assert|fail|(^|[^A-Za-z0-9_])ok([^A-Za-z0-9_]|$)/) continue
      n = split(st, parts, /<=?/)
      for (k = 1; k < n; k++) {
        left = parts[k]; sub(/.*(&&|\|\||[(,!?:])/, "", left)
        if (parts[k + 1] ~ /^</ || left ~ /<$/) continue
        if (clocked(left)) { printf "%d:%s\n", first, st; break }
      }
    }
  }
}'

bad=0
for f in "${files[@]}"; do
  case $f in
  *.sh) lang=sh ;;
  *.c) lang=c ;;
  *) continue ;;
  esac
  # the file and those it sources or includes from its own folder, whose
  # variables (a helper's $took, a runner's .seconds) it compares
  with=("$f")
  while IFS= read -r other; do
    if [ -f "$(dirname "$f")/$other" ]; then with+=("$(dirname "$f")/$other"); fi
  done < <(sed -nE 's/^[[:space:]]*(source|\.) "\$\(dirname "\$0"\)\/([^"]*)".*/\2/p; s/^#include "([^"/]*)".*/\1/p' "$f")
  known=$(awk -v lang=$lang -v mode=vars "$scan" "${with[@]}" | tr '\n' '|')
  while IFS= read -r hit; do
    [ -n "$hit" ] || continue
    echo "FAIL: $f:${hit%%:*}: a clock reading compared (elapsed time asserted): $(sed 's/^[0-9]*:[[:space:]]*//' <<<"$hit")"
    bad=1
  done < <(awk -v lang=$lang -v mode=scan -v known="$known" "$scan" "$f")
done
if [ $bad -ne 0 ]; then
  echo "assert what the time stood for (what was printed, the exit status, who ended) and bound hangs with"
  echo "timeout, a count of polls or ctest's TIMEOUT (tests/arch/test_no_elapsed_asserts.sh says why)"
  exit 1
fi
echo "no test compares a clock reading (${#files[@]} files)"
