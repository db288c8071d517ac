#!/usr/bin/env bash
# The figures the features' open acceptance points need from a GPU machine,
# in one call of about 400 s beside scripts/gpu-session.sh's: logs and one
# summary.md written to $OUT. docs/gpu.md ("Measurements for the features")
# says what each part is for. Nothing outside this checkout is needed, here
# or there, and nothing is downloaded.
#
#   scripts/gpu-session.sh --pack [BUILD]   here, after building (writes .gpu/;
#                                           scripts/gpu-issues.sh --pack does the same)
#   bash .gpu/on-device.sh bash scripts/gpu-issues.sh
#                                           there, with .gpu/ carried beside the checkout
#   scripts/gpu-issues.sh --dry-run         here: every part on the cpu, sim and emulated
#                                           devices with tiny sizes
#
# The parts, by value, each with a time budget enforced by timeout (a hang
# costs its budget, never the call): 1. a ~1B Llama in bf16 beside the same
# model in transformers, bf16 autocast, torch.compile'd; 2. the optimizer
# state offloaded to host memory: the largest GPT that needs it (chosen by
# plait config check from the GPU's memory and the host's MemAvailable), and
# a smaller one with offload none and host; 3. checkpoints of a ~1B GPT at
# dp 4 with ZeRO-3 on ranks sharing the GPU (scripts/bench-ckpt.sh), beside
# the planner's predicted save; 4. context parallelism on the CPU: gpt-small
# at block 8192 over cp 1, 2 and 4 with the ring's transfers from a trace;
# 5. [run] bind auto against none on the CPU, 4 ranks x 4 threads and 16 x 1.
# A part that would not fit in the time left is listed "not run", as is a
# part whose number PLAIT_GPU_ISSUES_SKIP names (e.g. "4 5");
# PLAIT_GPU_ISSUES_BUDGET (400) is the call's seconds.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
# shellcheck source=scripts/gpu-lib.sh
. "$root/scripts/gpu-lib.sh"

gpu_init gpu-issues 400 "$@"
# the dry run's devices: the emulated GPU for the Llama's bf16 kernels, sim
# (a device whose memory is not host memory) for offload and checkpoints
if [ $DRY = 1 ]; then LDEV=cuda_emu SDEV=sim; else LDEV=$DEV SDEV=$DEV; fi
LABEL=
[ $DRY = 1 ] && LABEL="CPU/emulator figure, "
MEMAVAIL_MIB=$(awk '/^MemAvailable:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
if [ $DRY = 1 ]; then
  GPU_MIB=$MEMAVAIL_MIB # sim's memory is this host's
else
  GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -n 1)
fi

