#!/usr/bin/env bash
# The CLI as a user meets it: version, plugins (a plugin built for another ABI
# major is refused with both versions and the rest still load and run),
# config check with a misspelt key (file, line, key, suggestion), a missing
# config named once, config show
# with origins, ranks whose must-agree keys differ, options of bench
# train and plan with values out of range or missing, and arguments that
# plugins and doctor --topology take none of.
source "$(dirname "$0")/lib.sh"
P=$PLAIT_BIN
$P --version | grep -Eq "plugin ABI v1\.[0-9]+\)" || fail "--version"
# (outputs are captured before grep -q reads them: a grep that stops early
# would kill plait with SIGPIPE, which pipefail reports as a failure)
help=$($P help train) && grep -q -- "--resume" <<<"$help" || fail "help train"
# every check an optimizer's kit run prints is in plait help plugin
help=$($P help plugin)
kit=$($P plugin test "$(dirname "$PLAIT_BIN")/../lib/plait/libplait-optim-adam.so") || fail "plugin test adam: $kit"
for check in $(awk '$3 == "pass" || $3 == "fail" {print $1}' <<<"$kit"); do
  grep -q "^  $check " <<<"$help" || fail "plait help plugin does not list the check $check: $kit"
done
# bench sweep's --axes all varies ep for a model with experts, and refuses sp: its help says both
help=$($P help bench) && grep -q "cp, and ep for a model with experts" <<<"$help" && grep -q "not sp:" <<<"$help" ||
  fail "help bench: the axes of a sweep's all: $help"
out=$($P plugins)
for k in "comm +tcp" "parallel +dp" "parallel +tp" "parallel +pp" "parallel +hybrid" "optim +adam"; do
  grep -Eq "^$k +[0-9.]+ +1\.[0-9]+ +available" <<<"$out" || fail "plait plugins does not list $k: $out"
done

# a plugin for ABI v2 next to good ones: refused, named, both versions; the run goes on
plugdir=$(dirname "$PLAIT_BIN")/../tests/plugins
out=$(PLAIT_PLUGIN_PATH=$plugdir $P plugins 2>&1)
grep -q "libplait-optim-abi2.so: built for plait plugin ABI v2" <<<"$out" || fail "ABI v2 plugin not refused: $out"
grep -Eq "this plait speaks ABI v1\.[0-9]+" <<<"$out" || fail "the refusal does not name both versions"
grep -Eq "^optim +testgood .*available" <<<"$out" || fail "the good test plugin was not listed beside the refused one"
PLAIT_PLUGIN_PATH=$plugdir train with_broken_plugin_dir run.steps=2

# misspelt key: file, line, key, suggestion; exit 1
bad=$E2E_WORK/bad.ini
printf '[run]\nsteps = 3\n[optim]\nlerning_rate = 1e-3\n' >"$bad"
if $P config check "$bad" >"$E2E_WORK/check.out" 2>&1; then fail "config check accepted a misspelt key"; fi
grep -q "$bad:4: key 'lerning_rate' is not known in \[optim\]; did you mean 'lr'?" "$E2E_WORK/check.out" ||
  fail "unexpected message: $(cat "$E2E_WORK/check.out")"
$P config check "$CFG" | grep -q ": ok" || fail "config check of a good file"
# a config that does not exist: named once, by every command that reads one
for cmd in "config check" train "bench train"; do
  if $P $cmd "$E2E_WORK/nope.ini" >"$E2E_WORK/nope.out" 2>&1; then fail "$cmd ran without its config"; fi
  [ "$(grep -o "nope.ini" "$E2E_WORK/nope.out" | wc -l)" -eq 1 ] || fail "$cmd: the missing file is not named once: $(cat "$E2E_WORK/nope.out")"
  grep -q "cannot open config file $E2E_WORK/nope.ini: No such file or directory" "$E2E_WORK/nope.out" ||
    fail "$cmd: $(cat "$E2E_WORK/nope.out")"
