#!/usr/bin/env bash
# Everything plait wants from one call on a GPU machine, within about 10
# minutes, logs and one summary.md written to $OUT. docs/gpu.md ("Verifying
# on a GPU") says how to run it and what it prints. Nothing outside this
# checkout is needed, here or there.
#
#   scripts/gpu-session.sh --pack [BUILD]   here, after building: the commit into
#                                           BUILD/gpu-commit.txt, then scripts/gpu-bundle.sh
#                                           BUILD (writes .gpu/)
#   bash .gpu/on-device.sh bash scripts/gpu-session.sh
#                                           there, with .gpu/ carried beside the checkout
#   scripts/gpu-session.sh --dry-run        here: every part on the cpu, sim and emulated
#                                           devices with small sizes (PLAIT_GPU_SESSION_DEVICE=sim)
#
# The parts, by value, each with a time budget enforced by timeout (a hang
# costs its budget, never the call): the gpu tests (the cuda<->nccl event
# round trip among them); the same under compute-sanitizer (memcheck,
# racecheck, synccheck); bench train GPT-2 124M bf16/tf32/fp32 beside
# PyTorch (scripts/peers, eager and compiled), bf16 also with selective
# recomputation (less memory again, for GELU once more a step), each plait
# row saying whether its activations were bf16; GPT-2 350M bf16 beside torch.compile;
# where a bf16 step's time goes ([device.cuda] profile, beside the
# estimate of scripts/gpu-step-estimate.py); bench comm on device memory
# (nccl 1 rank, tcp staging 2 ranks) beside pinned cudaMemcpy; GPT-2 124M on
# 2 ranks sharing the GPU over tcp staging; the CPU figures (1 rank x all
# cores, all cores x 1 rank, PyTorch beside, OPENBLAS_CORETYPE unset); the
# rest of the suite with what time is left. A part that would not fit in the
# time left is skipped and says so in summary.md, as is a part whose number
# PLAIT_GPU_SESSION_SKIP names (e.g. "7 8").
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
# shellcheck source=scripts/gpu-lib.sh
. "$root/scripts/gpu-lib.sh"

gpu_init gpu-session 560 "$@"

gpu_started "plait GPU session ($( [ $DRY = 1 ] && echo "DRY RUN on $DEV: no GPU figure here" || echo "device $DEV"))"

# ---- 1. the machine --------------------------------------------------------
if part "1. machine" 20; then
  {
    nvidia-smi 2>&1 || echo "no nvidia-smi"
    nproc
    lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)|Flags' | cut -c1-300
    "$PLAIT" plugins 2>&1 | grep -A1 -E '^device'
  } >"$W/machine.log" 2>&1
  gpu_machine_line
  say "device plugins: $("$PLAIT" plugins 2>&1 | grep -E '^device' | awk '{ print $2 ": " $5 }' | paste -sd';' -)"
fi

# ---- 2. the gpu tests ------------------------------------------------------
if part "2. ctest -L gpu" 160; then
  # -V: every test's own lines (the reference tests' errors per tensor, the
  # loss curves' largest differences) go to the log, passing or not
  rc=$(PLAIT_TEST_VERBOSE=1 run gputests.log 160 ctest --test-dir "$BUILD" -L gpu -V --timeout 120)
  say "ctest -L gpu: $(status_word "$rc"); $(ctest_counts gputests.log)"
  grep -E '^ *[0-9]+/[0-9]+ Test +#' "$W/gputests.log" | sed 's/^ */    /' | tee -a "$SUMMARY"
  # the largest error of each reference test, as a share of its bound and normwise
  awk '/^[0-9]+: Test command: .*test_model_reference/ { n = $1; sub(/:$/, "", n); name[n] = $(NF - 1) " " $NF; gsub(/"/, "", name[n]) }
       / worst [0-9.e+-]+ of tolerance/ { split($0, a, ":"); t = a[1]; for (i = 1; i <= NF; i++) {
         if ($i == "worst" && $(i + 1) > w[t]) w[t] = $(i + 1); if ($i == "normwise" && $(i + 1) > nw[t]) nw[t] = $(i + 1) } }
       END { for (t in w) printf "    reference fixtures on %s: largest error %.3f of the elementwise bound, normwise %.2e\n", name[t], w[t], nw[t] }' \
    "$W/gputests.log" | sort | tee -a "$SUMMARY"
  grep -hE 'max relative loss difference|relative difference of the means|bit-identical|within 1e-5|SKIP:' "$W/gputests.log" | sed 's/^[0-9]*: //' | sort -u | sed 's/^/    /' | tee -a "$SUMMARY"
  grep -E 'Test +#[0-9]+: test_cuda_nccl_events ' "$W/gputests.log" | sed 's/.*Test *#[0-9]*: */    event round trip cuda<->nccl: /' | tee -a "$SUMMARY"
  if [ $DRY = 1 ]; then
    # the comparisons the gpu tests make, with sim posing as the GPU, and
    # the quick gpu tests on the CUDA emulator (the round trip among them)
    rc=$(run selfchecks.log 120 ctest --test-dir "$BUILD" -R '_selfcheck$|test_device_reference_sim$|test_cuda_kernels_emu_bf16|test_cuda_async_emu|test_cuda_nccl_events_emu' --output-on-failure)
    say "sim self-checks of the gpu tests' comparisons and the gpu tests on the emulator: $(status_word "$rc"); $(ctest_counts selfchecks.log)"
  fi
