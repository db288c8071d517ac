#!/usr/bin/env bash
# plait rewind: a run with checkpoints at steps 2, 4 and 6 rewound to 2
# moves 4 and 6 (and a copy of metrics.csv) into rewound-2-*/, whole;
# --resume then trains steps 3-6 again with the losses of the first time,
# bit for bit (deterministic); a step without a complete checkpoint is
# refused naming those there are, the newest moves nothing, a run training
# in the directory is refused, and STEP must be a number.
source "$(dirname "$0")/lib.sh"
S=(run.steps=6 run.ckpt_every=2 run.keep_checkpoints=3 run.deterministic=true)
ckpts() { ls -d "$1"/ckpt-* 2>/dev/null | xargs -r -n1 basename | tr '\n' ' '; }
R=$E2E_WORK/run

train run "${S[@]}"
"$PLAIT_BIN" rewind "$R" 2 >"$E2E_WORK/rewind.out" 2>&1 || fail "rewind: $(cat "$E2E_WORK/rewind.out")"
grep -q "^moved 2 checkpoints after step 2 into $R/rewound-2-[0-9T]*Z (with a copy of metrics.csv); --resume now continues from step 2" \
  "$E2E_WORK/rewind.out" || fail "rewind said: $(cat "$E2E_WORK/rewind.out")"
[ "$(ckpts "$R")" = "ckpt-00000002 " ] || fail "left in the run: $(ckpts "$R")"
aside=$(ls -d "$R"/rewound-2-*)
[ "$(ckpts "$aside")" = "ckpt-00000004 ckpt-00000006 " ] || fail "moved: $(ckpts "$aside")"
[ -f "$aside/ckpt-00000006/COMPLETE" ] && [ "$(wc -l <"$aside/metrics.csv")" = 7 ] || fail "the moved run is not whole"

train run "${S[@]}" --resume
[ "$(ckpts "$R")" = "ckpt-00000002 ckpt-00000004 ckpt-00000006 " ] || fail "after the resume: $(ckpts "$R")"
paste -d' ' <(awk -F, 'NR > 1 { print $2 }' "$aside/metrics.csv") <(column run loss) |
  awk '$1 != $2 { bad = 1 } END { exit bad }' || fail "the resumed steps' losses differ from the first time's"

out=$("$PLAIT_BIN" rewind "$R" 5 2>&1) && fail "rewind to step 5 was taken: $out"
grep -q "holds no complete checkpoint of step 5 to rewind to (its checkpoints: 2, 4 and 6)" <<<"$out" || fail "step 5: $out"
"$PLAIT_BIN" rewind "$R" 6 >"$E2E_WORK/newest.out" 2>&1 || fail "rewind to the newest: $(cat "$E2E_WORK/newest.out")"
grep -q "^nothing to move: ckpt-00000006 is the newest checkpoint in $R" "$E2E_WORK/newest.out" ||
  fail "the newest: $(cat "$E2E_WORK/newest.out")"
out=$("$PLAIT_BIN" rewind "$R" x 2>&1) && fail "STEP x was taken: $out"
grep -q "STEP 'x' is not a step" <<<"$out" || fail "STEP x: $out"

# a run training in the directory holds its lock
rm -rf "$E2E_WORK/busy"
"$PLAIT_BIN" train "$CFG" run.out_dir="$E2E_WORK/busy" run.steps=100000 run.ckpt_every=1 >"$E2E_WORK/busy.out" 2>&1 &
pid=$!
at_exit "kill -9 $pid 2>/dev/null"
for ((i = 0; i < 600; i++)); do [ -d "$E2E_WORK/busy/ckpt-00000002" ] && break; sleep 0.1; done
out=$("$PLAIT_BIN" rewind "$E2E_WORK/busy" 1 2>&1) && fail "rewind of a training run was taken: $out"
grep -q "busy" <<<"$out" && grep -qi "pid $pid\|held by\|holds" <<<"$out" || fail "the refusal of a training run: $out"
kill "$pid" 2>/dev/null || true
echo "rewind: 4 and 6 moved aside whole; the resume retrained them bit for bit; refusals said"