gpu_started "plait GPU measurements for the features ($([ $DRY = 1 ] && echo "DRY RUN: cpu, sim and cuda_emu; every figure a CPU/emulator figure" || echo "device $DEV"))"
gpu_machine_line
say "memory: device ${GPU_MIB:-?} MiB$([ $DRY = 1 ] && echo " (sim: this host's MemAvailable)"), host MemAvailable $MEMAVAIL_MIB MiB"

# the GPT-2 tokens of the corpus, for the runs whose vocabulary is GPT-2's
prepare_tokens() {
  ls runs/data/corpus-gpt2/train_*.bin >/dev/null 2>&1 && return 0
  local rc
  rc=$(run prepare.log 30 "$PLAIT" data prepare data/corpus.txt --tokenizer data/tokenizers/gpt2 --out runs/data/corpus-gpt2 --val-fraction 0.1)
  say "data prepare (GPT-2 tokens of the corpus): $(status_word "$rc")"
}
GPT2_DATA=(data.path='runs/data/corpus-gpt2/train_*.bin' data.val_path='runs/data/corpus-gpt2/val_*.bin' data.tokenizer=data/tokenizers/gpt2)
# mfu TOKENS_PER_S FLOPS_PER_TOKEN PEAK_TFLOPS
mfu() { awk -v t="$1" -v f="$2" -v p="$3" 'BEGIN { if (t == "" || f == "" || p == "" || p == 0) print "n/a"; else printf "%.1f%%", 100 * t * f / (p * 1e12) }'; }
# 6N + 12LCT a token of a GPT (tied head, learned positions left out of N)
gpt_fpt() { awk -v L="$1" -v C="$2" -v T="$3" -v V="$4" 'BEGIN { N = V * C + L * (12 * C * C + 13 * C) + 2 * C; printf "%.0f", 6 * N + 12 * L * C * T }'; }
gpt_params() { awk -v L="$1" -v C="$2" -v V="$3" 'BEGIN { printf "%.0f", V * C + L * (12 * C * C + 13 * C) + 2 * C }'; }

# ---- 1. a ~1B Llama in bf16 beside torch.compile ---------------------------
# Llama 3.2-1B's depth and width with grouped-query attention, SwiGLU 5632
# wide, block 2048, GPT-2's vocabulary (the repository's tokenizer)
if [ $DRY = 1 ]; then
  read -r LL LC LH LKV LF LT LV LB <<<"2 128 4 2 352 128 256 4"
  LSTEPS=(--steps 2 --warmup 1) LDATA=()
else
  read -r LL LC LH LKV LF LT LV LB <<<"16 2048 16 8 5632 2048 50304 8"
  LSTEPS=(--steps 10 --warmup 3) LDATA=("${GPT2_DATA[@]}")
fi
if part "1. Llama (L $LL, C $LC, H $LH/$LKV, F $LF, T $LT, V $LV, batch $LB) bf16 on $LDEV beside transformers + torch.compile" 220; then
  [ ${#LDATA[@]} -gt 0 ] && prepare_tokens
  # 6N + 12LCT, N: the untied embedding and head, each layer's q, k|v (the
  # kv heads' share), o, SwiGLU's three matrices and two norms, the final norm
  LFPT=$(awk -v L="$LL" -v C="$LC" -v H="$LH" -v K="$LKV" -v F="$LF" -v T="$LT" -v V="$LV" 'BEGIN {
    N = 2 * V * C + L * (2 * C * C + 2 * C * C * K / H + 3 * C * F + 2 * C) + C; printf "%.0f %.0f", 6 * N + 12 * L * C * T, N }')
  read -r LFPT LN <<<"$LFPT"
  say "parameters $LN, FLOPs/token 6N+12LCT = $LFPT; MFU against the H100/H200 datasheet's dense bf16 989 TFLOP/s"
  say ""
  say "| run | ms/step | tokens/s | MFU vs 989 | peak GPU memory | status |"
  say "|---|---|---|---|---|---|"
  smi_peak_start llama-plait
  # an H200 ran plait's 13 steps past 60 s, and the peer's import, compile
  # and steps in 80 s
  rc=$(run llama-plait.log 110 "$PLAIT" bench train configs/llama-small.ini "${LSTEPS[@]}" device.plugin="$LDEV" run.precision=bf16 \
    model.n_layer="$LL" model.n_embd="$LC" model.n_head="$LH" model.n_kv_head="$LKV" model.ffn_hidden="$LF" \
    model.block_size="$LT" model.vocab_size="$LV" data.global_batch="$LB" "${LDATA[@]}")
  mem=$(smi_peak_stop)
  read -r ms tps <<<"$(bench_row llama-plait.log)"
  act=
  grep -q '^# compute .*, activations bf16' "$W/llama-plait.log" && act=", activations bf16"
  say "| plait bf16$act | ${ms:-} | ${tps:-} | $(mfu "${tps:-}" "$LFPT" 989) | $mem (nvidia-smi)$(alloc_peak llama-plait.log | sed 's/^./, &/') | $(status_word "$rc") |"
  smi_peak_start llama-torch
  gpu_peer_args --device cuda --bf16 --compile --n_layer "$LL" --n_embd "$LC" --n_head "$LH" --n_kv_head "$LKV" \
    --ffn_hidden "$LF" --block "$LT" --vocab "$LV" --batch "$LB" --warmup "${LSTEPS[3]}" --steps "${LSTEPS[1]}"
  rc=$(run llama-torch.log 110 "$PY" "$PEERS/train_llama.py" "${PEER_RUN[@]}")
  mem=$(smi_peak_stop)
  ttps=$(peer_field llama-torch.log tok_s)
  tpk=$(peer_field llama-torch.log peak_mem_GB)
  say "| transformers LlamaForCausalLM, bf16 autocast, torch.compile$PEER_NOTE | $(peer_field llama-torch.log ms_step_median) | ${ttps} | $(mfu "$ttps" "$LFPT" 989) | $mem (nvidia-smi)${tpk:+, $tpk GB allocated} | $(peer_status "$rc" llama-torch.log) |"
  awk -v a="${tps:-}" -v b="${ttps:-}" 'BEGIN { if (a != "" && b != "" && b > 0) printf "plait / torch.compile tokens/s = %.2f (target >= 1.0)\n", a / b }' | tee -a "$SUMMARY"
fi

# ---- 2. the optimizer state offloaded to host memory ------------------------
# config_mem LOG ARGS...: "DEVICE_MIB HOST_MIB" of rank 0 from plait config
# check's tables (the device total, the offloaded host memory)
config_mem() {
  local log=$1
  shift
  run "$log" 20 "$PLAIT" config check "$@" run.memory_check=false >/dev/null
  awk '/^predicted memory per rank/ { t = 1; next } t && $1 == "0" { d = $NF; t = 0 }
       /^offloaded optimizer state per rank/ { o = 1; next } o && $1 == "0" { h = $2; o = 0 }
       END { print (d == "" ? "?" : d), (h == "" ? 0 : h) }' "$W/$log"
}
if part "2. optimizer state offloaded to host memory ([optim] offload = host) on $SDEV" 90; then
  prepare_tokens
  # the search: GPTs of width 4096 (32 heads), 64-token sequences, one a
  # step (training state, not activations), ever deeper; the largest whose
  # device memory without offload exceeds the device's and with offload
  # fits it, its host memory within MemAvailable
  say "the search (plait config check, device.plugin=$SDEV; the device's ${GPU_MIB} MiB, the host's MemAvailable $MEMAVAIL_MIB MiB):"
  say ""
  say "| n_layer | parameters | device MiB, offload none | device MiB, offload host | host MiB, offload host | needs offload and fits |"
  say "|---|---|---|---|---|---|"
  CHOSEN=
  for L in 32 40 48 56 64; do
    S=(configs/gpt2-124m.ini model.n_layer="$L" model.n_embd=4096 model.n_head=32 model.block_size=64 data.global_batch=1
       device.plugin="$SDEV" run.precision=bf16)
    [ "$SDEV" = sim ] && S+=(run.precision=fp32)
    read -r dnone _ <<<"$(config_mem "check-$L-none.log" "${S[@]}" optim.offload=none)"
    read -r dhost hhost <<<"$(config_mem "check-$L-host.log" "${S[@]}" optim.offload=host)"
    fits=$(awk -v n="$dnone" -v d="$dhost" -v h="$hhost" -v g="$GPU_MIB" -v m="$MEMAVAIL_MIB" \
      'BEGIN { print (n + 0 > g + 0 && d + 0 <= g + 0 && h + 0 <= m + 0) ? "yes" : "no" }')
    [ "$fits" = yes ] && CHOSEN=$L
    say "| $L | $(gpt_params "$L" 4096 50304) | $dnone | $dhost | $hhost | $fits |"
  done
  if [ -n "$CHOSEN" ] && [ $DRY = 0 ]; then
    say "chosen: n_layer $CHOSEN, the deepest that needs offload on this GPU and fits this host with it"
    smi_peak_start offload-large
    rc=$(run offload-large.log 60 "$PLAIT" bench train configs/gpt2-124m.ini --steps 2 --warmup 1 device.plugin="$SDEV" \
      run.precision=bf16 model.n_layer="$CHOSEN" model.n_embd=4096 model.n_head=32 model.block_size=64 data.global_batch=1 \
      optim.offload=host)
    mem=$(smi_peak_stop)
    read -r ms tps <<<"$(bench_row offload-large.log)"
    fpt=$(gpt_fpt "$CHOSEN" 4096 64 50304)
    say "offload host, n_layer $CHOSEN: $(status_word "$rc"); ${ms:-n/a} ms/step, ${tps:-n/a} tokens/s, $(awk -v t="${tps:-0}" -v f="$fpt" 'BEGIN { printf "%.1f", t * f / 1e12 }') TFLOP/s (6N+12LCT), GPU memory $mem"
  else
    say "chosen: none: no depth in the search needs offload on this device and fits this host with it (offload = host keeps 16 bytes a parameter in host memory, the moments and the page-locked mirrors of the gradients and parameters, against 8 it saves on the device: docs/benchmarks.md)"
  fi
  # the cost of offload: one smaller model, none against host, the timed
  # steps traced (the wait for the copies back is the before_forward
  # hook's span, the summary's dp column)
  if [ $DRY = 1 ]; then
    OM=(configs/gpt-tiny.ini) OS=(--steps 2 --warmup 1) OTR=2:3 OP=fp32
  else
    OM=(configs/gpt2-124m.ini model.n_layer=24 model.n_embd=2048 model.n_head=16 model.block_size=1024 data.global_batch=8)
    OS=(--steps 4 --warmup 2) OTR=3:6 OP=bf16
  fi
  say ""
  say "the cost of offload: $(basename "${OM[0]}" .ini)${OM[1]:+ with ${OM[*]:1}}, $OP$([ $DRY = 1 ] && echo "; ${LABEL%, }s")"
  say ""
  say "| offload | ms/step | tokens/s | TFLOP/s (6N+12LCT) | waiting for copies back (trace's dp / step) | the host's update | status |"
  say "|---|---|---|---|---|---|---|"
  for m in none host; do
    rc=$(run "offload-$m.log" 40 "$PLAIT" bench train "${OM[@]}" "${OS[@]}" device.plugin="$SDEV" run.precision=$OP \
      optim.offload=$m run.trace=$OTR run.out_dir="$W/offload-$m")
    read -r ms tps <<<"$(bench_row "offload-$m.log")"
    read -r L C T V < <("$PLAIT" config show "${OM[0]}" 2>/dev/null | awk -F'[ =;]+' '
      $1 == "n_layer" { L = $2 } $1 == "n_embd" { C = $2 } $1 == "block_size" { T = $2 } $1 == "vocab_size" { V = $2 }
      END { print L, C, T, V }')
    for o in "${OM[@]:1}"; do
      case $o in model.n_layer=*) L=${o#*=} ;; model.n_embd=*) C=${o#*=} ;; model.block_size=*) T=${o#*=} ;; esac
    done
    tf=$(awk -v t="${tps:-0}" -v f="$(gpt_fpt "$L" "$C" "$T" "$V")" 'BEGIN { printf "%.3f", t * f / 1e12 }')
    share=n/a
    if [ -f "$W/offload-$m/trace.json" ]; then
      "$PLAIT" trace summary "$W/offload-$m/trace.json" >"$W/offload-$m.summary" 2>&1
      share=$(awk '$1 == "0" && NF >= 10 { printf "%.1f%% (%s of %s ms)", 100 * $5 / $3, $5, $3 }' "$W/offload-$m.summary")
    fi
    upd=$(grep -m1 -o 'offload: [0-9]* step(s) updated in host memory.*' "$W/offload-$m.log" | sed 's/offload: //')
    say "| $m | ${ms:-} | ${tps:-} | $tf | ${share:-n/a} | ${upd:--} | $(status_word "$rc") |"
  done
  say ""
  say "beside: ZeRO-Offload (Ren et al., USENIX ATC 2021): 40 TFLOP/s on one V100 for a 10B-parameter model, against 30 TFLOP/s of PyTorch alone for 1.4B, the largest that fit without offload"
fi

# ---- 3. checkpoints of a ~1B GPT, dp 4 ranks with ZeRO-3 sharing the GPU -----
if [ $DRY = 1 ]; then
  read -r CL CC CH CV <<<"2 64 4 256"
  CKA="device.plugin=$SDEV comm.plugin=tcp"
else
  read -r CL CC CH CV <<<"16 2048 16 50304"
  # ranks sharing one GPU talk over tcp (staging through host memory)
  CKA="device.plugin=$SDEV comm.plugin=tcp run.precision=bf16"
fi
if part "3. checkpoints: GPT (L $CL, C $CC, V $CV: $(gpt_params "$CL" "$CC" "$CV") parameters) at dp 4, ZeRO-3, on $SDEV" 150; then
  CK=(tests/e2e/tiny.ini model.n_layer="$CL" model.n_embd="$CC" model.n_head="$CH" model.vocab_size="$CV" model.block_size=32
      data.global_batch=4 data.micro_batch=1 parallel.plugin=hybrid parallel.dp=4 optim.plugin=zero3)
  # shellcheck disable=SC2206
  CK+=($CKA)
  for f in sharded gathered; do
    run "ckpt-plan-$f.log" 20 "$PLAIT" config check "${CK[@]}" run.ckpt_format=$f run.memory_check=false >/dev/null
  done
  say "predicted (plait config check): $(grep -h -m1 -E '^ +sharded .*save' "$W/ckpt-plan-sharded.log" | sed 's/^ *//; s/ *(chosen)//')"
  say "predicted (plait config check): $(grep -h -m1 -E '^ +gathered .*save' "$W/ckpt-plan-gathered.log" | sed 's/^ *//; s/ *(chosen)//')"
  say ""
  # one format a run, so that a slow one costs only its own share
  CKROWS=()
  for f in sharded async gathered; do
    rc=$(run "ckpt-$f.log" 50 env PLAIT_BIN="$PLAIT" BENCH_OUT="$W/ckpt" BENCH_FORMATS=$f BENCH_DROP_CKPT=1 \
      BENCH_ARGS="model.n_head=$CH $CKA comm.timeout=120" bash scripts/bench-ckpt.sh "$CL" "$CC" "$CV")
    # a run stopped by its timeout leaves its checkpoints (10.9 GB gathered)
    find "$W/ckpt" -type d -name 'ckpt-*' -prune -exec rm -rf {} + 2>/dev/null
    row=$(grep -E '^\| (sharded|gathered)' "$W/ckpt-$f.log")
    CKROWS+=("${row:-| $f | $(status_word "$rc") | | | | |}")
  done
  say "| ckpt_format | save (rank 0's span) | lost to the save | load | rank 0 peak RSS before / after the save / run | load avg |"
  say "|---|---|---|---|---|---|"
  for r in "${CKROWS[@]}"; do say "$r"; done
  say "(${LABEL}save: rank 0's checkpoint span at step 2; lost: the step after it less the step before; load: the resume's start-up less the first run's; scripts/bench-ckpt.sh)"
fi

# ---- 4. CPU: context parallelism's ring at long sequences -------------------
# cp ranks x threads fill the cores; the trace's p2p spans on the cp
# communicator are the ring's transfers from post to completion, its `wait
# cp` spans the time the attention left exposed (docs/trace.md)
if [ $DRY = 1 ]; then CPT=512 CPS=(--steps 2 --warmup 1); else CPT=8192 CPS=(--steps 2 --warmup 1); fi
if part "4. CPU: gpt-small at block $CPT over cp 1, 2, 4 ($NCPU cores), the ring's transfers from a trace" 50; then
  say "| cp x threads | ms/step | tokens/s | peak RSS (max over ranks) | ring transfers (rank 0, a step): in flight, exposed, hidden | status |"
  say "|---|---|---|---|---|---|"
  # cp 1 last: the ring's figures first where the part's time runs short
  for cp in 2 4 1; do
    th=$((NCPU / cp))
    if [ "$th" -lt 1 ]; then
      say "| $cp x - | | | | | not run: $cp ranks would oversubscribe $NCPU cores |"
      continue
    fi
    rc=$(run "cp$cp.log" 40 "$PLAIT" bench train configs/gpt-small.ini "${CPS[@]}" device.plugin=cpu parallel.cp=$cp \
      run.threads=$th model.block_size=$CPT data.global_batch=1 run.trace=2:3 run.out_dir="$W/cp$cp")
    read -r ms tps <<<"$(bench_row "cp$cp.log")"
    rss=$(awk '/^# +ms\/step/ { getline; print $NF " MB"; exit }' "$W/cp$cp.log")
    inflight=-
    if [ "$cp" -gt 1 ] && [ -f "$W/cp$cp/trace.json" ]; then
      # the union of rank 0's cp transfer spans over its traced steps
      inflight=$("$PY" - "$W/cp$cp/trace.json" <<'PY' 2>>"$W/cp$cp.log"
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
steps = [e["dur"] for e in ev if e.get("pid") == 1 and e.get("cat") == "step"]
iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev
            if e.get("pid") == 1 and e.get("cat") == "p2p" and e.get("args", {}).get("comm") == "cp")
tot, end = 0.0, -1e30
for a, b in iv:
    if b > end:
        tot += b - max(a, end)
        end = b
n = max(len(steps), 1)
waits = sum(e["dur"] for e in ev if e.get("pid") == 1 and e.get("cat") == "wait" and e.get("args", {}).get("comm") == "cp")
hidden = 100 * (1 - min(waits, tot) / tot) if tot > 0 else 0
print(f"{tot / n / 1e3:.1f} ms in flight of a {sum(steps) / n / 1e3:.1f} ms step, {len(iv) // n} transfers; "
      f"{waits / n / 1e3:.1f} ms exposed (waits); {hidden:.0f}% hidden")
PY
      )
    fi
    say "| $cp x $th | ${ms:-} | ${tps:-} | ${rss:-} | ${inflight:-n/a} | $(status_word "$rc") |"
  done
  say "(${LABEL}hidden: the share of the transfers' time in flight that no \`wait cp\` span of rank 0 covers, the part the attention of the block before hid)"
fi

# ---- 5. CPU: [run] bind auto against none -----------------------------------
if part "5. CPU: gpt-small bench train, [run] bind auto against none, 2 interleaved rounds" 50; then
  if [ $DRY = 1 ]; then
    LAYOUTS="2x1 1x2" BS=(--steps 2 --warmup 1 model.n_layer=2 model.block_size=64 data.global_batch=4)
  else
    LAYOUTS="4x4 16x1" BS=(--steps 3 --warmup 1 data.global_batch=16)
  fi
  say "| ranks x threads | bind | round 1 tokens/s | round 2 tokens/s | affinity (round 1) |"
  say "|---|---|---|---|---|"
  declare -A TPS
  for r in 1 2; do
    for lay in $LAYOUTS; do
      for b in auto none; do
        rc=$(run "bind-$lay-$b-$r.log" 25 "$PLAIT" bench train configs/gpt-small.ini "${BS[@]}" device.plugin=cpu \
          parallel.dp="${lay%x*}" run.threads="${lay#*x}" run.bind=$b)
        read -r _ tps <<<"$(bench_row "bind-$lay-$b-$r.log")"
        TPS[$lay-$b-$r]=${tps:-$(status_word "$rc")}
      done
    done
  done
  for lay in $LAYOUTS; do
    for b in auto none; do
      # each rank's line: "bind: rank N ...: cpus C ...[; affinity now cpus A]"
      aff=$(awk 'match($0, /bind: rank [0-9]+/) { r = substr($0, RSTART + 11, RLENGTH - 11)
             if (match($0, /affinity now cpus [^ ;,]+/)) c = substr($0, RSTART + 18, RLENGTH - 18)
             else if (match($0, /: cpus [^ ;,]+/)) c = substr($0, RSTART + 7, RLENGTH - 7) " unbound"
             print r ":" c }' "$W/bind-$lay-$b-1.log" | sort -n | paste -sd' ' -)
      say "| $lay | $b | ${TPS[$lay-$b-1]} | ${TPS[$lay-$b-2]} | ${aff:-no bind line (unbound)} |"
    done
  done
  [ -n "$LABEL" ] && say "(${LABEL%, }s)"
fi

# what comes back is at most 16 MiB a file: the archive holds the logs, and
# the traces only where small
find "$W" -name trace.json -size +2M -delete
gpu_finish llama-plait.log llama-torch.log