fi

# ---- 3. the same under compute-sanitizer -------------------------------------
# the toolkit's, or the one a Python environment's nvidia-cuda-sanitizer-api carries
SAN=$(command -v compute-sanitizer ||
  ls /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer \
    "$("$PY" -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null)"/nvidia/cu13/compute-sanitizer/compute-sanitizer \
    2>/dev/null | head -n 1)
if part "3. compute-sanitizer: memcheck, racecheck, synccheck" 120 && { [ $DRY = 1 ] || [ -n "$SAN" ] ||
  ! say "not run: no compute-sanitizer on this machine (PATH, /usr/local/cuda, the Python environment's nvidia packages)"; }; then
  T=$BUILD/tests
  # the dry run: the same commands without it, on the emulator
  [ $DRY = 1 ] && say "dry run: the same test commands run on cuda_emu, without compute-sanitizer${SAN:+ (found: $SAN)}"
  # each: TOOL SECONDS LOG TEST [ARGUMENT]; the summary shows the tool's own
  # verdict (racecheck tracks every shared-memory access: on an H200 it
  # took over 40 s of the kernel test that memcheck runs in 4)
  for job in "memcheck 40 san-memcheck-kernels.log test_cuda_kernels bf16" \
             "memcheck 40 san-memcheck-async.log test_cuda_async bf16" \
             "memcheck 40 san-memcheck-nccl.log test_cuda_nccl_events" \
             "racecheck 80 san-racecheck-kernels.log test_cuda_kernels bf16" \
             "synccheck 40 san-synccheck-kernels.log test_cuda_kernels bf16"; do
    read -r tool secs log t arg <<<"$job"
    if [ $DRY = 1 ]; then
      cmd=(env PLAIT_TEST_CUDA_PLUGIN=cuda_emu "$T/$t")
    else
      # memcheck counts memory errors alone: its report of CUDA calls that
      # returned an error would count the kernel test's deliberate
      # out-of-memory refusal and NCCL's own probing of kernels built for
      # other GPUs (cudaFuncGetAttributes inside ncclCommInitRank); plait
      # checks every CUDA call's status itself, and the tests fail on one
      cmd=("$SAN" --tool "$tool" --error-exitcode 99 --print-limit 20)
      [ "$tool" = memcheck ] && cmd+=(--report-api-errors no)
      cmd+=("$T/$t")
    fi
    # (the emulator's twin of the round trip is its own executable)
    [ "${cmd[0]}" = env ] && [ "$t" = test_cuda_nccl_events ] && cmd[2]=$T/test_cuda_nccl_events_emu
    rc=$(run "$log" "$secs" "${cmd[@]}" ${arg:+"$arg"})
    verdict=$(grep -m1 -E 'ERROR SUMMARY' "$W/$log" | sed 's/^=* *//')
    say "$tool $t${arg:+ $arg}: $(status_word "$rc")${verdict:+; $verdict}"
  done
fi

# ---- 4. GPT-2 124M on the GPU beside PyTorch -------------------------------
if [ $DRY = 1 ]; then
  MODEL=configs/gpt-tiny.ini BSTEPS=(--steps 3 --warmup 1)
  PEER_ARGS=(--n_layer 4 --n_head 4 --n_embd 128 --block 128 --vocab 256 --batch 8 --warmup 1 --steps 2)
else
  MODEL=configs/gpt2-124m.ini BSTEPS=(--steps 10 --warmup 3) PEER_ARGS=(--n_layer 12 --n_head 12 --n_embd 768 --block 1024 --vocab 50304 --batch 16)
