#!/usr/bin/env bash
# The predicted checkpoint of `config check` and `plait plan` (core/cost/ckpt_cost.c):
# for published runs' layouts (tests/plan/published/runs.tsv: ZeRO-3 on
# 384 ranks, plain Adam at dp 32, tp 8 x pp 2 with ZeRO-1) and a small
# config at dp 2 ZeRO-3, both formats are printed, consistently: the
# checkpoint is 12 bytes a parameter, gathered rank 0 writes all of it,
# the sharded ranks together write all of it and none more than its share
# allows (ZeRO-3 without tp or pp: exactly 1/ranks each), rank 0's extra
# memory under gathered is at least the largest tensor, the save times are
# positive and the sharded save is no slower. The config's ckpt_format is
# the one marked chosen.
source "$(dirname "$0")/../e2e/lib.sh"

check() { # NAME FORMAT-CHOSEN EVEN(1: zero3 without tp/pp) -- output in $E2E_WORK/NAME.out
  python3 - "$E2E_WORK/$1.out" "$2" "$3" <<'PY' || fail "$1: the checkpoint figures are missing or inconsistent (above)"
import re, sys
text = open(sys.argv[1]).read()
chosen, even = sys.argv[2], sys.argv[3] == "1"
head = re.search(r"checkpoint: \S+ \S+, (\d+) bytes \((\d+) parameters.*largest tensor ([\d.]+) (MB|GB|TB)\), "
                 r"at \[cluster\] disk_gbps", text)
assert head, "no checkpoint line:\n" + text[-2000:]
total, params = float(head[1]), float(head[2])
rows = {}
for m in re.finditer(r"^  (gathered|sharded) +(\(chosen[^)]*\))?:? +rank 0 writes .*rank 0 holds ([\d.]+) (MB|GB|TB) "
                     r"more while saving.*; save ([\d.e+]+) s\n +bytes: rank 0 (\d+), the busiest rank (\d+), "
                     r"all (\d+) ranks (\d+)$", text, re.M):
    unit = {"MB": 1e6, "GB": 1e9, "TB": 1e12}[m[4]]
    rows[m[1]] = dict(chosen=bool(m[2]), extra=float(m[3]) * unit, save=float(m[5]), rank0=float(m[6]),
                      busiest=float(m[7]), ranks=int(m[8]), all=float(m[9]))
assert set(rows) == {"gathered", "sharded"}, f"both formats not printed: {sorted(rows)}\n" + text[-2000:]
g, s = rows["gathered"], rows["sharded"]
close = lambda a, b: abs(a - b) <= 1e-9 * max(abs(a), abs(b), 1)
assert close(total, 12 * params), f"checkpoint {total} bytes, not 12 x {params} parameters"
assert close(g["rank0"], total) and close(g["all"], total), f"gathered: rank 0 {g['rank0']}, all {g['all']}, not {total}"
assert close(s["all"], total), f"sharded: all ranks {s['all']}, not the checkpoint's {total}"
assert s["busiest"] * s["ranks"] >= total * (1 - 1e-9), "sharded: the busiest rank x ranks below the total"
assert s["busiest"] >= s["rank0"] * (1 - 1e-9), "sharded: rank 0 writes more than the busiest rank"
if even:
    assert close(s["busiest"] * s["ranks"], total), f"sharded ZeRO-3: {s['busiest']} x {s['ranks']} != {total}"
largest = float(head[3]) * {"MB": 1e6, "GB": 1e9, "TB": 1e12}[head[4]]
assert g["extra"] >= largest * 0.99, f"gathered: rank 0 holds {g['extra']} more, less than the largest tensor {largest}"
assert g["save"] > 0 and s["save"] > 0 and s["save"] <= g["save"], f"save times {s['save']} (sharded), {g['save']}"
assert rows[chosen]["chosen"] and not rows["sharded" if chosen == "gathered" else "gathered"]["chosen"], "chosen mark"
print(f"ok: {total:.0f} bytes, sharded busiest {s['busiest']:.0f} x {s['ranks']}, saves {s['save']:.3g} / {g['save']:.3g} s")
PY
}

plan() { # NAME ROW LAYOUT [overrides]: --explain of runs.tsv row ROW's model in LAYOUT
  local name=$1 row=$2 layout=$3; shift 3
  local r
  r=$(grep -P "^$row\t" tests/plan/published/runs.tsv) || fail "no row $row in runs.tsv"
  IFS=$'\t' read -r _ _ _ nl nh ne _ _ voc seq gpus cl gb _ <<<"$r"
  "$PLAIT_BIN" plan tests/plan/published/gpt.ini --ranks "$gpus" --cluster "configs/clusters/$cl.ini" \
    --explain "$layout" model.n_layer="$nl" model.n_head="$nh" model.n_embd="$ne" model.vocab_size="$voc" \
    model.block_size="$seq" data.global_batch="$gb" "$@" >"$E2E_WORK/$name.out" 2>&1 ||
    fail "$name: plait plan failed: $(tail -n 3 "$E2E_WORK/$name.out")"
}

plan z3 megatron-175b-zero3-384 "dp384 mb4 zero3 full" run.ckpt_format=sharded
check z3 sharded 1
plan adam megatron-1_7b "dp32 mb1 adam full"
check adam gathered 0
plan tp_pp megatron-39_1b "dp32 tp8 pp2 1f1b mb1 zero1 full" run.ckpt_format=sharded run.ckpt_async=true
check tp_pp sharded 0
grep -q "sharded  (chosen, async)" "$E2E_WORK/tp_pp.out" || fail "ckpt_async is not marked on the chosen format"

# config check of a small config, on this machine's defaults
"$PLAIT_BIN" config check tests/e2e/tiny.ini parallel.plugin=hybrid parallel.dp=2 optim.plugin=zero3 \
  run.ckpt_format=sharded >"$E2E_WORK/cc.out" 2>&1 || fail "config check failed: $(tail -n 3 "$E2E_WORK/cc.out")"
check cc sharded 1
echo ok
