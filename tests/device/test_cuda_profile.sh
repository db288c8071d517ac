#!/usr/bin/env bash
# [device.cuda] profile (plugins/device/cuda/profile.c):
#   test_cuda_profile.sh emu   on cuda_emu, the cuda plugin's own source on the
#                              CPU emulator (label cuda_emu)
#   test_cuda_profile.sh gpu   on the GPU (label gpu; exits 77, skipped, without one)
# A bf16 bench train of a small GPT with the profile on writes its table when
# the device closes; the table's rows add up to the span its header states;
# each kernel a step runs is there as often as the step runs it (the fused
# attention's forward and backward once a layer, AdamW once, the head's
# product by its shape, on the emulator the bias gradients in the weight
# gradients' products); scripts/gpu-step-estimate.py --measured finds a
# measured time for every kernel family it estimates. Off, nothing is
# written; a directory that cannot be written is an error before the run; a
# link at the table's path is replaced, its target left alone.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
# shellcheck source=tests/device/cuda_mode.sh
source "$PLAIT_SOURCE_DIR/tests/device/cuda_mode.sh"
MODE=${1:-gpu}
cuda_device "$MODE" "test_cuda_profile.sh [emu|gpu]"
W=$E2E_WORK
rm -rf "${W:?}" && mkdir -p "$W"
# gpt-tiny reshaped so that no two of the step's dimensions coincide (the
# comparison tells the head's product from the layers' by shape): width 96
# (3 heads of 32, the tensor-core kernels), 2 layers, 5 sequences of 128,
# vocabulary 256
sed -e 's/^n_embd *=.*/n_embd = 96/' -e 's/^n_head *=.*/n_head = 3/' -e 's/^n_layer *=.*/n_layer = 2/' \
  "$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini" >"$W/model.ini"
L=2 STEPS=3 WARM=1
bench() { # OUT KEY=VALUE...
  local out=$1
  shift
  (cd "$W" && "$PLAIT_BIN" bench train model.ini --steps $((STEPS - WARM)) --warmup $WARM device.plugin=$DEV \
    run.precision=bf16 data.global_batch=5 "$@") >"$W/$out" 2>&1
}

bench on.out "device.$DEV.profile=$W/profile.tsv" || fail "bench train with the profile on failed: $(tail -5 "$W/on.out")"
grep -q "profile of [0-9]* marks .* written to $W/profile.tsv" "$W/on.out" ||
  fail "no line saying the profile was written: $(grep -i profile "$W/on.out")"
[ -f "$W/profile.tsv" ] || fail "no profile at $W/profile.tsv"
grep -q '^# compute .*activations bf16' "$W/on.out" || fail "the run kept float32 activations"

# the rows partition the stream's time: their totals add up to the span
awk -F'\t' '/^# marks/ { split($0, a, "span_ms "); span = a[2] + 0 }
  !/^#/ && $1 != "label" { sum += $5; n++ }
  END { d = sum - span; if (d < 0) d = -d
        printf "%d rows, %.3f ms in all, span %.3f ms\n", n, sum, span
        exit !(n > 10 && span > 0 && d <= 1e-3 * span + 0.01 * n) }' "$W/profile.tsv" ||
  fail "the rows do not add up to the profile's span"

# calls(LABEL [DETAIL-REGEX]): the calls of the rows with that label (the
# bench's GEMM-rate probe, the sgemm entry, aside)
calls() {
  awk -F'\t' -v l="$1" -v d="${2:-^-$}" '$1 == l && $2 ~ d && $3 != "sgemm" { n += $4 } END { print n + 0 }' \
    "$W/profile.tsv"
}
expect_calls() { # WHAT GOT WANT
  [ "$2" = "$3" ] || fail "$1: $2 calls in the profile, $3 expected"
  echo "ok: $1: $2 calls"
}
expect_calls "fused attention forward (bf16), a layer a step" "$(calls 'fused attention forward (bf16)')" $((L * STEPS))
expect_calls "fused attention backward (bf16), a layer a step" "$(calls 'fused attention backward (bf16)')" $((L * STEPS))
expect_calls "AdamW, once a step" "$(calls adamw_multi)" $STEPS
# the head: 640 rows (5 x 128) by the vocabulary 256 by the width 96,
# forward, and its two gradients
expect_calls "the head's forward product" "$(calls gemm '^640x256x96 ')" $STEPS
[ "$(calls gemm '(^| )256x96x640 |^640x96x256 ')" -ge $((2 * STEPS)) ] || fail "the head's gradient products are missing"
# the residual stream's gradient: written in bf16 by the LayerNorm backward
# that makes it (the head's, and each block's but the first block's
# attention half, whose gradient only the embedding reads, in float32), so
# to_bf16 makes the weights' copies alone (6 a layer and lm_head's, a step)
expect_calls "LayerNorm backwards writing the gradient's bf16 copy, 2 a layer a step" \
  "$(calls layernorm_backward_fused_bf16_copy)" $((2 * L * STEPS))
