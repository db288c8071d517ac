#!/usr/bin/env bash
# The llama arch's bf16 activations across ranks, on cuda_emu (the cuda
# plugin's own source on the CPU emulator; label cuda_emu), as
# test_bf16_wire.sh holds the gpt arch's: llama-tiny (tests/e2e/llama.ini,
# grouped-query) in bf16 keeps bf16 activations on one rank, under tp 2,
# tp 2 with sequence parallelism and pp 2, and those layouts follow one
# bf16 process's losses within 1e-3 relative over 3 steps (deterministic
# mode, one sequence per micro-batch); every tp activation collective of
# tp 2, with and without sequence parallelism, and every send and receive
# of pp 2 carries exactly half the bytes of the same fp32 run's (one
# traced step; under sequence parallelism the bf16 blocks keep their
# norms' outputs on this rank's rows and gather them again before the
# weight gradients, as the gpt arch's bf16 blocks and Megatron-LM do,
# where the float32 llama blocks keep them gathered: 4 all-gathers a
# block and micro-batch more).
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/tests/e2e/llama.ini
D=(run.steps=3 run.trace=2 run.eval_every=0 run.ckpt_every=0 run.deterministic=true data.micro_batch=1
  data.global_batch=2 parallel.plugin=hybrid device.plugin=cuda_emu comm.plugin=tcp)
F=("${D[@]}" run.precision=fp32)
B=("${D[@]}" run.precision=bf16)
SP=(parallel.tp=2 parallel.tp.sequence_parallel=true)

# wire NAME CLASS: the sizes in bytes of the messages of one traced step
# over all ranks, each once, ascending, of the tp group's activation
# collectives (act) or the pipeline's transfers (pp)
wire() {
  python3 - "$E2E_WORK/$1/trace.json" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
events = d["traceEvents"] if isinstance(d, dict) else d


def kind(e):
    a = e.get("args", {})
    if e.get("cat") == "p2p" and a.get("comm") == "pp":
        return "pp"
    if e.get("cat") == "coll" and a.get("comm") == "tp" and "cross-entropy" not in e["name"]:
        return "act"
    return None


sizes = {e["args"]["bytes"] for e in events if "bytes" in e.get("args", {}) and kind(e) == sys.argv[2]}
print(" ".join(str(n) for n in sorted(sizes)))
PY
}

train one_bf16 "${B[@]}"
train tp2_bf16 "${B[@]}" parallel.tp=2
train tp2_fp32 "${F[@]}" parallel.tp=2
train sp2_bf16 "${B[@]}" "${SP[@]}"
train sp2_fp32 "${F[@]}" "${SP[@]}"
train pp2_bf16 "${B[@]}" parallel.pp=2
train pp2_fp32 "${F[@]}" parallel.pp=2
for n in one tp2 sp2 pp2; do
  grep -q '^plait: activations bf16' "$E2E_WORK/${n}_bf16.out" ||
    fail "$n: the bf16 run kept float32 activations: $(grep '^plait: activations' "$E2E_WORK/${n}_bf16.out")"
done
for n in tp2 sp2 pp2; do
  same_losses one_bf16 "${n}_bf16" 1e-3
  echo "$n bf16: losses $(column "${n}_bf16" loss | tr '\n' ' ')(one process: $(column one_bf16 loss | tr '\n' ' '))"
done
for l in tp2:act sp2:act pp2:pp; do
  n=${l%%:*} c=${l#*:}
  f=$(wire "${n}_fp32" "$c") b=$(wire "${n}_bf16" "$c")
  [ -n "$f" ] || fail "$n: the fp32 run's trace has no $c messages"
  half=$(for x in $f; do echo $((x / 2)); done | tr '\n' ' ')
  [ "$b " = "$half" ] || fail "$n: $c messages of a step: bf16 of $b bytes, fp32 of $f (want half each)"
  echo "$n: $c messages of a step: fp32 of $f bytes, bf16 of $b"
done
