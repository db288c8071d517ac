#!/usr/bin/env bash
# TP accounting: the bytes each rank all-reduces for TP per step
# (metrics.csv tp_bytes, the TP plugin's payload count; memory.csv's
# tp_bytes for every rank) equal Megatron's
# count exactly — per micro-batch, each of the L blocks all-reduces b*s*h
# floats twice in forward and twice in backward; the vocab-parallel
# embedding once in forward and the head's input gradient once in backward
# (b*s*h each); the vocab-parallel cross-entropy three times b*s (max, sum of
# exponentials, target logit). Under pipeline parallelism each stage counts
# its own layers: the embedding term on the first stage, the head and
# cross-entropy terms on the last — and the parameter bytes of every rank
# (memory.csv, and the start-up table) equal the Megatron split of the
# model, the vocabulary padded to a multiple of tp. tp_ms (time blocked in
# TP all-reduces) is reported every step, and on a traced step it is the
# time rank 0's trace gives its tp spans. With dp 2 x tp 2 the DP traffic is
# exactly one all-reduce of the rank's TP slice over its DP group.
source "$(dirname "$0")/lib.sh"
L=2 H=64 S=32 V=257               # tiny.ini's n_layer, n_embd, block_size; vocab
# expected tp_bytes per step of a stage holding BLOCKS blocks, the
# embedding (EMB = 1) and the head (HEAD = 1): m local micro-batches of b
# sequences
stage_tp_bytes() {
  local b=$1 m=$2 blocks=$3 emb=$4 head=$5
  echo $(( m * 4 * ((4 * blocks + emb + head) * b * S * H + head * 3 * b * S) ))
}
tp_bytes() { stage_tp_bytes "$1" "$2" "$L" 1 1; }
# expected parameter bytes per rank at tensor-parallel size tp (lm_head is
# tied to wte and holds no storage of its own)
param_bytes() {
  local tp=$1 vp=$(( (V + $1 - 1) / $1 * $1 ))
  local block=$(( 4 * H + (3 * H * H + 3 * H) / tp + H * H / tp + H + (4 * H * H + 4 * H) / tp + 4 * H * H / tp + H ))
  echo $(( 4 * (vp / tp * H + S * H + L * block + 2 * H) ))
}
check() { # NAME b m tp
  local name=$1 want got r
  want=$(tp_bytes "$2" "$3")
  for got in $(column "$name" tp_bytes); do
    [ "$got" = "$want" ] || fail "$name: tp_bytes $got per step, Megatron's count is $want"
  done
  for r in $(awk -F, 'NR > 1 { print $1 }' "$E2E_WORK/$name/memory.csv"); do
    got=$(mem "$name" "$r" tp_bytes)
    [ "$got" = "$want" ] || fail "$name: rank $r sent $got TP bytes in its last step (memory.csv), want $want"
  done
  want=$(param_bytes "$4")
  for r in $(awk -F, 'NR > 1 { print $1 }' "$E2E_WORK/$name/memory.csv"); do
    got=$(mem "$name" "$r" param_bytes)
    [ "$got" = "$want" ] || fail "$name: rank $r holds $got parameter bytes, the TP split gives $want"
  done
  column "$name" tp_ms | awk '!($1 > 0) { bad = 1 } END { exit bad }' || fail "$name: tp_ms not reported"
  grep -q "memory per rank (MB)" "$E2E_WORK/$name.out" || fail "$name: no per-rank memory table"
}
T="run.steps=5 model.vocab_size=$V parallel.plugin=hybrid"
train tp2 $T parallel.tp=2 data.micro_batch=2;                check tp2 2 4 2
train tp4 $T parallel.tp=4 data.micro_batch=4;                check tp4 4 2 4
train dp2tp2 $T parallel.dp=2 parallel.tp=2 data.micro_batch=1; check dp2tp2 1 4 2
# with dp 2 x tp 2 the DP axis all-reduces each rank's TP slice of the
# gradients over its 2-rank DP group only: 2(N-1)/N x S = S bytes (over the
# world, or of the whole model, it would differ). The tied head's gradient is
# folded into wte's before the reduction, so S is the slice's parameter
# bytes; deterministic mode reduces the head copy's slice separately (the
# canonical summation order), V/tp x H floats more.
vp2=$(( (V + 1) / 2 * 2 ))
want=$(param_bytes 2)
for got in $(column dp2tp2 dp_bytes); do
  [ "$got" = "$want" ] || fail "dp2tp2: dp_bytes $got, the TP slice's gradients are $want B"
