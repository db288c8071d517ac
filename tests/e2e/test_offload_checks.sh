#!/usr/bin/env bash
# [optim] offload's checks before step 1 (plugins/optim/README.md):
#  - `plait config check` counts the offloaded state apart (host memory and
#    disk per rank, not in the device's total; with offload = host the
#    page-locked gradient and parameter mirrors too) and refuses an offload_path
#    that is missing, or whose free space cannot hold the ranks' files,
#    naming the path, its free space and what is needed;
#  - `plait plan` shows the offloaded bytes apart from the rank's memory,
#    and with offload_params weighs ZeRO-3 at dp 1;
#  - `plait train` refuses offload = nvme without offload_path and a missing
#    path before step 1, and offload_params with another optimizer than
#    zero3, offload_params without offload, bf16 moments with offload and
#    offload = host on the cpu device (config check too) before it makes the
#    run's directory, and warns (naming the path and its free space) about a tmpfs;
#  - the optimizer refuses a PLAIT_OFFLOAD_IO it does not know, and a
#    PLAIT_OFFLOAD_ISA it does not know or this CPU lacks.
source "$PLAIT_SOURCE_DIR/tests/e2e/lib.sh"
CFG=$PLAIT_SOURCE_DIR/configs/gpt-tiny.ini
mkdir -p "$E2E_WORK/disk"
N=(optim.offload=nvme "optim.offload_path=$E2E_WORK/disk")

out=$("$PLAIT_BIN" config check "$CFG" "${N[@]}" 2>&1) || fail "config check refused a layout that fits: $out"
grep -q '^offloaded optimizer state per rank' <<<"$out" || fail "config check shows no offloaded state: $out"
[ "$(grep -A2 '^predicted memory' <<<"$out" | tail -n 1 | awk '{print $4}')" = 0.0 ] ||
  fail "the device's optimizer column is not 0 with offload: $out"

# offload = host counts, beside the moments (the nvme file's bytes), the
# page-locked mirrors of the gradients and parameters its copies fill: as
# many bytes again. It is for a device with memory of its own (the cpu
# device refuses it, below): counted for the cuda device's ranks, as the cpu
# device's where no GPU opens
host_mib=$("$PLAIT_BIN" config check "$CFG" optim.offload=host device.plugin=cuda 2>&1 | grep -A2 '^offloaded' |
  awk 'NR == 3 {print $2}')
disk_mib=$(grep -A2 '^offloaded' <<<"$out" | awk 'NR == 3 {print $3}')
awk -v h="$host_mib" -v d="$disk_mib" 'BEGIN { exit !(d > 0 && h >= 2 * d - 0.1 && h <= 2 * d + 0.1) }' ||
  fail "offload = host counts $host_mib MiB of host memory; the moments are $disk_mib MiB, the mirrors as much again"

# missing directory
if out=$("$PLAIT_BIN" config check "$CFG" optim.offload=nvme "optim.offload_path=$E2E_WORK/nope" 2>&1); then
  fail "config check accepted a missing offload_path: $out"
fi
grep -qF "offload_path = $E2E_WORK/nope: No such file or directory" <<<"$out" || fail "unclear refusal: $out"

# a state larger than the disk's free space (a 77B-parameter GPT: 576 GiB of moments)
BIG=(model.n_embd=8192 model.n_head=64 model.n_layer=96)
if out=$("$PLAIT_BIN" config check "$CFG" "${N[@]}" "${BIG[@]}" 2>&1); then
  fail "config check accepted a state larger than the disk: $out"
fi
grep -qE "offload_path = $E2E_WORK/disk has [0-9.]+ [KMGT]?i?B free and the optimizer state of the 1 rank\(s\) on this host needs 576\.[0-9] GiB there" <<<"$out" ||
  fail "the disk refusal does not name the path, its free space and the need: $out"

# plait plan: the offloaded bytes apart
out=$("$PLAIT_BIN" plan "$CFG" --ranks 1 --explain dp1 "${N[@]}" 2>&1) || fail "plan --explain failed: $out"
grep -qE '^  optimizer +0\.00 GiB' <<<"$out" || fail "plan counts the offloaded state on the rank: $out"
grep -qE '^  offloaded +[0-9.]+ GiB of host memory, [0-9.]+ GiB on disk' <<<"$out" || fail "plan shows no offloaded state: $out"

# with offload_params the search weighs ZeRO-3 at dp 1 (no longer plain Adam)
# and sets aside the optimizers that refuse it; without, dp 1 is adam alone
out=$("$PLAIT_BIN" plan "$CFG" --ranks 1 --axes optim "${N[@]}" optim.offload_params=true 2>&1) ||
  fail "plan with offload_params failed: $out"
