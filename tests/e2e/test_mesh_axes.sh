#!/usr/bin/env bash
# The mesh's cp and ep axes as a user meets them before any rank starts:
# ep that does not divide dp x cp names the keys and the divisors; ep > 1
# is refused by train while no model has experts; the rank count a layout
# needs counts cp; an order naming ep is refused, saying where ep comes from;
# plan weighs cp (the config's among the sizes it varies), and plan and
# bench sweep refuse ep > 1 on a model without experts, as train does.
source "$(dirname "$0")/lib.sh"
P=$PLAIT_BIN
refused() { # EXPECTED overrides...
  local want=$1; shift
  if $P config check "$CFG" "$@" >"$E2E_WORK/out" 2>&1; then fail "config check accepted $*"; fi
  grep -q -- "$want" "$E2E_WORK/out" || fail "config check $*: $(cat "$E2E_WORK/out")"
  rm -rf "$E2E_WORK/run"
  if $P train "$CFG" run.out_dir="$E2E_WORK/run" "$@" >"$E2E_WORK/out" 2>&1; then fail "trained with $*"; fi
  [ "$(grep -c -- "$want" "$E2E_WORK/out")" = 1 ] || fail "train $* did not say it once: $(cat "$E2E_WORK/out")"
  ! grep -q "rank [0-9]" "$E2E_WORK/out" || fail "train $* started ranks: $(cat "$E2E_WORK/out")"
  [ ! -e "$E2E_WORK/run" ] || fail "train $* created its run directory"
}
refused "\[parallel\] ep = 3 does not divide dp 2 x cp 1 = 2" parallel.dp=2 parallel.ep=3
refused "\[parallel\] ep = 2: expert parallelism splits a mixture-of-experts model's experts" parallel.dp=2 parallel.ep=2
if $P config check "$CFG" parallel.order=tp,ep,dp,pp >"$E2E_WORK/out" 2>&1; then fail "order with ep accepted"; fi
grep -q "ep has no place of its own: it is carved out of dp x cp" "$E2E_WORK/out" || fail "order: $(cat "$E2E_WORK/out")"
if $P train "$CFG" -n 2 parallel.cp=2 parallel.dp=2 run.out_dir="$E2E_WORK/n" >"$E2E_WORK/out" 2>&1; then
  fail "-n 2 started a layout of 4 ranks"
fi
grep -q "dp 2 x cp 2 x tp 1 x pp 1 = 4 ranks, but -n 2" "$E2E_WORK/out" || fail "-n 2: $(cat "$E2E_WORK/out")"
# plan weighs the config's cp beside the others; ep > 1 without experts is set aside
$P plan "$CFG" parallel.cp=2 --ranks 2 --top all >"$E2E_WORK/out" 2>&1 || fail "plan with cp = 2: $(cat "$E2E_WORK/out")"
grep -q "^  [0-9][0-9]*  *dp1 tp1 pp1 cp2 " "$E2E_WORK/out" || fail "plan with cp = 2 shows no cp2 layout: $(cat "$E2E_WORK/out")"
for cmd in plan "bench sweep"; do
  if $P $cmd "$CFG" parallel.dp=2 parallel.ep=2 -n 2 --ranks 2 >"$E2E_WORK/out" 2>&1; then fail "$cmd accepted ep = 2"; fi
  grep -q "ep = 2 splits a mixture-of-experts model's experts, and this model has none" "$E2E_WORK/out" ||
    fail "$cmd with ep = 2: $(cat "$E2E_WORK/out")"
done
echo "mesh axes: ep and cp refusals named before any rank, cp weighed by plan"
