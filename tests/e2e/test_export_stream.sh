#!/usr/bin/env bash
# plait export streams: of a model of many tensors (12 layers, n_embd 256:
# 38 MB of float32, its largest tensor 1 MB), the export of a sharded
# checkpoint (dp 2 ZeRO-3: every tensor in slices on two shard files) is the
# export of the gathered checkpoint of the same run, byte for byte, in both
# layouts, and each export holds one tensor at a time: the tensor bytes it
# reports holding at once are a small part of the model, and its peak
# resident set (VmHWM, its libraries included) stays below the model's
# bytes. A damaged shard file is refused by export, naming it.
source "$(dirname "$0")/lib.sh"
A="run.steps=1 model.n_layer=12 model.n_embd=256 parallel.plugin=hybrid parallel.dp=2 optim.plugin=zero3
   data.micro_batch=1 run.deterministic=true"
# shellcheck disable=SC2086
train s $A run.ckpt_format=sharded
# shellcheck disable=SC2086
train g $A
for f in hf nanogpt; do
  for c in s g; do
    "$PLAIT_BIN" export "$E2E_WORK/$c" --format $f --out "$E2E_WORK/ex_${c}_$f" >"$E2E_WORK/ex_${c}_$f.out" ||
      fail "plait export --format $f of $c failed: $(tail -n 3 "$E2E_WORK/ex_${c}_$f.out")"
    read -r held model rss < <(sed -n 's/^memory: at most \([0-9]*\) bytes of tensors held at once, of the model.s \([0-9]*\); peak resident set \([0-9]*\) bytes$/\1 \2 \3/p' "$E2E_WORK/ex_${c}_$f.out")
    [ -n "${rss:-}" ] || fail "export $c --format $f printed no memory line: $(cat "$E2E_WORK/ex_${c}_$f.out")"
    [ "$model" -gt 30000000 ] || fail "export $c --format $f: the model's $model bytes are not the 38 MB trained"
    [ $((held * 8)) -lt "$model" ] ||
      fail "export $c --format $f held $held bytes of tensors at once, more than an eighth of the model's $model"
    [ "$rss" -lt "$model" ] ||
      fail "export $c --format $f peaked at $rss bytes resident, not below the model's $model: it held the model"
    unset held model rss
  done
  cmp -s "$E2E_WORK/ex_s_$f/model.safetensors" "$E2E_WORK/ex_g_$f/model.safetensors" ||
    fail "plait export --format $f of the sharded checkpoint differs from the gathered one's"
done

# a flipped byte in world rank 1's shard: refused, naming the file
rm -rf "$E2E_WORK/bad"
cp -r "$E2E_WORK/s/ckpt-00000001" "$E2E_WORK/bad"
shard="$E2E_WORK/bad/shard-00001.safetensors"
size=$(stat -c %s "$shard")
printf '\x55' | dd of="$shard" bs=1 seek=$((size - 100)) conv=notrunc status=none
if "$PLAIT_BIN" export "$E2E_WORK/bad" --format hf --out "$E2E_WORK/ex_bad" >"$E2E_WORK/ex_bad.out" 2>&1; then
  fail "plait export of a checkpoint with a damaged shard file succeeded"
fi
grep -q "shard-00001.safetensors" "$E2E_WORK/ex_bad.out" ||
  fail "the refusal of a damaged shard does not name it: $(cat "$E2E_WORK/ex_bad.out")"
[ ! -e "$E2E_WORK/ex_bad/model.safetensors" ] || fail "a refused export left a model.safetensors"
echo "ok"
