# Sourced by the tests that run on a GPU or on the CPU emulator
# (test_cuda_profile.sh, test_cuda_trace.sh), after tests/e2e/lib.sh:
# cuda_device MODE USAGE sets DEV to the device plugin of MODE: emu, the
# cuda plugin's own source on the emulator (cuda_emu); gpu, the cuda plugin,
# skipping the test (exit 77) where it is not built or finds no CUDA device.
cuda_device() {
  if [ "$1" = emu ]; then
    DEV=cuda_emu
    return
  fi
  [ "$1" = gpu ] || fail "usage: $2"
  local line
  line=$("$PLAIT_BIN" plugins 2>&1 | grep -A1 -E '^device +cuda ' || true)
  [ -n "$line" ] || { echo "SKIP: the cuda device plugin is not built"; exit 77; }
  case "$line" in *" available "*) ;; *) echo "SKIP: no CUDA device: $(sed -n 2p <<<"$line" | sed 's/^ *-> *//')"; exit 77 ;; esac
  DEV=cuda
}