done
train dp2tp2det $T parallel.dp=2 parallel.tp=2 data.micro_batch=1 run.deterministic=true
want=$(( $(param_bytes 2) + 4 * vp2 / 2 * H ))
for got in $(column dp2tp2det dp_bytes); do
  [ "$got" = "$want" ] || fail "dp2tp2 deterministic: dp_bytes $got, want $want B (the slice and the head copy's)"
done
same_losses dp2tp2 dp2tp2det 1e-5
# pp 2 x tp 2, 3 blocks split unevenly (embedding + block 0 | blocks 1-2 +
# head): every rank's memory.csv row has its own stage's TP bytes, and its
# PP bytes: b*s*h floats per micro-batch sent downstream (activations,
# first stage) or upstream (gradients, last stage), plus the embedding
# group's all-reduce of the tied wte slice (vocab_padded/tp x h floats over
# 2 ranks: 2(N-1)/N x S = S bytes).
b=2 m=4
train pp2tp2 $T model.n_layer=3 parallel.pp=2 parallel.pp.stages=0-1,2-4 parallel.tp=2 data.micro_batch=$b
tied=$(( 4 * vp2 / 2 * H ))
for r in 0 1 2 3; do
  case $(mem pp2tp2 $r pp) in
    0) want=$(stage_tp_bytes $b $m 1 1 0) ;;
    1) want=$(stage_tp_bytes $b $m 2 0 1) ;;
    *) fail "pp2tp2: rank $r has pp coordinate $(mem pp2tp2 $r pp)" ;;
  esac
  got=$(mem pp2tp2 $r tp_bytes)
  [ "$got" = "$want" ] || fail "pp2tp2: rank $r (stage $(mem pp2tp2 $r pp)) sent $got TP bytes, Megatron's count for its layers is $want"
  want=$(( m * 4 * b * S * H + tied ))
  got=$(mem pp2tp2 $r pp_bytes)
  [ "$got" = "$want" ] || fail "pp2tp2: rank $r (stage $(mem pp2tp2 $r pp)) sent $got PP bytes, want $want"
  [ "$(mem pp2tp2 $r dp_bytes)" = 0 ] || fail "pp2tp2: rank $r sent $(mem pp2tp2 $r dp_bytes) DP bytes with dp = 1"
done
[ "$(column pp2tp2 tp_bytes | sort -u)" = "$(mem pp2tp2 0 tp_bytes)" ] ||
  fail "pp2tp2: metrics.csv tp_bytes $(column pp2tp2 tp_bytes | sort -u) differ from rank 0's memory.csv row"
# full recomputation reruns each block's forward up to the MLP's
# activation before its backward (model/recompute.c): attn.c_proj's
# all-reduce once more a block and micro-batch, b*s*h floats; the planner
# counts the same all-reduces (`plait plan --explain`'s TP line: Megatron's
# 4 a block, the embedding's and the head's, and that one), so its bytes are
# the measured ones but for the cross-entropy's 3*b*s floats
b=2 m=4
train tp2full $T parallel.tp=2 data.micro_batch=$b model.recompute=full
want=$(( $(tp_bytes $b $m) + m * 4 * L * b * S * H ))
for got in $(column tp2full tp_bytes); do
  [ "$got" = "$want" ] || fail "tp2full: tp_bytes $got per step, Megatron's count and one all-reduce a block again is $want"