fi
# FLOPs per token, 6N + 12LCT (N without the position embedding), from the config
flops_per_token() {
  "$PLAIT" config show "$MODEL" 2>/dev/null | awk -F'[ =;]+' '
    $1 == "n_layer" { L = $2 } $1 == "n_embd" { C = $2 } $1 == "block_size" { T = $2 } $1 == "vocab_size" { V = $2 }
    END { N = V * C + L * (12 * C * C + 13 * C) + 2 * C; printf "%.0f", 6 * N + 12 * L * C * T }'
}
if part "4. bench train $(basename "$MODEL" .ini) on $DEV beside PyTorch" 210; then
  if [ "$MODEL" = configs/gpt2-124m.ini ] && ! ls runs/data/corpus-gpt2/train_*.bin >/dev/null 2>&1; then
    rc=$(run prepare.log 30 "$PLAIT" data prepare data/corpus.txt --tokenizer data/tokenizers/gpt2 --out runs/data/corpus-gpt2 --val-fraction 0.1)
    say "data prepare (GPT-2 tokens of the corpus): $(status_word "$rc")"
  fi
  rc=$(run peaks.log 30 "$PY" scripts/gpu-peaks.py)
  [ $DRY = 1 ] && [ "$rc" != 0 ] && rc=77 # it needs a GPU
  GEMM=$(peer_field peaks.log gemm_bf16_TFLOPs)
  say "measured bf16 GEMM (PyTorch, 8192^3): ${GEMM:-n/a} TFLOP/s ($(status_word "$rc"); datasheet H100 SXM 989)"
  FPT=$(flops_per_token)
  say ""
  say "| run | ms/step | tokens/s | MFU vs 989 | MFU vs measured GEMM | peak GPU memory | status |"
  say "|---|---|---|---|---|---|---|"
  mfu() { awk -v t="$1" -v f="$FPT" -v p="$2" 'BEGIN { if (t == "" || p == "" || p == 0) print "n/a"; else printf "%.1f%%", 100 * t * f / (p * 1e12) }'; }
  plait_bench() { # precision [recompute [deterministic]]
    local p=$1 pp=$1 name=plait-$1 rcmp=${2:-none} det=false extra=""
    [ "$DEV" = sim ] && pp=fp32 # sim computes in fp32 only
    [ "$rcmp" != none ] && name=$name-$rcmp extra=", recompute $rcmp"
    [ "${3:-}" = deterministic ] && det=true name=$name-det extra="$extra, deterministic"
    smi_peak_start "$name"
    rc=$(run "$name.log" 45 "$PLAIT" bench train "$MODEL" "${BSTEPS[@]}" device.plugin="$DEV" run.precision="$pp" \
      model.recompute="$rcmp" run.deterministic="$det")
    local mem ms tps
    mem=$(smi_peak_stop)
    read -r ms tps <<<"$(bench_row "$name.log")"
    # a bf16 run says whether its activations were stored in bf16
    local act
    act=$(grep -q '^# compute .*, activations bf16' "$W/$name.log" && echo bf16 || true)
    local alloc
    alloc=$(alloc_peak "$name.log")
    say "| plait $p$extra$([ "$pp" != "$p" ] && echo " (fp32 on sim)")${act:+ (activations $act)} | ${ms:-} | ${tps:-} | $(mfu "${tps:-}" 989) | $(mfu "${tps:-}" "$GEMM") | $mem (nvidia-smi)${alloc:+, $alloc} | $(status_word "$rc") |"
  }
  peer_bench() { # label args...
    local label=$1 name
    name=torch-$(tr -c 'a-zA-Z0-9\n' '_' <<<"$1")
    shift
    smi_peak_start "$name"
    if [ -f "$PEERS/gpt_gpu_bench.py" ]; then
      gpu_peer_args "${PEER_ARGS[@]}" "$@"
      rc=$(run "$name.log" "$([[ " $* " = *" --compile "* ]] && echo 80 || echo 45)" "$PY" "$PEERS/gpt_gpu_bench.py" "${PEER_RUN[@]}")
    else
      echo "no $PEERS/gpt_gpu_bench.py: pack with scripts/gpu-session.sh --pack" >"$W/$name.log"
      rc=1
    fi
    local mem
    mem=$(smi_peak_stop)
    local tps ms
    tps=$(peer_field "$name.log" tokens_per_s)
    ms=$(peer_field "$name.log" ms_per_step)
    say "| PyTorch $label${PEER_NOTE:-} | ${ms} | ${tps} | $(mfu "$tps" 989) | $(mfu "$tps" "$GEMM") | $mem (nvidia-smi), $(peer_field "$name.log" peak_mem_GB) GB allocated | $(peer_status "$rc" "$name.log") |"
  }
  # each precision beside PyTorch in the same mode, eager; bf16 compiled too
  plait_bench bf16
  plait_bench bf16 selective # GELU's output rebuilt in the backward: less memory, a little more time
  plait_bench bf16 none deterministic # each product the heuristic's first algorithm, never timed
  peer_bench "bf16 eager"
  peer_bench "bf16 compiled" --compile
  plait_bench tf32
  peer_bench "tf32 eager" --fp32
  plait_bench fp32
  peer_bench "fp32 eager (TF32 off)" --fp32 --no_tf32
  say ""
  say "FLOPs/token 6N+12LCT = $FPT; plait's own MFU column (against the CPU's GEMM peak) is in the logs, not here"
fi