done

# a cluster file with an error: the file named once, with its line
printf '[cluster]\nname = x\ngpus_per_node = 8\n' >"$E2E_WORK/cluster.ini"
if $P plan "$CFG" --cluster "$E2E_WORK/cluster.ini" --ranks 2 >"$E2E_WORK/cluster.out" 2>&1; then fail "plan accepted a misspelt cluster key"; fi
grep -q "$E2E_WORK/cluster.ini:3: key 'gpus_per_node' is not known in \[cluster\]" "$E2E_WORK/cluster.out" ||
  fail "plan --cluster: $(cat "$E2E_WORK/cluster.out")"
[ "$(grep -o "cluster.ini" "$E2E_WORK/cluster.out" | wc -l)" -eq 1 ] || fail "the cluster file is not named once: $(cat "$E2E_WORK/cluster.out")"

# layout mistakes are found before any rank starts, and said once: batch
# arithmetic that cannot hold for the layout's dp, heads not divisible by tp,
# a pipeline partition with a gap (checked for every rank's coordinates)
layout_error() { # EXPECTED overrides...
  local want=$1; shift
  if $P config check "$CFG" "$@" >"$E2E_WORK/layout.out" 2>&1; then fail "config check accepted $*"; fi
  grep -q "$want" "$E2E_WORK/layout.out" || fail "config check $*: $(cat "$E2E_WORK/layout.out")"
  rm -rf "$E2E_WORK/layout"
  if $P train "$CFG" run.out_dir="$E2E_WORK/layout" "$@" >"$E2E_WORK/layout.out" 2>&1; then fail "trained with $*"; fi
  [ "$(grep -c "$want" "$E2E_WORK/layout.out")" = 1 ] || fail "train $* did not say it once: $(cat "$E2E_WORK/layout.out")"
  ! grep -q "rank [0-9]" "$E2E_WORK/layout.out" || fail "train $* started ranks: $(cat "$E2E_WORK/layout.out")"
  [ ! -e "$E2E_WORK/layout" ] || fail "train $* created its run directory"
}
layout_error "global_batch is not a multiple of dp x micro_batch" parallel.dp=4 data.micro_batch=3
layout_error "tp = 3 does not divide \[model\] n_head = 4" parallel.plugin=hybrid parallel.tp=3
layout_error "stages: gap: layer 2 is in no stage" parallel.plugin=hybrid parallel.pp=2 parallel.pp.stages=0-1,3-3
# sequence parallelism without a tp group, or with a tp that does not divide
# the sequence: the keys named, and what would work
layout_error "\[parallel.tp\] sequence_parallel = true needs tensor parallelism, but \[parallel\] tp = 1: set \[parallel\] tp >= 2" \
  parallel.plugin=hybrid parallel.dp=2 parallel.tp.sequence_parallel=true
layout_error "\[parallel.tp\] sequence_parallel = true needs tensor parallelism, but \[parallel\] tp = 1" \
  parallel.plugin=dp parallel.dp=2 parallel.tp.sequence_parallel=true
# (one rank: refused by its set-up, before step 1)
for cmd in "config check" train; do
  if $P $cmd "$CFG" run.out_dir="$E2E_WORK/sp1" parallel.plugin=tp parallel.tp.sequence_parallel=true \
       >"$E2E_WORK/sp1.out" 2>&1; then fail "$cmd accepted sequence parallelism with tp = 1"; fi
  grep -q "\[parallel.tp\] sequence_parallel = true needs tensor parallelism, but \[parallel\] tp = 1" \
    "$E2E_WORK/sp1.out" || fail "$cmd, sequence parallelism with tp = 1: $(cat "$E2E_WORK/sp1.out")"
  ! grep -q "step 1\b" "$E2E_WORK/sp1.out" || fail "$cmd ran a step: $(cat "$E2E_WORK/sp1.out")"