done
"$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp1 tp2 pp1 mb$b adam full" $T >"$E2E_WORK/plan.out" 2>&1 ||
  fail "plait plan --explain: $(cat "$E2E_WORK/plan.out")"
n=$(sed -n 's/^  TP  2 ranks on [a-z]*: \([0-9]*\) all-reduces of.*/\1/p' "$E2E_WORK/plan.out")
[ -n "$n" ] || fail "plait plan --explain printed no TP line: $(cat "$E2E_WORK/plan.out")"
[ $(( n * b * S * H * 4 + m * 4 * 3 * b * S )) = "$want" ] ||
  fail "the planner counts $n TP all-reduces a step for tp 2 with full recomputation; the ranks sent $want B, $(( m * (5 * L + 2) )) all-reduces of b*s*h and the cross-entropy's"
# the backward's overlap ([parallel.tp] overlap, on by default): each
# column-parallel product's input-gradient sum (f's all-reduce, or under
# sequence parallelism its reduce-scatter) travels on the communicator's
# thread while the product's weight gradient is made, 2 a block and
# micro-batch and the head's (lm_head's), and under sequence parallelism
# each norm's output gathered again for its product's weight gradient
# travels while the gradients before it are made, 2 a block and
# micro-batch; switched off, every one blocks on the step's thread; the
# losses are the same bits either way
b=2 m=4
for sp in false true; do
  gathers=0
  if [ $sp = true ]; then gathers=$(( 2 * L * m )); fi
  for ov in true false; do
    train "ov_${sp}_$ov" $T parallel.tp=2 data.micro_batch=$b run.steps=3 run.trace=3 \
      parallel.tp.sequence_parallel=$sp parallel.tp.overlap=$ov
  done
  same_losses "ov_${sp}_true" "ov_${sp}_false" 0
  for ov in true false; do
    python3 - "$E2E_WORK/ov_${sp}_$ov/trace.json" "$ov" $(( (2 * L + 1) * m )) $gathers <<'PY' ||
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
on = sys.argv[2] == "true"
want = {"sums": int(sys.argv[3]) if on else 0, "gathers": int(sys.argv[4]) if on else 0}
kind = {"allreduce tp f (backward)": "sums", "reduce_scatter tp sequence reduce-scatter": "sums",
        "allgather tp sequence all-gather": "gathers"}
names = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
bad = []
for pid in sorted({p for p, _ in names}):
    off = [e for e in ev if e.get("ph") == "X" and e["pid"] == pid and e.get("args", {}).get("comm") == "tp"
           and names.get((pid, e["tid"])) != "main"]
    got = {k: sum(1 for e in off if kind.get(e["name"]) == k) for k in want}
    if got != want or any(e["name"] not in kind for e in off):
        bad.append(f"rank pid {pid}: tp collectives off the step's thread {got}, want {want}: "
                   f"{sorted({e['name'] for e in off})}")
print("\n".join(bad))
sys.exit(1 if bad or not names else 0)
PY
      fail "sequence_parallel=$sp overlap=$ov: the input-gradient sums and gathers did not run as they should"
  done
  # the planner counts the same sums and gathers beside products (on a GPU
  # cluster, where they are hidden)
  lay="dp1 tp2 pp1 mb$b adam none"
  if [ $sp = true ]; then lay="$lay sp"; fi
  "$PLAIT_BIN" plan "$CFG" --ranks 2 --cluster "$PLAIT_SOURCE_DIR/configs/clusters/dgx-h100.ini" --explain "$lay" $T \
    >"$E2E_WORK/plan_ov.out" 2>&1 || fail "plait plan --explain $lay: $(cat "$E2E_WORK/plan_ov.out")"
  n=$(sed -n 's/^  TP .*the input-gradient sums, \([0-9]*\) [a-z-]*, beside.*/\1/p' "$E2E_WORK/plan_ov.out")
  [ "$n" = $(( (2 * L + 1) * m )) ] ||
    fail "the planner counts '$n' input-gradient sums beside weight gradients for $lay; the ranks ran $(( (2 * L + 1) * m ))"
  n=$(sed -n 's/^  TP .*gathered again, \([0-9]*\) all-gathers.*/\1/p' "$E2E_WORK/plan_ov.out")
  [ "${n:-0}" = $gathers ] ||
    fail "the planner counts '$n' all-gathers of the norms' outputs beside products for $lay; the ranks ran $gathers"
