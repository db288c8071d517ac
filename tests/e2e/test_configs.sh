#!/usr/bin/env bash
# Every shipped config trains: each configs/*.ini runs 2 steps in its own
# layout (gpt-3d starts 8 ranks) and ends with a complete checkpoint and a
# finite loss on every step. configs/large/ holds models to plan for, far too
# large to train here: test_config_docs plans them. Configs that need prepared data say how in
# comment lines starting with '; $ ': those commands run first, as written
# (`plait` being the build's), so the documented preparation is what the
# test uses. They and the runs work in a copy of the source tree's layout
# under $E2E_WORK (data/ and configs/ linked from the source), so what they
# write (runs/data/...) never lands in the source tree.
source "$(dirname "$0")/lib.sh"
plait() { "$PLAIT_BIN" "$@"; }
tree=$E2E_WORK/tree
rm -rf "$tree" && mkdir -p "$tree"
ln -s "$PLAIT_SOURCE_DIR/data" "$tree/data"
ln -s "$PLAIT_SOURCE_DIR/configs" "$tree/configs"
cd "$tree"
while IFS= read -r cmd; do
  echo "preparing: $cmd"
  eval "$cmd" >"$E2E_WORK/prepare.out" 2>&1 || { cat "$E2E_WORK/prepare.out" >&2; fail "documented command failed: $cmd"; }
done < <(sed -n 's/^; *\$ //p' "$PLAIT_SOURCE_DIR"/configs/*.ini)

# gpt2-124m: its 124M-parameter shape costs ~70 s and a 1.5 GB checkpoint per
# run on this CPU, so its data, tokenizer and padded 50304 vocabulary are
# trained on a 1-layer, 64-wide model; the shape itself is checked here.
shape=$("$PLAIT_BIN" config show "$PLAIT_SOURCE_DIR/configs/gpt2-124m.ini")
for kv in "n_layer = 12" "n_head = 12" "n_embd = 768" "block_size = 1024" "vocab_size = 50304" "global_batch = 16"; do
  grep -Eq "^ *${kv% = *} += ${kv#* = }( |$)" <<<"$shape" || fail "gpt2-124m: expected $kv"
done
n=0
for CFG in "$PLAIT_SOURCE_DIR"/configs/*.ini; do
  name=$(basename "$CFG" .ini)
  small=()
  [ "$name" = gpt2-124m ] && small=(model.n_layer=1 model.n_head=4 model.n_embd=64 model.block_size=64 data.global_batch=2)
  train "$name" run.steps=2 run.eval_every=0 run.progress=off "${small[@]}"
  [ -e "$E2E_WORK/$name/ckpt-00000002/COMPLETE" ] || fail "$name: no complete checkpoint at step 2"
  losses=$(column "$name" loss | tr '\n' ' ')
  column "$name" loss | awk '$1 + 0 == $1 && $1 > 0 && $1 < 1e30 { ok++ } END { exit !(ok == 2 && NR == 2) }' ||
    fail "$name: the losses of its 2 steps are not finite: $losses"
  echo "$name OK: losses $losses"
  n=$((n + 1))
done
[ $n -ge 1 ] || fail "no configs found in $PLAIT_SOURCE_DIR/configs"
echo "configs OK: $n configs trained"