# ---- 4b. GPT-2 350M (medium) bf16 beside torch.compile ----------------------
# the same bench with GPT-2 medium's shape (24 layers, 16 heads, width 1024);
# the dry run takes gpt-tiny twice as deep
if [ $DRY = 1 ]; then
  M350=(model.n_layer=8) P350=(--n_layer 8 --n_head 4 --n_embd 128 --block 128 --vocab 256 --batch 8 --warmup 1 --steps 2)
else
  M350=(model.n_layer=24 model.n_head=16 model.n_embd=1024)
  P350=(--n_layer 24 --n_head 16 --n_embd 1024 --block 1024 --vocab 50304 --batch 16)
fi
if part "4b. bench train GPT-2 350M (${M350[*]}) bf16 on $DEV beside torch.compile" 100; then
  pp=bf16
  [ "$DEV" = sim ] && pp=fp32
  say "| run | ms/step | tokens/s | peak GPU memory | status |"
  say "|---|---|---|---|---|"
  smi_peak_start plait-350m
  rc=$(run plait-350m.log 35 "$PLAIT" bench train "$MODEL" "${BSTEPS[@]}" device.plugin="$DEV" run.precision="$pp" \
    "${M350[@]}")
  mem=$(smi_peak_stop)
  read -r ms tps <<<"$(bench_row plait-350m.log)"
  act=$(grep -q '^# compute .*, activations bf16' "$W/plait-350m.log" && echo " (activations bf16)" || true)
  alloc=$(alloc_peak plait-350m.log)
  say "| plait bf16$act | ${ms:-} | ${tps:-} | $mem (nvidia-smi)${alloc:+, $alloc} | $(status_word "$rc") |"
  smi_peak_start torch-350m
  gpu_peer_args "${P350[@]}" --compile
  rc=$(run torch-350m.log 70 "$PY" "$PEERS/gpt_gpu_bench.py" "${PEER_RUN[@]}")
  mem=$(smi_peak_stop)
  say "| PyTorch bf16 compiled$PEER_NOTE | $(peer_field torch-350m.log ms_per_step) | $(peer_field torch-350m.log tokens_per_s) | $mem (nvidia-smi), $(peer_field torch-350m.log peak_mem_GB) GB allocated | $(peer_status "$rc" torch-350m.log) |"
fi

# attn_rate PROFILE LABEL FACTOR "B NH T HS": "ms a call (TFLOP/s)" of a
# [device.cuda] profile's key LABEL (its median call), counting the FLOPs
# FlashAttention counts for a causal mask: forward 2·B·NH·T²·HS a call,
# backward 2.5 times that (FACTOR)
attn_rate() {
  local b h t d
  read -r b h t d <<<"$4"
  awk -F'\t' -v l="$2" -v f="$3" -v b="${b:-0}" -v h="${h:-0}" -v t="${t:-0}" -v d="${d:-0}" '
    $1 == l { us = $6 } END { if (us == "") print "n/a"
      else printf "%.3f ms a call (%.1f TFLOP/s)", us / 1e3, f * 2 * b * h * t * t * d / (us * 1e6) }' "$W/$1"
}
# attn_share PROFILE FWD_LABEL BWD_LABEL "B NH T HS" PEAK_TFLOPS: the share of
# the peak a forward and a backward together reach, as a cluster file's
# [node] bf16_attention_efficiency counts it (docs/plan.md, "Attention's rate")
attn_share() {
  local b h t d
  read -r b h t d <<<"$4"
  awk -F'\t' -v fl="$2" -v bl="$3" -v b="${b:-0}" -v h="${h:-0}" -v t="${t:-0}" -v d="${d:-0}" -v p="$5" '
    $1 == fl { f = $6 } $1 == bl { k = $6 } END { if (f == "" || k == "" || p == 0) print "n/a"
      else printf "%.3f", 3.5 * 2 * b * h * t * t * d / ((f + k) * 1e6) / p }' "$W/$1"
}

# ---- 4c. where a bf16 step's time goes, beside the estimate -----------------
# [device.cuda] profile on a short bench, then scripts/gpu-step-estimate.py
# --measured: each kernel family's time a step, measured beside estimated.
# The dry run profiles cuda_emu on gpt-tiny reshaped so that no two of the
# step's dimensions coincide (the comparison tells products apart by shape).
if [ $DRY = 1 ]; then
  PDEV=cuda_emu PBATCH=5 PSTEPS=(--steps 2 --warmup 1)
  sed -e 's/^n_embd *=.*/n_embd = 96/' -e 's/^n_head *=.*/n_head = 3/' -e 's/^n_layer *=.*/n_layer = 2/' \
    -e 's/^global_batch *=.*/global_batch = 5/' "$MODEL" >"$W/profile-model.ini"
  PMODEL=$W/profile-model.ini
else
  PDEV=$DEV PBATCH=16 PSTEPS=(--steps 4 --warmup 2) PMODEL=$MODEL
