# shellcheck shell=bash
# The checks of what a bf16 run sends between ranks (docs/parallelism.md,
# "What crosses ranks, and in which type"), shared by test_bf16_wire.sh
# (tcp on cuda_emu) and tests/comm_hw/test_nccl_bf16.sh (nccl over the
# stand-in): sourced after tests/e2e/lib.sh, on the runs NAME_fp32 and
# NAME_bf16 of each layout and one_bf16 (one process).

# wire NAME CLASS: the bytes of one traced step over all ranks, of the tp
# group's activation collectives (act), its cross-entropy statistics (stat)
# or the pipeline's sends and receives (pp)
wire() { python3 "$PLAIT_SOURCE_DIR/tests/device/wire_bytes.py" "$E2E_WORK/$1/trace.json" "$2"; }

# wire_halved WHERE NAME...: each layout's bf16 run sends half the fp32
# run's bytes of tp activations (act) or pipeline transfers (pp2: pp), the
# cross-entropy's statistics the same bytes (float32 in both)
wire_halved() {
  local where=$1 name c f b classes
  shift
  for name in "$@"; do
    grep -q 'precision bf16' "$E2E_WORK/${name}_bf16.out" || fail "$name: the bf16 run did not run in bf16"
    classes=(act stat)
    [ "$name" = pp2 ] && classes=(pp)
    for c in "${classes[@]}"; do
      f=$(wire "${name}_fp32" "$c") b=$(wire "${name}_bf16" "$c")
      [ "$f" -gt 0 ] || fail "$name: the fp32 run's trace has no $c bytes"
      if [ "$c" = stat ]; then
        [ "$b" = "$f" ] || fail "$name: the cross-entropy statistics took $b bytes in bf16, $f in fp32 (float32 in both)"
      else
        [ $((2 * b)) = "$f" ] || fail "$name$where: $c bytes of a step: bf16 $b, fp32 $f (want half)"
      fi
      echo "$name$where: $c bytes of a step: fp32 $f, bf16 $b"
    done
  done
}

# near_one_process WHERE NAME...: each layout's bf16 losses within the
# documented bf16 layout tolerance (1e-3 relative) of one bf16 process's
near_one_process() {
  local where=$1 n
  shift
  for n in "$@"; do
    same_losses one_bf16 "${n}_bf16" 1e-3
    echo "$n bf16$where: losses $(column "${n}_bf16" loss | tr '\n' ' ')(one process: $(column one_bf16 loss | tr '\n' ' '))"
  done
}