done
layout_error "\[parallel\] tp = 4 does not divide \[model\] block_size = 30: use \[parallel\] tp = 2, or \[model\] block_size = 28 or 32, or sequence_parallel = false" \
  parallel.plugin=hybrid parallel.tp=4 model.block_size=30 parallel.tp.sequence_parallel=true
# (output captured first: grep -q stopping early would break the pipe under pipefail)
show=$($P config show "$CFG" parallel.dp=2 data.micro_batch=0 data.accumulation_steps=2)
grep -Eq "^micro_batch = 2 +; \[derived: dp 2" <<<"$show" || fail "config show does not show the derived micro_batch"

# config show: value origins
show=$(PLAIT_OPTIM_BETA1=0.8 $P config show "$CFG" optim.eps=1e-6)
grep -Eq "^lr = 1e-3 +; \[$CFG:[0-9]+\]" <<<"$show" || fail "file origin missing"
grep -Eq "^beta1 = 0.8 +; \[environment PLAIT_OPTIM_BETA1\]" <<<"$show" || fail "environment origin missing"
grep -Eq "^eps = 1e-6 +; \[command line 'optim.eps=1e-6'\]" <<<"$show" || fail "command-line origin missing"
grep -Eq "^beta2 = 0.95 +; \[default\]" <<<"$show" || fail "default origin missing"
grep -q "^\[comm.tcp\]" <<<"$show" || fail "the comm plugin's section is not shown"

# ranks disagreeing on a must-agree key: every rank fails, the differing one says which key
if command -v mpirun >/dev/null; then
  rm -rf "$E2E_WORK/mismatch"
  if mpirun --allow-run-as-root --oversubscribe -np 1 "$P" train "$CFG" run.out_dir="$E2E_WORK/mismatch" \
       parallel.dp=2 run.steps=2 : -np 1 env PLAIT_OPTIM_LR=0.5 "$P" train "$CFG" \
       run.out_dir="$E2E_WORK/mismatch" parallel.dp=2 run.steps=2 >"$E2E_WORK/mismatch.out" 2>&1; then
    fail "ranks with different [optim] lr trained"
  fi
  grep -q "rank 1's configuration differs from rank 0's in a key that must be equal on every rank: optim.lr=0.5 where rank 0 has optim.lr=1e-3" \
    "$E2E_WORK/mismatch.out" || fail "no clear mismatch message: $(tail -n 5 "$E2E_WORK/mismatch.out")"
  # rank 0 says it too, not "see the differing rank's error"
  grep -Eq "rank 0 failed: .*optim.lr=0.5 where rank 0 has optim.lr=1e-3|^plait: error: train: rank 1's configuration.*" \
    "$E2E_WORK/mismatch.out" || fail "rank 0 does not name the differing key: $(tail -n 5 "$E2E_WORK/mismatch.out")"
fi
# an option's value that is no whole number in range, or missing, is a usage
# error (exit 2) naming the option, before any rank starts; so is a --csv
# whose folder does not exist (the file is written when the benchmark ends)
usage_error() {
  local want=$1; shift
  local rc=0
  timeout 20 "$P" "$@" >"$E2E_WORK/usage.out" 2>&1 || rc=$?
  [ $rc -eq 2 ] || fail "plait $*: exit $rc, not 2 (a usage error): $(tail -n 2 "$E2E_WORK/usage.out")"
  grep -qF -- "$want" "$E2E_WORK/usage.out" || fail "plait $*: the option is not named: $(tail -n 2 "$E2E_WORK/usage.out")"
}
usage_error "--steps needs a whole number of steps in 1..1000000, not '1e3'" bench train "$CFG" --steps 1e3
usage_error "--steps needs a whole number of steps in 1..1000000, not '5x'" bench train "$CFG" --steps 5x
usage_error "--warmup needs a whole number of steps in 0..1000000, not '99999999999'" bench train "$CFG" --warmup 99999999999
usage_error "--csv needs a file name" bench train "$CFG" --csv
usage_error "--csv $E2E_WORK/no/such/x.csv: its folder $E2E_WORK/no/such: No such file or directory" \
  bench train "$CFG" --csv "$E2E_WORK/no/such/x.csv"