fi
if part "4c. where a bf16 step's time goes on $PDEV ($(basename "$PMODEL" .ini)), measured beside estimated" 45; then
  rm -f "$W/profile.tsv"
  # run.mfu_peak given: no GEMM-rate probe after the steps, whose ~0.8 s
  # of products the profile's "other" row would otherwise hold
  rc=$(run plait-profile.log 35 "$PLAIT" bench train "$PMODEL" "${PSTEPS[@]}" device.plugin="$PDEV" run.precision=bf16 \
    run.mfu_peak=989000 "device.$PDEV.profile=$W/profile.tsv")
  say "bench train with [device.$PDEV] profile: $(status_word "$rc"); $(bench_row plait-profile.log | awk '{ print $1 " ms/step (profiled) " $2 " tokens/s" }')"
  if [ -f "$W/profile.tsv" ]; then
    rc=$(run profile-beside.log 10 "$PY" scripts/gpu-step-estimate.py --config "$PMODEL" --batch "$PBATCH" \
      --measured "$W/profile.tsv")
    say ""
    grep -v '^\$\|^(' "$W/profile-beside.log" | tee -a "$SUMMARY"
    say ""
    # the fused attention's rate beside PyTorch's fused attention (part 4's
    # gpu-peaks.py, GPT-2 124M's shape at batch 16), both by attn_rate's count
    read -r aNH aT aHS < <("$PLAIT" config show "$PMODEL" 2>/dev/null | awk -F'[ =;]+' '
      $1 == "n_head" { H = $2 } $1 == "n_embd" { C = $2 } $1 == "block_size" { T = $2 }
      END { print H, T, (H ? C / H : 0) }')
    sdpa="not measured (part 4's peaks.log)"
    if [ -n "$(peer_field peaks.log sdpa_fwd_ms 2>/dev/null)" ]; then
      sdpa="($(peer_field peaks.log attn_shape | awk -F, '{ print "B " $1 " NH " $2 " T " $3 " HS " $4 }'))"
      sdpa+=" forward $(peer_field peaks.log sdpa_fwd_ms) ms ($(peer_field peaks.log sdpa_fwd_TFLOPs) TFLOP/s),"
      sdpa+=" backward $(peer_field peaks.log sdpa_bwd_ms) ms ($(peer_field peaks.log sdpa_bwd_TFLOPs) TFLOP/s)"
    fi
    say "attention, bf16, causal (B $PBATCH NH ${aNH:-?} T ${aT:-?} HS ${aHS:-?}): plait's forward" \
      "$(attn_rate profile.tsv 'fused attention forward (bf16)' 1 "$PBATCH $aNH $aT $aHS")," \
      "backward $(attn_rate profile.tsv 'fused attention backward (bf16)' 2.5 "$PBATCH $aNH $aT $aHS"); together" \
      "$(attn_share profile.tsv 'fused attention forward (bf16)' 'fused attention backward (bf16)' "$PBATCH $aNH $aT $aHS" 989)" \
      "of the 989 TFLOP/s peak;" \
      "PyTorch's SDPA $sdpa"
    say ""
    say "the 12 keys that took longest (label, detail, entry, calls, total ms, median us):"
    say '```'
    awk -F'\t' '!/^#/ && $1 != "label"' "$W/profile.tsv" | head -12 | cut -f1-6 | tee -a "$SUMMARY"
    say '```'
  else
    say "no profile written: see plait-profile.log"
  fi
fi

# ---- 4d. the fused attention at Llama 3's head size and sequence ---------
# The H100 cluster files' [node] bf16_attention_efficiency (docs/plan.md,
# "Attention's rate") is 4c's rate, at GPT-2's head size 64 and 1,024
# tokens; the Llama 3 and Nemotron-4 runs the planner is checked against
# have head size 128 and 4,096 to 8,192 tokens. Two blocks of Llama 3 8B's
# width (32 heads of 128, 8 key/value heads) at 8,192 tokens, one sequence
# a step, profiled, beside PyTorch's SDPA at the same shape; the dry run
# takes head size 128 at 256 tokens on the emulator.
if [ $DRY = 1 ]; then
  read -r AL AC AH AKV AF AT <<<"1 256 2 1 512 256"
else
  read -r AL AC AH AKV AF AT <<<"2 4096 32 8 14336 8192"
fi
if part "4d. fused attention at head size $((AC / AH)), $AT tokens ($AH query, $AKV key/value heads) on $PDEV, beside PyTorch's SDPA" 45; then
  rm -f "$W/profile-llama.tsv"
  rc=$(run plait-profile-llama.log 30 "$PLAIT" bench train configs/llama-small.ini --steps 3 --warmup 1 \
    device.plugin="$PDEV" run.precision=bf16 run.mfu_peak=989000 model.n_layer="$AL" model.n_embd="$AC" \
    model.n_head="$AH" model.n_kv_head="$AKV" model.ffn_hidden="$AF" model.block_size="$AT" data.global_batch=1 \
    "device.$PDEV.profile=$W/profile-llama.tsv")
  say "bench train with [device.$PDEV] profile: $(status_word "$rc"); $(bench_row plait-profile-llama.log | awk '{ print $1 " ms/step (profiled) " $2 " tokens/s" }')"
  ashape="1 $AH $AT $((AC / AH))"
  rc=$(run peaks-llama.log 15 "$PY" scripts/gpu-peaks.py --attn "1,$AH,$AT,$((AC / AH))" --gemm 4096 --iters 10)
  [ $DRY = 1 ] && [ "$rc" != 0 ] && rc=77 # it needs a GPU
  sdpa="not measured ($(status_word "$rc"), peaks-llama.log)"
  if [ -n "$(peer_field peaks-llama.log sdpa_fwd_ms 2>/dev/null)" ]; then
    sdpa="forward $(peer_field peaks-llama.log sdpa_fwd_ms) ms ($(peer_field peaks-llama.log sdpa_fwd_TFLOPs) TFLOP/s),"
    sdpa+=" backward $(peer_field peaks-llama.log sdpa_bwd_ms) ms ($(peer_field peaks-llama.log sdpa_bwd_TFLOPs) TFLOP/s)"
  fi
  if [ -f "$W/profile-llama.tsv" ]; then
    fl='grouped-query attention forward (bf16)' bl='grouped-query attention backward (bf16)'
    say "attention, bf16, causal (B 1 NH $AH T $AT HS $((AC / AH))): plait's forward $(attn_rate profile-llama.tsv "$fl" 1 "$ashape")," \
      "backward $(attn_rate profile-llama.tsv "$bl" 2.5 "$ashape"); the two together" \
      "$(attn_share profile-llama.tsv "$fl" "$bl" "$ashape" 989) of the 989 TFLOP/s peak ([node] bf16_attention_efficiency;" \
      "4c's shape gives the H100 files' 0.167); PyTorch's SDPA $sdpa"
  else
    say "no profile written: see plait-profile-llama.log"
  fi
fi

# ---- 5. bench comm on device memory ----------------------------------------
if part "5. bench comm --mem device ($DEV): nccl 1 rank, tcp staging 2 ranks beside host buffers, pinned cudaMemcpy beside" 60; then
  BCB=("$PLAIT" bench comm --op allreduce --mem device --iters 10 --warmup 3)
  BC=("${BCB[@]}" device.plugin="$DEV")
  if [ "$DEV" = sim ]; then
    size=(--min 1M --max 4M --factor 4) # the dry run: small
    # the real nccl plugin over the CUDA emulator's runtime and one-rank
    # NCCL (preloaded, so the plugin's calls land there), on cuda_emu, with
    # a pretend driver tree of one GPU for the plugin's count
    mkdir -p "$W/driver/proc/driver/nvidia/gpus/0000:40:00.0" "$W/driver/dev"
    echo "Device Minor: 0" >"$W/driver/proc/driver/nvidia/gpus/0000:40:00.0/information"
    : >"$W/driver/dev/nvidia0"
    NCCL=(env LD_PRELOAD="$BUILD/tests/libplait-cudart-emu.so" PLAIT_CUDA_SYSFS_ROOT="$W/driver" "${BCB[@]}" "${size[@]}"
          -n 1 comm.plugin=nccl device.plugin=cuda_emu)
  else
    size=(--min 8 --max 64M --factor 8)
    NCCL=("${BC[@]}" "${size[@]}" -n 1 comm.plugin=nccl)
  fi
  rc=$(run comm-nccl.log 25 "${NCCL[@]}")
  say "nccl$([ "$DEV" = sim ] && echo " over the CUDA emulator (cuda_emu)"), 1 rank: $(status_word "$rc"); #wrong $(sed -n 's/.*Total #wrong *: *//p' "$W/comm-nccl.log"); smallest row (latency floor): $(awk '$1 ~ /^[0-9]+$/ && NF >= 10 { print $1 " B: " $5 " us timed alone, " $10 " us per iteration back to back (nccl-tests time)"; exit }' "$W/comm-nccl.log")"
  rc=$(run comm-tcp.log 30 "${BC[@]}" "${size[@]}" -n 2 comm.plugin=tcp)
  row=$(comm_row comm-tcp.log)
  say "tcp staging, 2 ranks: $(status_word "$rc"); largest row: size time(us) algbw busbw = $(awk '{ print $1, $5, $6, $7 }' <<<"$row")"
  # the same transport on host buffers: what two ranks of one host reach
  # without staging (loopback TCP and the host's reduction), so the share
  # staging keeps of it is staging's own cost
  rc=$(run comm-tcp-host.log 20 "$PLAIT" bench comm --op allreduce --iters 10 --warmup 3 "${size[@]}" -n 2 comm.plugin=tcp)
  hrow=$(comm_row comm-tcp-host.log)
  say "tcp on host buffers, 2 ranks: $(status_word "$rc"); largest row: $(awk '{ print $1, $5, $6, $7 }' <<<"$hrow"); $(awk -v s="$(awk '{ print $6 }' <<<"$row")" -v h="$(awk '{ print $6 }' <<<"$hrow")" 'BEGIN {
    if (s == "" || h == "" || h + 0 <= 0) print "staging / host buffers: n/a"; else printf "staging keeps %.0f%% of the host buffers'"'"' algbw\n", 100 * s / h }')"
  rc=$(run comm-threads.log 20 "${BC[@]}" "${size[@]}" --comm threads --threads 2)
  trow=$(comm_row comm-threads.log)
  say "in-process staging, 2 ranks: $(status_word "$rc"); largest row: $(awk '{ print $1, $5, $6, $7 }' <<<"$trow")"
  if [ -s "$W/peaks.log" ]; then
    h2d=$(peer_field peaks.log h2d_GBps)
    d2h=$(peer_field peaks.log d2h_GBps)
    say "pinned cudaMemcpy 64 MiB (PyTorch, part 4): host->device ${h2d:-n/a} GB/s, device->host ${d2h:-n/a} GB/s"
    awk -v a="$(awk '{ print $6 }' <<<"$row")" -v h="$h2d" -v d="$d2h" 'BEGIN {
      if (a == "" || h == "" || d == "") { print "staging / pinned copy: n/a"; exit }
      m = h < d ? h : d; printf "tcp staging algbw / slower pinned direction = %.0f%% (target: >= 80%%)\n", 100 * a / m }' | tee -a "$SUMMARY"
  fi
