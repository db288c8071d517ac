#!/usr/bin/env bash
# Settings that config check refused and train let through to its ranks, or
# refused without saying where the key was set, or ignored:
# - [run] trace past [run] steps: refused by `train` of one process before
#   its run directory, and once by the launcher of a layout of several
#   ranks, before any rank starts (each rank had refused it alone, after
#   making its run directory and log), in config check's words;
# - [run] residual = bf16 on a float32 run: the same, in config check's
#   words, naming where the key and the precision came from;
# - [parallel.tp] sequence_parallel = true at tp = 1: the refusal names
#   where the key was set; of the mlp arch (no norms to split: the key
#   was ignored), refused;
# - [parallel.pp] stages at pp = 1 (no pipeline stages: the partition was
#   ignored, even one of several ranges): refused, as virtual_stages is;
#   both refused under the dp plugin too, which ignored them;
# - the model's rules between its keys (n_embd and n_head, moe_top_k and
#   moe_experts, ...) and the tp plugin's (tp against n_head, n_kv_head
#   and the MLP's width), and the pp plugin's (schedule, virtual_stages,
#   stages): the refusal names where the key was set.
source "$(dirname "$0")/lib.sh"
W=$E2E_WORK
P=$PLAIT_BIN

# refused_as NAME WANT CMD...: CMD fails (within 120 s) printing WANT
refused_as() {
  local name=$1 want=$2 rc=0; shift 2
  timeout 120 "$@" </dev/null >"$W/$name.out" 2>&1 || rc=$?
  [ $rc -ne 124 ] || fail "$name: $* still ran after 120 s"
  [ $rc -ne 0 ] || fail "$name: $* succeeded: $(tail -n 3 "$W/$name.out")"
  grep -qF -- "$want" "$W/$name.out" || fail "$name: unclear refusal: $(tail -n 5 "$W/$name.out")"
}
no_ranks() { # NAME: no run directory, and no rank reported the refusal
  [ ! -e "$W/$1" ] || fail "$1: a run directory was made: $(ls "$W/$1")"
  ! grep -q "rank [0-9]* failed" "$W/$1.out" || fail "$1: ranks were started: $(cat "$W/$1.out")"
}

# [run] trace past [run] steps
want="command line 'run.trace=2:9': key 'trace' in [run]: '2:9' lies outside the steps this run trains; this run trains steps 1 to 3"
refused_as trace-check "$want" "$P" config check "$CFG" run.steps=3 run.trace=2:9
refused_as trace-one "$want" "$P" train "$CFG" run.steps=3 run.trace=2:9 "run.out_dir=$W/trace-one"
no_ranks trace-one
refused_as trace-dp2 "$want" "$P" train "$CFG" parallel.dp=2 run.steps=3 run.trace=2:9 "run.out_dir=$W/trace-dp2"
no_ranks trace-dp2
[ "$(grep -c "lies outside" "$W/trace-dp2.out")" = 1 ] || fail "trace-dp2: not said once: $(cat "$W/trace-dp2.out")"
# plait bench train traces its own steps, not [run] steps: still taken
out=$("$P" bench train "$CFG" --warmup 1 --steps 2 run.steps=1 run.trace=3 run.mfu_peak=1000 \
  "run.out_dir=$W/bench" 2>&1) || fail "bench train of a trace past [run] steps: $out"
grep -q "^trace of steps 3 to 3:" <<<"$out" || fail "bench train wrote no trace: $out"

# [run] residual = bf16 on a float32 run
want="command line 'run.residual=bf16': [run] residual = bf16 needs [run] precision = bf16, and precision = fp32 (default)"
refused_as residual-check "$want" "$P" config check "$CFG" run.residual=bf16
refused_as residual-one "$want" "$P" train "$CFG" run.residual=bf16 "run.out_dir=$W/residual-one"
no_ranks residual-one
refused_as residual-dp2 "$want" "$P" train "$CFG" parallel.dp=2 run.residual=bf16 "run.out_dir=$W/residual-dp2"
no_ranks residual-dp2

# sequence parallelism without tensor parallelism: where it was set
want="command line 'parallel.tp.sequence_parallel=true': [parallel.tp] sequence_parallel = true needs tensor parallelism"
refused_as sp-check "$want" "$P" config check "$CFG" parallel.tp.sequence_parallel=true
refused_as sp-one "$want" "$P" train "$CFG" parallel.tp.sequence_parallel=true "run.out_dir=$W/sp-one"
no_ranks sp-one

