#!/usr/bin/env bash
# [run] residual = bf16 on cuda_emu (the cuda plugin's own source on the
# CPU emulator; label cuda_emu): the residual stream rounded to bf16 after
# the embedding and each block, the boundaries a micro-batch keeps stored in
# bf16 (docs/recompute.md, "The residual stream in bf16"):
#   gpt and llama, one process and pp 2 interleaved (2 chunks a stage, so
#   every stage sends and receives boundaries): recompute = full gives the
#   losses, gradient norms and final checkpoint of recompute = none, bit for
#   bit, and so does full with [model] recompute_offload = host (the kept
#   boundaries in the emulator's pinned host memory); the losses within
#   1e-3 relative of the float32 residual stream's (the same run with
#   residual = fp32), and in one process not equal to
#   them (at pp 2, one layer a chunk, every boundary crosses stages and the
#   bf16 wire rounds a float32 stream as well); memory.csv's activation
#   bytes less than the float32 stream's in one process of 8 blocks under
#   full recomputation; a float32 run refuses the key naming [run] precision,
#   in train and in config check, and config check passes it on the cpu
#   device, whose kernels widen bf16 too.
# 4 steps of a 2-block model of context 64 (1 of 8 blocks for the memory),
# deterministic mode; recompute = full the first 2 of them, compared with
# none's first 2 and its checkpoint at step 2.
# shellcheck source=tests/e2e/lib.sh
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
export CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
D=(run.steps=4 run.eval_every=0 run.ckpt_every=0 run.progress=off run.deterministic=true run.precision=bf16
  data.micro_batch=1 data.global_batch=2 model.n_layer=2 model.block_size=64 parallel.plugin=hybrid
  device.plugin=cuda_emu comm.plugin=tcp)
LLAMA=(model.arch=llama model.n_kv_head=2 model.ffn_hidden=352)
PP=(parallel.pp=2 parallel.pp.schedule=interleaved parallel.pp.virtual_stages=2)

for arch in gpt llama; do
  A=()
  [ $arch = llama ] && A=("${LLAMA[@]}")
  for lay in one pp; do
    L=()
    [ $lay = pp ] && L=("${PP[@]}")
    # recompute = full the first 2 of none's 4 steps, on its schedule
    # (lr_decay_steps), against none's checkpoint at step 2
    n=${arch}_${lay}_none f=${arch}_${lay}_full
    train "$n" "${D[@]}" "${A[@]}" "${L[@]}" run.residual=bf16 model.recompute=none run.ckpt_every=2
    train "$f" "${D[@]}" "${A[@]}" "${L[@]}" run.residual=bf16 model.recompute=full run.steps=2 optim.lr_decay_steps=4
    train "${arch}_${lay}_fp32" "${D[@]}" "${A[@]}" "${L[@]}" model.recompute=none
    [ "$(column "$f" step | tr '\n' ' ')" = "1 2 " ] || fail "$f did not run steps 1 and 2"
    [ "$(column "$n" loss | head -n 2)" = "$(column "$f" loss)" ] ||
      fail "$arch $lay: losses of recompute = full differ from none under residual = bf16"
    [ "$(column "$n" grad_norm | head -n 2)" = "$(column "$f" grad_norm)" ] ||
      fail "$arch $lay: gradient norms of recompute = full differ from none under residual = bf16"
    "$CKPT_DIFF" "$E2E_WORK/$n/ckpt-00000002" "$(last_ckpt "$f")" --bits ||
      fail "$arch $lay: recompute = full's checkpoint at step 2 differs from none's"
    # the kept boundaries in host memory ([model] recompute_offload): the same bits
    o=${arch}_${lay}_offload
    train "$o" "${D[@]}" "${A[@]}" "${L[@]}" run.residual=bf16 model.recompute=full model.recompute_offload=host \
      run.steps=2 optim.lr_decay_steps=4
    [ "$(column "$f" loss) $(column "$f" grad_norm)" = "$(column "$o" loss) $(column "$o" grad_norm)" ] ||
      fail "$arch $lay: recompute_offload = host changed the losses or gradient norms of recompute = full"
    "$CKPT_DIFF" "$E2E_WORK/$n/ckpt-00000002" "$(last_ckpt "$o")" --bits ||
      fail "$arch $lay: recompute_offload = host's checkpoint at step 2 differs from none's"
    same_losses "${arch}_${lay}_fp32" "${arch}_${lay}_none" 1e-3
    # rounded at all (one process: at pp 2 with a layer a chunk every
    # boundary crosses stages, where the bf16 wire rounds a float32 stream too)
    [ $lay = pp ] || [ "$(column "${arch}_${lay}_fp32" loss)" != "$(column "${arch}_${lay}_none" loss)" ] ||
      fail "$arch $lay: residual = bf16 gave the float32 stream's losses bit for bit (not rounded?)"
  done
  # 8 blocks, one step: the 9 boundaries in bf16 outweigh the two float32
  # buffers the running layer reads and writes
  train "${arch}_mem_bf16" "${D[@]}" "${A[@]}" model.n_layer=8 run.steps=1 run.residual=bf16 model.recompute=full
  train "${arch}_mem_fp32" "${D[@]}" "${A[@]}" model.n_layer=8 run.steps=1 model.recompute=full
  b=$(mem "${arch}_mem_bf16" 0 activation_bytes) f=$(mem "${arch}_mem_fp32" 0 activation_bytes)
  [ "$b" -lt "$f" ] || fail "$arch: activation bytes with residual = bf16 $b, not below the float32 stream's $f"
  echo "$arch one process, 8 blocks, full: activation bytes residual bf16 $b, fp32 $f"
done

out=$("$PLAIT_BIN" train "$CFG" "run.out_dir=$E2E_WORK/refused" "${D[@]}" run.precision=fp32 run.residual=bf16 2>&1) &&
  fail "residual = bf16 on a float32 run was accepted"
grep -q "residual = bf16 needs \[run\] precision = bf16" <<<"$out" || fail "unclear refusal: $out"
out=$("$PLAIT_BIN" config check "$CFG" run.precision=fp32 run.residual=bf16 2>&1) &&
  fail "config check accepted residual = bf16 on a float32 run"
grep -q "residual = bf16 needs \[run\] precision = bf16" <<<"$out" || fail "config check: unclear refusal: $out"
# both devices' kernels widen bf16: config check passes residual = bf16 on
# cuda_emu and on the cpu device (the refusal where a table cannot:
# tests/model/test_bf16_activations.c)
out=$("$PLAIT_BIN" config check "$CFG" "${D[@]}" run.residual=bf16 2>&1) ||
  fail "config check refused residual = bf16 on cuda_emu: $out"
out=$("$PLAIT_BIN" config check "$CFG" "${D[@]}" device.plugin=cpu run.debug_bf16_emulate=true run.residual=bf16 2>&1) ||
  fail "config check refused residual = bf16 on the cpu device: $out"
# and the cpu device trains with it: recompute = full rebuilds none's bits
C=(device.plugin=cpu run.debug_bf16_emulate=true run.residual=bf16 run.steps=2)
train cpu_none "${D[@]}" "${C[@]}" model.recompute=none
train cpu_full "${D[@]}" "${C[@]}" model.recompute=full
[ "$(column cpu_none loss)" = "$(column cpu_full loss)" ] ||
  fail "cpu: losses of recompute = full differ from none under residual = bf16"
echo "residual bf16 OK"