expect_calls "LayerNorm backwards without it (the first block's attention half)" \
  "$(calls layernorm_backward_fused_bf16)" $STEPS
expect_calls "to_bf16 from the entry itself (the weights' copies), 6 a layer and 1 a step" \
  "$(awk -F'\t' '$1 == "to_bf16" && $3 == "to_bf16" { n += $4 } END { print n + 0 }' "$W/profile.tsv")" \
  $(((6 * L + 1) * STEPS))

# the 4 biases of a layer: their gradients summed by the weight gradients'
# products (BGRADB), which the emulator's stand-in offers; a GPU's library
# may not (then the column sums run): said, not required
bgrad=$(calls gemm ' \+bgrad')
if [ "$MODE" = emu ]; then
  expect_calls "weight-gradient products summing a bias gradient (BGRADB), 4 a layer a step" "$bgrad" $((4 * L * STEPS))
else
  echo "weight-gradient products summing a bias gradient (BGRADB): $bgrad calls ($((4 * L * STEPS)) where cuBLASLt offers it)"
fi

command -v python3 >/dev/null || { echo "SKIP: no python3 for the estimate beside"; exit 77; }
python3 "$PLAIT_SOURCE_DIR/scripts/gpu-step-estimate.py" --config "$W/model.ini" --batch 5 \
  --measured "$W/profile.tsv" >"$W/beside.md" || fail "gpu-step-estimate.py --measured failed"
cat "$W/beside.md"
# every family the estimate has (host synchronisations aside) has a measured time
awk -F' *[|] *' '/^[|] / && $2 !~ /^(kernel family|---|other|\*\*step\*\*|host synchronisations)/ && $6 == "—" { print $2; bad = 1 }
  END { exit bad }' "$W/beside.md" >"$W/unmeasured" || fail "families with no measured time: $(tr '\n' ';' <"$W/unmeasured")"

# off: nothing written. This run and the link's take one step: they check
# whether and where a table is written, not what it holds.
STEPS=1 WARM=0 bench off.out || fail "bench train without the profile failed"
grep -qi 'profile' "$W/off.out" && fail "a run without the key mentions a profile: $(grep -i profile "$W/off.out")"
# a directory that cannot be written: refused before the run, naming the key
if bench bad.out "device.$DEV.profile=$W/no/such/dir/p.tsv"; then fail "an unwritable profile path was accepted"; fi
grep -q "\[device.$DEV\] profile = $W/no/such/dir/p.tsv: cannot write into" "$W/bad.out" ||
  fail "the refusal does not name the key and the directory: $(tail -3 "$W/bad.out")"
echo "ok: refused: $(grep -o 'cannot write into.*' "$W/bad.out" | head -1)"
# a link at the table's path: replaced by the table, its target untouched
echo "keep me" >"$W/target"
ln -s "$W/target" "$W/link.tsv"
STEPS=1 WARM=0 bench link.out "device.$DEV.profile=$W/link.tsv" || fail "bench train with the profile at a link failed"
[ "$(cat "$W/target")" = "keep me" ] || fail "the profile was written through a link"
[ -f "$W/link.tsv" ] && [ ! -L "$W/link.tsv" ] || fail "the link was not replaced by the table"
echo "ok: a link at the path was replaced, its target untouched"
rm -rf "${W:?}"
echo "PASS"