done
# under sequence parallelism the gpt blocks gather their norms' outputs
# again before the weight gradients (one all-gather a norm beyond
# Megatron's four pairs): the planner's pairs are what the ranks send, and
# their norms' parameter gradients (2H floats a norm) and the
# cross-entropy's on top
"$PLAIT_BIN" plan "$CFG" --ranks 2 --explain "dp1 tp2 pp1 mb$b adam none sp" $T >"$E2E_WORK/plan_sp.out" 2>&1 ||
  fail "plait plan --explain (sp): $(cat "$E2E_WORK/plan_sp.out")"
n=$(sed -n 's/^  TP  2 ranks on [a-z]*: \([0-9]*\) all-gather + reduce-scatter pairs.*/\1/p' "$E2E_WORK/plan_sp.out")
[ -n "$n" ] || fail "plait plan --explain printed no sequence-parallel TP line: $(cat "$E2E_WORK/plan_sp.out")"
want=$(( 2 * n * b * S * H * 4 + m * 4 * 3 * b * S + m * (2 * L + 1) * 2 * H * 4 ))
for got in $(column ov_true_true tp_bytes); do
  [ "$got" = "$want" ] ||
    fail "sequence parallelism: tp_bytes $got per step, the planner's $n pairs (and the norms' and the cross-entropy's sums) give $want"
done
# tp_ms is the time the trace's tp spans cover: every TP collective and
# wait counts the communicator's blocked time, the readings its spans are
# drawn from (with and without sequence parallelism), never a clock of the
# plugin's own, so rank 0's traced step agrees with its metrics.csv row to
# the files' rounding
for sp in false true; do
  train "traced_$sp" $T parallel.dp=2 parallel.tp=2 data.micro_batch=1 run.trace=3 run.mfu_peak=1000 \
    "parallel.tp.sequence_parallel=$sp"
  ms=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i; next } $c["step"] == 3 { print $c["tp_ms"] }' \
    "$E2E_WORK/traced_$sp/metrics.csv")
  "$PLAIT_BIN" trace summary "$E2E_WORK/traced_$sp/trace.json" >"$E2E_WORK/traced_$sp.sum" 2>&1 ||
    fail "trace summary: $(cat "$E2E_WORK/traced_$sp.sum")"
  tr=$(awk '$1 == "0" && NF == 11 { print $6 }' "$E2E_WORK/traced_$sp.sum")
  awk -v a="$ms" -v b="$tr" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b != "" && d <= 0.001) }' ||
    fail "sequence_parallel=$sp: rank 0's tp_ms at step 3 is $ms, its trace's tp spans cover $tr ms: $(cat "$E2E_WORK/traced_$sp.sum")"
done
train one $T
[ "$(column one tp_bytes | sort -u)" = 0 ] || fail "one process reported TP traffic"
[ "$(mem one 0 param_bytes)" = "$(param_bytes 1)" ] || fail "one process: $(mem one 0 param_bytes) parameter bytes"
echo "tp communication OK: tp2 $(tp_bytes 2 4) B/step, tp4 $(tp_bytes 4 2) B/step, params/rank at tp2 $(param_bytes 2) B;" \
  "pp2 x tp2 stages $(stage_tp_bytes $b $m 1 1 0) / $(stage_tp_bytes $b $m 2 0 1) B/step"
