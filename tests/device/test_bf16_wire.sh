#!/usr/bin/env bash
# What a bf16 run sends between ranks, on cuda_emu (the cuda plugin's own
# source on the CPU emulator; label cuda_emu), counted in the traces'
# bytes per collective and transfer of one step (docs/parallelism.md,
# "What crosses ranks, and in which type"):
#   tp 2, tp 2 with sequence parallelism and pp 2 each once in fp32 and
#   once in bf16: the bf16 run's tp activation collectives (f, g, the
#   sequence all-gathers and reduce-scatters) and pipeline sends and
#   receives carry exactly half the fp32 run's bytes, and the
#   cross-entropy's row statistics the same bytes (they stay float32);
#   the bf16 runs of tp 2, tp 2 with sequence parallelism, pp 2 and
#   tp 2 x pp 2 follow one bf16 process's losses within 1e-3 relative over
#   3 steps (deterministic mode, one sequence per micro-batch, a 2-block
#   gpt-tiny of context 64).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
D=(run.steps=3 run.trace=2 run.eval_every=0 run.ckpt_every=0 run.progress=off run.deterministic=true data.micro_batch=1 data.global_batch=2
  model.n_layer=2 model.block_size=64 parallel.plugin=hybrid device.plugin=cuda_emu comm.plugin=tcp)
F=("${D[@]}" run.precision=fp32)
B=("${D[@]}" run.precision=bf16)
layouts=("tp2|parallel.tp=2" "sp2|parallel.tp=2 parallel.tp.sequence_parallel=true" "pp2|parallel.pp=2")

# wire NAME CLASS: the bytes of one traced step over all ranks, of the tp
# group's activation collectives (act), its cross-entropy statistics (stat)
# or the pipeline's sends and receives (pp)
wire() {
  python3 - "$E2E_WORK/$1/trace.json" "$2" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
total = 0
for e in d["traceEvents"] if isinstance(d, dict) else d:
    a = e.get("args", {})
    if "bytes" not in a or e.get("cat") not in ("coll", "p2p"):
        continue
    if e["cat"] == "p2p":
        kind = "pp" if a.get("comm") == "pp" else None
    elif a.get("comm") == "tp":
        kind = "stat" if "cross-entropy" in e["name"] else "act"
    else:
        kind = None
    if kind == sys.argv[2]:
        total += a["bytes"]
print(total)
EOF
}

train one_bf16 "${B[@]}"
for l in "${layouts[@]}"; do
  # shellcheck disable=SC2086 # ${l#*|} may hold several overrides
  train "${l%%|*}_fp32" "${F[@]}" ${l#*|}
  # shellcheck disable=SC2086
  train "${l%%|*}_bf16" "${B[@]}" ${l#*|}
done
train tp2pp2_bf16 "${B[@]}" parallel.tp=2 parallel.pp=2
for l in "${layouts[@]}"; do
  name=${l%%|*}
  grep -q 'precision bf16' "$E2E_WORK/${name}_bf16.out" || fail "$name: the bf16 run did not run in bf16"
  classes=(act stat)
  [ "$name" = pp2 ] && classes=(pp)
  for c in "${classes[@]}"; do
    f=$(wire "${name}_fp32" "$c") b=$(wire "${name}_bf16" "$c")
    [ "$f" -gt 0 ] || fail "$name: the fp32 run's trace has no $c bytes"
    if [ "$c" = stat ]; then
      [ "$b" = "$f" ] || fail "$name: the cross-entropy statistics took $b bytes in bf16, $f in fp32 (float32 in both)"
    else
      [ $((2 * b)) = "$f" ] || fail "$name: $c bytes of a step: bf16 $b, fp32 $f (want half)"
    fi
    echo "$name: $c bytes of a step: fp32 $f, bf16 $b"
  done
done
for n in tp2 sp2 pp2 tp2pp2; do
  same_losses one_bf16 "${n}_bf16" 1e-3
  echo "$n bf16: losses $(column "${n}_bf16" loss | tr '\n' ' ')(one process: $(column one_bf16 loss | tr '\n' ' '))"
done