usage_error "--dp: '0' is not a whole number in 1..1000000" plan "$CFG" --ranks 4 --dp 0
usage_error "--micro_batch: 'abc' is not a whole number in 1..1000000" plan "$CFG" --ranks 4 --micro_batch abc
usage_error "--schedule: 'bogus' is not one of gpipe, 1f1b, interleaved, zb1" plan "$CFG" --ranks 4 --schedule bogus
usage_error "--dp needs a value or a list of them" plan "$CFG" --ranks 4 --dp ''
usage_error "unknown option '--dpp'" plan "$CFG" --ranks 4 --dpp 2
usage_error "--top takes a number of layouts (1 or more) or 'all', not '0'" plan "$CFG" --ranks 4 --top 0
usage_error "--explain takes a layout as the table prints it" plan "$CFG" --ranks 4 --explain ''
usage_error "plait plugins: takes no arguments, not 'tcp'" plugins tcp
usage_error "--topology reads the node alone, without '$CFG'" doctor "$CFG" --topology
usage_error "--topology reads the node alone, without '--peak'" doctor --topology --peak
usage_error "is a device plugin: the kit checks comm, parallel and optim plugins" \
  plugin test "$(dirname "$PLAIT_BIN")/../lib/plait/libplait-device-cpu.so"
# a plugin file that exits or crashes as it loads: named, exit 1 (it was loaded in a child first)
crashing=$(dirname "$PLAIT_BIN")/../tests/plugins-crashing
kit_refuses() {
  local name=$1 want=$2 rc=0
  "$P" plugin test "$crashing/libplait-optim-$name.so" >"$E2E_WORK/kit-$name.out" 2>&1 || rc=$?
  [ $rc -eq 1 ] || fail "plugin test of $name: exit $rc, not 1: $(cat "$E2E_WORK/kit-$name.out")"
  grep -qF "libplait-optim-$name.so refused: it $want" "$E2E_WORK/kit-$name.out" ||
    fail "plugin test of $name: not named: $(cat "$E2E_WORK/kit-$name.out")"
}
kit_refuses exitctor "ended the process while loading or probing (exit status 3)"
kit_refuses crashctor "crashed while loading or probing (Segmentation fault, signal 11)"
# -n that does not fit the layout: said once by the launcher, no rank started
usage_error "[parallel] dp 2 x tp 1 x pp 1 = 2 ranks, but -n 3 starts 3" train "$CFG" -n 3 parallel.dp=2 \
  "run.out_dir=$E2E_WORK/n3"
[ "$(grep -c 'ranks, but' "$E2E_WORK/usage.out")" = 1 ] || fail "-n 3 for a 2-rank layout: not said once: $(cat "$E2E_WORK/usage.out")"
[ ! -e "$E2E_WORK/n3" ] || fail "-n 3 for a 2-rank layout: a rank started"
usage_error "[parallel] dp 2 x tp 1 x pp 1 = 2 ranks, but -n 3 starts 3" bench train "$CFG" -n 3 parallel.dp=2 --steps 1
[ "$(grep -c 'ranks, but' "$E2E_WORK/usage.out")" = 1 ] || fail "bench train -n 3 for a 2-rank layout: not said once"
# pipeline settings without pipeline stages: refused, not ignored
if "$P" config check "$CFG" parallel.plugin=hybrid parallel.pp.virtual_stages=2 >"$E2E_WORK/vpp1.out" 2>&1; then
  fail "virtual_stages = 2 at pp = 1 accepted"
fi
grep -qF "[parallel.pp] virtual_stages = 2 needs [parallel] pp >= 2 (pp is 1)" "$E2E_WORK/vpp1.out" ||
  fail "virtual_stages at pp = 1: $(cat "$E2E_WORK/vpp1.out")"
echo "cli OK"
