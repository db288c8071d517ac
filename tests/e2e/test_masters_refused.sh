#!/usr/bin/env bash
# [optim.zeroN] master = sharded where the model reads float32 weights (a
# float32 run here) is refused before any rank starts, once, in the words
# every rank would refuse it with, naming the file and line that set it:
# - by the launcher of `plait train` on a dp 2 layout, and of `plait train
#   -n 2`: one refusal, no rank's log in the run directory;
# - by `plait plan`: the layout set aside with those words, and --explain
#   calling it not a valid layout;
# - master = auto on the same layout is planned and trains (the check
#   refuses only what the ranks would).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$E2E_WORK/sharded.ini
{
  cat "$PLAIT_SOURCE_DIR/tests/e2e/tiny.ini"
  printf '[optim.zero1]\nmaster = sharded\n'
} >"$CFG"
line=$(grep -n '^master = sharded' "$CFG" | cut -d: -f1)
W="$CFG:$line: [optim.zero1] master = sharded: the model reads float32 weights on this run ([run] precision is not bf16)"
A=(optim.plugin=zero1 parallel.dp=2 run.steps=2 run.ckpt_every=0)

# refused NAME ARGS...: plait ARGS... fails saying W once, no rank started
refused() {
  local name=$1; shift
  rm -rf "${E2E_WORK:?}/$name"
  if "$PLAIT_BIN" "$@" "run.out_dir=$E2E_WORK/$name" >"$E2E_WORK/$name.out" 2>&1; then
    fail "$name: plait $* accepted master = sharded on a float32 run"
  fi
  local n
  n=$(grep -cF -- "$W" "$E2E_WORK/$name.out" || true)
  [ "$n" = 1 ] || fail "$name: the refusal said $n times, want once: $(tail -n 4 "$E2E_WORK/$name.out")"
  if compgen -G "$E2E_WORK/$name/rank-*.log" >/dev/null; then
    fail "$name: ranks were started: $(ls "$E2E_WORK/$name")"
  fi
  echo "$name: refused before any rank started"
}
refused launched train "$CFG" "${A[@]}"
refused minus_n train -n 2 "$CFG" "${A[@]}"

# plan: the one layout of --axes dp set aside with the same words
if "$PLAIT_BIN" plan "$CFG" --ranks 2 --axes dp optim.plugin=zero1 >"$E2E_WORK/plan.out" 2>&1; then
  fail "plait plan found a valid layout with master = sharded on a float32 run: $(tail -n 4 "$E2E_WORK/plan.out")"
fi
grep -F -- "skipped: dp2 tp1 pp1" "$E2E_WORK/plan.out" | grep -qF -- "$W" ||
  fail "plait plan did not set the layout aside in train's words: $(tail -n 4 "$E2E_WORK/plan.out")"
if "$PLAIT_BIN" plan "$CFG" --ranks 2 --explain dp2 optim.plugin=zero1 >"$E2E_WORK/explain.out" 2>&1; then
  fail "plait plan --explain accepted master = sharded on a float32 run"
fi
grep -F -- "is not a valid layout: " "$E2E_WORK/explain.out" | grep -qF -- "$W" ||
  fail "plait plan --explain: unclear refusal: $(tail -n 4 "$E2E_WORK/explain.out")"
echo "plan: the layout set aside, --explain refuses it, in train's words"

# master = auto: planned, and trained
"$PLAIT_BIN" plan "$CFG" --ranks 2 --explain dp2 optim.plugin=zero1 optim.zero1.master=auto >"$E2E_WORK/auto.out" 2>&1 ||
  fail "plait plan --explain refused master = auto: $(tail -n 4 "$E2E_WORK/auto.out")"
train auto "${A[@]}" optim.zero1.master=auto
echo "master = auto: planned and trained"