# a pipeline partition without a pipeline
want="[parallel.pp] stages = 0-1,2-3 partitions the layers over pipeline stages, but [parallel] pp = 1 has none"
refused_as stages-check "$want" "$P" config check "$CFG" parallel.plugin=hybrid parallel.pp.stages=0-1,2-3
refused_as stages-one "$want" "$P" train "$CFG" parallel.plugin=hybrid parallel.pp.stages=0-1,2-3 \
  "run.out_dir=$W/stages-one"
no_ranks stages-one
# the dp plugin, which has no pipeline, ignored both
refused_as stages-dp "command line 'parallel.pp.stages=x': [parallel.pp] stages = x partitions the layers" \
  "$P" config check "$CFG" parallel.plugin=dp parallel.pp.stages=x
refused_as vstages-dp "command line 'parallel.pp.virtual_stages=2': [parallel.pp] virtual_stages = 2 needs [parallel] pp >= 2" \
  "$P" train "$CFG" parallel.plugin=dp parallel.pp.virtual_stages=2 "run.out_dir=$W/vstages-dp"
no_ranks vstages-dp
"$P" config check "$CFG" parallel.plugin=hybrid parallel.pp=2 parallel.pp.stages=0-1,2-3 >"$W/stages-pp2.out" 2>&1 ||
  fail "stages at pp = 2: $(cat "$W/stages-pp2.out")"
# the model's rules between its keys name where the key was set: the
# config file's line, or the command line
sed 's/^n_head = 4$/n_head = 5/' "$CFG" >"$W/heads.ini"
line=$(grep -n '^n_embd = 64' "$W/heads.ini" | cut -d: -f1) # both from the file: the first key's line
refused_as heads-file "$W/heads.ini:$line: [model] n_embd = 64 is not a multiple of n_head = 5" \
  "$P" config check "$W/heads.ini"
refused_as heads-cli "command line 'model.n_head=5': [model] n_embd = 64 is not a multiple of n_head = 5" \
  "$P" train "$CFG" model.n_head=5 "run.out_dir=$W/heads-cli"
no_ranks heads-cli
refused_as topk "command line 'model.moe_top_k=5': [model] moe_top_k = 5 is more than moe_experts = 4" \
  "$P" config check "$CFG" model.moe_experts=4 model.moe_top_k=5
refused_as kv "command line 'model.n_kv_head=3': [model] n_kv_head = 3 does not divide n_head = 4" \
  "$P" config check "$CFG" model.arch=llama model.n_kv_head=3
# the tp plugin's refusals name where [parallel] tp was set
refused_as tp3 "command line 'parallel.tp=3': [parallel] tp = 3 does not divide [model] n_head = 4" \
  "$P" config check "$CFG" parallel.plugin=hybrid parallel.tp=3
refused_as tp-ffn "command line 'parallel.tp=2': [parallel] tp = 2 does not divide the MLP width 129 ([model] ffn_hidden)" \
  "$P" config check "$CFG" parallel.plugin=hybrid parallel.tp=2 model.arch=llama model.ffn_hidden=129
# and the pp plugin's, where its [parallel.pp] key was set
refused_as pp-interleaved "command line 'parallel.pp.schedule=interleaved': [parallel.pp] schedule = interleaved needs virtual_stages >= 2" \
  "$P" config check "$CFG" parallel.plugin=hybrid parallel.pp=2 parallel.pp.schedule=interleaved
refused_as pp-stages "command line 'parallel.pp.stages=0-1,3-3': [parallel.pp] stages:" \
  "$P" config check "$CFG" parallel.plugin=hybrid parallel.pp=2 parallel.pp.stages=0-1,3-3
# sequence parallelism of the mlp arch, which has no norms to split (the key was ignored)
refused_as sp-mlp "command line 'parallel.tp.sequence_parallel=true': [parallel.tp] sequence_parallel = true splits a decoder's norms" \
  "$P" config check "$CFG" parallel.plugin=hybrid parallel.tp=2 model.arch=mlp parallel.tp.sequence_parallel=true
echo "layout key refusals OK"
