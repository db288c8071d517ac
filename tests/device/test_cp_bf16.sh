#!/usr/bin/env bash
# Context parallelism on a bf16 run ([run] precision = bf16): the blocks
# keep bf16 activations at cp > 1 as at cp 1, the ring's K and V blocks
# bf16 in memory and on the wire, every rank folding them in float32 (the
# kernel table's ring attention bf16 entries), their gradients' sums
# float32. On the device $1 names: cuda_emu (the default; the cuda
# plugin's own source on the CPU emulator, label cuda_emu: bf16 products
# need no AVX512_BF16 there), or cpu (core/kernels' bf16 entries, the
# products emulated so that any CPU runs them), a 1-block tiny
# GPT and a 1-block tiny Llama, a sequence of 32, 3 steps of 2 sequences
# in deterministic mode, the second traced; asserts:
# - the bf16 cp 2 run (and the GPT's cp 4) says it keeps bf16 activations;
# - the cp group's K|V sends of the traced step are half the bytes of the
#   same float32 run's, its dK|dV sends the same bytes (the traces' p2p
#   spans, tags 1-2 and 3 of ring_attention.c);
# - the losses follow cp 1's bf16 run within 1e-3 relative (the documented
#   tolerance of a bf16 layout against one bf16 process, docs/parallelism.md);
# - cp 2 with full recomputation (and the Llama's selective) gives the
#   bits of recompute none (losses and final checkpoints): what it drops
#   is rebuilt by the same kernels, the ring's forward run again; the
#   GPT's selective runs GELU apart from c_fc's product at every cp
#   (gpt_bf16.c), so it stays within 1e-3.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
# wire NAME TAGS: the bytes of the cp group's sends with one of TAGS
# (comma-separated) inside each rank's traced step span
wire() {
  python3 - "$E2E_WORK/$1/trace.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
tags = {int(t) for t in sys.argv[2].split(",")}
steps = {e["pid"]: (e["ts"], e["ts"] + e["dur"]) for e in ev if e.get("cat") == "step" and e.get("ph") == "X"}
print(sum(e["args"]["bytes"] for e in ev
          if e.get("cat") == "p2p" and e.get("name") == "send" and e.get("args", {}).get("comm") == "cp"
          and e["args"].get("tag") in tags and steps[e["pid"]][0] <= e["ts"] <= steps[e["pid"]][1]))
PY
}
DEV=(device.plugin=cuda_emu)
[ "${1:-cuda_emu}" = cpu ] && DEV=(device.plugin=cpu run.debug_bf16_emulate=true)
A=(run.steps=3 run.trace=2 run.eval_every=0 run.ckpt_every=3 run.progress=off run.deterministic=true
  data.global_batch=2 data.micro_batch=1 model.n_layer=1 model.block_size=32 "${DEV[@]}" comm.plugin=tcp)
bf16_kept() {
  grep -q '^plait: activations bf16' "$E2E_WORK/$1.out" ||
    fail "$1: the bf16 run kept float32 activations: $(grep '^plait: activations' "$E2E_WORK/$1.out")"
}
# head_chunks NAME ROWS: the start-up line's chunks of the head cover a
# rank's ROWS token rows, each chunk but the last full
head_chunks() {
  local line r n
  line=$(grep -o "the head's logits [0-9]* rows at a time ([0-9]* chunks*)" "$E2E_WORK/$1.out") ||
    fail "$1: no chunked head: $(grep '^plait: activations' "$E2E_WORK/$1.out")"
  read -r r n < <(sed -E 's/.*logits ([0-9]+) rows.*\(([0-9]+) chunk.*/\1 \2/' <<<"$line")
  [ "$n" = $((($2 + r - 1) / r)) ] || fail "$1: the head's $n chunks of $r rows for a rank's $2 rows: $line"
}
for m in gpt llama; do
  [ $m = llama ] && export CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
  train ${m}_one "${A[@]}" run.precision=bf16
  train ${m}_bf16 "${A[@]}" run.precision=bf16 parallel.cp=2
  train ${m}_fp32 "${A[@]}" run.precision=fp32 parallel.cp=2
  bf16_kept ${m}_one
  bf16_kept ${m}_bf16
  # the head's chunks cover this rank's 16 rows of the sequence, not 32
  head_chunks ${m}_one 32
  head_chunks ${m}_bf16 16
  kv16=$(wire ${m}_bf16 1,2) kv32=$(wire ${m}_fp32 1,2) d16=$(wire ${m}_bf16 3) d32=$(wire ${m}_fp32 3)
  [ "$kv32" -gt 0 ] && [ $((kv16 * 2)) = "$kv32" ] ||
    fail "$m: the bf16 run's K|V sends are $kv16 bytes, the float32 run's $kv32 (not half)"
  [ "$d32" -gt 0 ] && [ "$d16" = "$d32" ] || fail "$m: dK|dV sends $d16 bytes on the bf16 run, $d32 on the float32 run"
  same_losses ${m}_one ${m}_bf16 1e-3
  echo "$m: bf16 activations at cp 2, K|V on the ring $kv16 bytes a step (float32: $kv32), dK|dV $d16 both;" \
    "losses $(column ${m}_bf16 loss | tr '\n' ' ')within 1e-3 of cp 1's $(column ${m}_one loss | tr '\n' ' ')"
  for rc in selective full; do
    train ${m}_$rc "${A[@]}" run.precision=bf16 parallel.cp=2 model.recompute=$rc
    bf16_kept ${m}_$rc
    if [ $m$rc = gptselective ]; then # GELU apart from c_fc's product, at every cp (gpt_bf16.c)
      same_losses ${m}_bf16 ${m}_$rc 1e-3
      echo "$m: cp 2 bf16 with recompute $rc: within 1e-3 of recompute none (GELU run apart, as at cp 1)"
      continue
    fi
    same_losses ${m}_bf16 ${m}_$rc 0
    same_params ${m}_bf16 ${m}_$rc bits
    echo "$m: cp 2 bf16 with recompute $rc: the bits of recompute none"
  done
done
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
train gpt_cp4 "${A[@]}" run.precision=bf16 parallel.cp=4
bf16_kept gpt_cp4
same_losses gpt_one gpt_cp4 1e-3
echo "gpt: bf16 activations at cp 4, losses $(column gpt_cp4 loss | tr '\n' ' ')within 1e-3 of cp 1"