grep -qE '^ +1 +dp1 tp1 pp1 .* zero3 ' <<<"$out" || fail "plan does not weigh zero3 at dp 1 with offload_params: $out"
grep -qE '^ +[0-9]+ +dp1 .* adam ' <<<"$out" && fail "plan keeps adam, which refuses offload_params: $out"
out=$("$PLAIT_BIN" plan "$CFG" --ranks 1 --axes optim 2>&1) || fail "plan failed: $out"
grep -qE '^ +[0-9]+ +dp1 .* zero3 ' <<<"$out" && fail "plan weighs zero3 at dp 1 without offload: $out"

S=(run.steps=1 run.eval_every=0 run.progress=off)
train_refused no_path "offload = nvme needs [optim] offload_path" "${S[@]}" optim.offload=nvme \
  "run.out_dir=$E2E_WORK/no_path" run.memory_check=false
train_refused missing_path "offload_path = $E2E_WORK/nope" "${S[@]}" optim.offload=nvme \
  "optim.offload_path=$E2E_WORK/nope" "run.out_dir=$E2E_WORK/missing_path"
# (a run of one process runs the launcher's preflight itself, before its
# directory; the optimizer's own refusal is test_zero_equiv's)
train_refused params_adam "offload_params = true: the optimizer (adam) keeps every parameter whole" "${S[@]}" \
  "${N[@]}" optim.offload_params=true "run.out_dir=$E2E_WORK/params_adam"
[ -e "$E2E_WORK/params_adam" ] && fail "params_adam: the refused run made its directory"
if out=$("$PLAIT_BIN" config check "$CFG" "${N[@]}" optim.offload_params=true 2>&1); then
  fail "config check accepted offload_params with adam: $out"
fi
grep -qF "offload_params = true: the optimizer (adam) keeps every parameter whole" <<<"$out" ||
  fail "config check's refusal of offload_params with adam: $out"
# the core's rules between [optim]'s keys, and the optimizer's check of
# offload = host where the device's memory is the host's, refused by config
# check and by train before the run's directory (the plugins would refuse
# them too, each rank alone): offload_params without offload, bf16 moments
# with offload, offload = host on the cpu device
for bad in "params_none|offload_params = true needs [optim] offload = host or nvme|optim.plugin=zero3 optim.offload_params=true" \
  "moments_host|moments = bf16 with [optim] offload = host: the offloaded state is float32|optim.moments=bf16 optim.offload=host" \
  "host_on_cpu|command line 'optim.offload=host': [optim] offload = host: this device's memory is host memory already, so adam keeps its state there|optim.offload=host"; do
  IFS='|' read -r name want keys <<<"$bad"
  # shellcheck disable=SC2086 # the keys split into arguments
  if out=$("$PLAIT_BIN" config check "$CFG" $keys 2>&1); then fail "config check accepted $keys: $out"; fi
  grep -qF "$want" <<<"$out" || fail "config check's refusal of $keys: $out"
  # shellcheck disable=SC2086
  train_refused "$name" "$want" "${S[@]}" $keys "run.out_dir=$E2E_WORK/$name"
  [ -e "$E2E_WORK/$name" ] && fail "$name: the refused run made its directory"
done
# the way the file is read and written: a value PLAIT_OFFLOAD_IO does not know
PLAIT_OFFLOAD_IO=ring train_refused io_bogus "PLAIT_OFFLOAD_IO = ring: not a way to read and write offload_path; use auto" \
  "${S[@]}" "${N[@]}" "run.out_dir=$E2E_WORK/io_bogus"
# the host AdamW's vectors: a name it does not know
PLAIT_OFFLOAD_ISA=neon train_refused isa_bogus "PLAIT_OFFLOAD_ISA = neon: not an instruction set of the host's AdamW" \
  "${S[@]}" "${N[@]}" "run.out_dir=$E2E_WORK/isa_bogus"
# the plugin checks too, where the launcher's check is switched off
train_refused missing_path_plugin "offload_path = $E2E_WORK/nope: No such file or directory" "${S[@]}" \
  optim.offload=nvme "optim.offload_path=$E2E_WORK/nope" "run.out_dir=$E2E_WORK/missing_path_plugin" \
  run.memory_check=false

if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
  train shm "${S[@]}" optim.offload=nvme optim.offload_path=/dev/shm
  grep -qE 'offload_path = /dev/shm is a tmpfs: .* \([0-9.]+ GiB free there\)' "$E2E_WORK/shm.out" ||
    fail "no tmpfs warning naming the path and its free space: $(tail -n 5 "$E2E_WORK/shm.out")"
else
  echo "no writable tmpfs at /dev/shm: its warning is not checked here"
fi
echo "offload checks: ok"