fi

# ---- 6. GPT-2 124M, 2 ranks sharing the GPU over tcp staging ---------------
if part "6. $(basename "$MODEL" .ini): 2 ranks sharing the GPU over tcp staging (exposed DP communication)" 45; then
  pp=bf16
  [ "$DEV" = sim ] && pp=fp32
  rc=$(run dp2.log 45 "$PLAIT" bench train "$MODEL" "${BSTEPS[@]}" device.plugin="$DEV" run.precision=$pp parallel.dp=2 comm.plugin=tcp)
  say "dp 2 over tcp ($pp): $(status_word "$rc") (bench train's split: on a device with streams the host's compute time is the time to queue the kernels, and waiting for them can land in comm_ms: read it with the log)"
  awk '/^# +ms\/step/ { getline; printf "ms/step %s, tokens/s %s, compute %s ms, exposed comm %s ms (%.1f%% of the step; target <= 10%%), idle %s ms\n", $1, $2, $4, $5, 100 * $5 / $1, $6; exit }' "$W/dp2.log" | tee -a "$SUMMARY"
fi

# ---- 7. the CPU figures (OPENBLAS_CORETYPE unset) ---------------------------
if part "7. CPU: gpt-small, global batch 16, OPENBLAS_CORETYPE unset, fp32 and bf16, beside PyTorch" 170; then
  T=$NCPU
  CPUB=(--steps 5 --warmup 2)
  [ $DRY = 1 ] && CPUB=(--steps 2 --warmup 1)
  cpu_plait() { # name args...
    local name=$1
    shift
    run "$name.log" 40 env -u OPENBLAS_CORETYPE "$PLAIT" bench train configs/gpt-small.ini "${CPUB[@]}" \
      data.global_batch=16 device.plugin=cpu "$@" >/dev/null
    local ms tps
    read -r ms tps <<<"$(bench_row "$name.log")"
    echo "${tps:-}"
  }
  p16=$(cpu_plait "cpu-1x$T" "run.threads=$T")
  say "plait 1 rank x $T threads: ${p16:-n/a} tokens/s  ($(grep -m1 -E '^# compute' "$W/cpu-1x$T.log" | cut -c3-))"
  p1=$(cpu_plait cpu-1x1 run.threads=1)
  say "plait 1 rank x 1 thread: ${p1:-n/a} tokens/s"
  pr=$(cpu_plait "cpu-${T}x1" "parallel.dp=$T" run.threads=1)
  say "plait $T ranks x 1 thread: ${pr:-n/a} tokens/s"
  S=(--n_layer 8 --n_head 8 --n_embd 256 --block 256 --warmup 2 --steps 5)
  [ $DRY = 1 ] && S=(--n_layer 8 --n_head 8 --n_embd 256 --block 256 --warmup 1 --steps 2)
  # (the dry run's 2 loaded cores need longer for PyTorch's 4096-token steps)
  tt=$([ $DRY = 1 ] && echo 100 || echo 45)
  # bf16 where the CPU has it (AVX512_BF16 or AMX_BF16): plait's bf16
  # activations on oneDNN beside its fp32 and PyTorch's bf16 autocast, the
  # same threads (scripts/bench-cpu-bf16.sh's comparison, one round)
  pb=$(cpu_plait "cpu-1x$T-bf16" "run.threads=$T" run.precision=bf16)
  say "plait 1 rank x $T threads bf16: ${pb:-n/a} tokens/s ($(grep -m1 -oE 'bf16 products on [^,]*|bf16 needs [^;]*|neither oneDNN [^;]*' "$W/cpu-1x$T-bf16.log"))"
  if [ -n "$pb" ] && [ -f "$PEERS/gpt_gpu_bench.py" ]; then
    rc=$(run torch-cpu-bf16.log "$tt" env -u OPENBLAS_CORETYPE OMP_NUM_THREADS="$T" OMP_WAIT_POLICY=PASSIVE "$PY" \
      "$PEERS/gpt_gpu_bench.py" --device cpu "${S[@]}" --vocab 256 --batch 16)
    tb=$(sed -n 's/^RESULT .* tokens_per_s=\([0-9]*\) .*/\1/p' "$W/torch-cpu-bf16.log" | tail -n 1)
    say "PyTorch bf16 autocast 1 process x $T threads: ${tb:-n/a} tokens/s ($(peer_status "$rc" torch-cpu-bf16.log))"
    awk -v a="$pb" -v b="${p16:-}" -v c="${tb:-}" 'function r(x, y) { return (x == "" || y == "" || y == 0) ? "n/a" : sprintf("%.2fx", x / y) }
      BEGIN { printf "bf16 ratios: plait bf16 / plait fp32 = %s (target >= 1.5); plait bf16 / PyTorch bf16 = %s (target >= 1.3)\n", r(a, b), r(a, c) }' | tee -a "$SUMMARY"
  fi
  if [ -f "$PEERS/train_gpt.py" ]; then
    rc=$(run "torch-cpu-1x$T.log" "$tt" env -u OPENBLAS_CORETYPE OMP_WAIT_POLICY=PASSIVE "$PY" "$PEERS/train_gpt.py" "${S[@]}" --batch 16 --threads "$T")
    t16=$(sed -n 's/.*tok_s=\([0-9.]*\).*/\1/p' "$W/torch-cpu-1x$T.log" | tail -n 1)
    say "PyTorch 1 process x $T threads: ${t16:-n/a} tokens/s ($(peer_status "$rc" "torch-cpu-1x$T.log"))"
    rc=$(run "torch-ddp$T.log" "$tt" env -u OPENBLAS_CORETYPE "$PY" "$PEERS/train_gpt.py" "${S[@]}" --batch $((16 / T)) --threads 1 --ddp "$T" --port 29611)
    td=$(sed -n 's/.*tok_s=\([0-9.]*\).*/\1/p' "$W/torch-ddp$T.log" | tail -n 1)
    say "PyTorch DDP $T x 1 thread: ${td:-n/a} tokens/s ($(peer_status "$rc" "torch-ddp$T.log"))"
  else
    say "PyTorch CPU peers not run: no $PEERS/train_gpt.py (pack with scripts/gpu-session.sh --pack)"
  fi
  awk -v a="${p16:-}" -v b="${t16:-}" -v c="${p1:-}" -v d="${pr:-}" -v e="${td:-}" -v t="$T" 'function r(x, y) { return (x == "" || y == "" || y == 0) ? "n/a" : sprintf("%.2fx", x / y) }
    BEGIN { printf "ratios: plait 1x%s / PyTorch %s threads = %s (target >= 1.0); plait 1x%s / 1x1 = %s (target >= 8); plait %sx1 / DDP %s = %s (target >= 1.3)\n", t, t, r(a, b), t, r(a, c), t, t, r(d, e) }' | tee -a "$SUMMARY"
fi

# ---- 8. the rest of the suite, with what time is left ----------------------
if part "8. the rest of the suite at -j8 (what time is left)" 110; then
  if [ $DRY = 1 ]; then
    sel=(-R '^test_(config|device_select)$') # the whole suite takes ~14 min on 2 cores: two tests stand in
  else
    sel=(-LE gpu)
  fi
  rc=$(run suite.log 130 ctest --test-dir "$BUILD" -j8 "${sel[@]}" --timeout 120)
  say "suite: $(status_word "$rc"); $(ctest_counts suite.log)"
  sed -n '/The following tests FAILED/,$p' "$W/suite.log" | grep -E '^\s+[0-9]+ - ' | sed 's/^\s*/    FAILED /' | tee -a "$SUMMARY"
  grep -E '\*\*\*Timeout|Not Run' "$W/suite.log" | sed 's/^ */    /' | tee -a "$SUMMARY"
fi

gpu_finish gputests.log suite.log machine.log
