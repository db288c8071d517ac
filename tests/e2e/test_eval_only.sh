#!/usr/bin/env bash
# plait train --eval-only: the validation loss of the state a run starts
# from, and nothing else. On a run's directory it resumes the latest
# checkpoint (whatever [run] resume says) and says the loss the run
# measured at that step; under another layout (dp 2) the same; from [run]
# init_from in a fresh directory the same at step 0; no step trained, no
# checkpoint or metrics row written; without a validation split, refused.
source "$(dirname "$0")/lib.sh"
S=(run.steps=4 run.eval_every=2)
train run "${S[@]}"
measured=$(column run val_loss | tail -n 1)
before=$(cat "$E2E_WORK/run/metrics.csv")
# evaluate NAME ARGS...: plait train --eval-only into NAME.out (train()
# would empty a run directory it is not told to resume)
evaluate() {
  local name=$1
  shift
  "$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/$name" "$@" --eval-only >"$E2E_WORK/$name.out" 2>&1 ||
    { tail -n 20 "$E2E_WORK/$name.out"; fail "--eval-only of $name ($*) failed"; }
}
said() { sed -n 's/^eval: step \([0-9]*\): validation loss \([0-9.]*\), perplexity.*/\1 \2/p' "$E2E_WORK/$1.out"; }
want=$(awk -v v="$measured" 'BEGIN { printf "4 %.4f", v }')

evaluate run "${S[@]}"
[ "$(said run)" = "$want" ] || fail "--eval-only said '$(said run)', the run measured '$want'"
[ "$(ls -d "$E2E_WORK"/run/ckpt-* | wc -l)" -eq 1 ] || fail "--eval-only saved a checkpoint: $(ls "$E2E_WORK/run")"
[ "$(cat "$E2E_WORK/run/metrics.csv")" = "$before" ] || fail "--eval-only changed metrics.csv"
grep -q '^done:' "$E2E_WORK/run.out" && fail "--eval-only trained: $(grep '^done:' "$E2E_WORK/run.out")"

evaluate run -n 2 parallel.dp=2 "${S[@]}"
[ "$(said run)" = "$want" ] || fail "--eval-only at dp 2 said '$(said run)', the run measured '$want'"

evaluate fresh "${S[@]}" "run.init_from=$E2E_WORK/run"
[ "$(said fresh)" = "0 ${want#4 }" ] || fail "--eval-only from init_from said '$(said fresh)', want '0 ${want#4 }'"
[ -z "$(ls -d "$E2E_WORK"/fresh/ckpt-* 2>/dev/null)" ] || fail "--eval-only from init_from saved a checkpoint"

train_refused noval "--eval-only: the data has no validation split" "run.out_dir=$E2E_WORK/noval" \
  data.val_fraction=0 run.eval_every=0 --eval-only
echo "eval-only: $want as the run measured it, at dp 2 and from init_from too"
