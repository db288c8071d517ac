#!/usr/bin/env bash
# plait bench comm as the README runs it: 4 ranks over TCP, 4K to 64M, every
# row checked (#wrong 0, exit 0) and AUTO's algorithm switching where the
# code says (3 timed iterations after 1 warm-up, not the default 20 after 5:
# each size's result is checked at every iteration, and the megabyte sizes'
# iterations were where the test spent its time); [comm] algorithm reaching
# the collectives; the CSV holds the table's rows; a wrong result (--corrupt
# flips one element per iteration) makes #wrong count every iteration and
# the exit status 1. Option and configuration errors, and buffers larger
# than the host can give, are said once, by the launcher, before any rank
# starts.
source "$(dirname "$0")/lib.sh"
P=$PLAIT_BIN
out=$E2E_WORK/bench.out

# rows SIZE COUNT ... #WRONG of a table: lines whose first field is a number
rows() { awk '$1 ~ /^[0-9]+$/' "$1"; }

$P bench comm -n 4 --op allreduce --min 4K --max 64M --iters 3 --warmup 1 >"$out" 2>&1 || fail "bench comm failed: $(tail -n 5 "$out")"
[ "$(rows "$out" | wc -l)" = 15 ] || fail "expected 15 rows (4K..64M): $(cat "$out")"
[ "$(rows "$out" | awk '{ print $1 }' | tail -n 1)" = 67108864 ] || fail "the last row is not 64M: $(cat "$out")"
rows "$out" | awk '$8 != 0 { print; bad = 1 } END { exit bad }' || fail "rows with #wrong: $(cat "$out")"
rows "$out" | awk '!($10 > 0) { print; bad = 1 } END { exit bad }' || fail "rows without a loop time: $(cat "$out")"
grep -q "^# Total #wrong         : 0$" "$out" || fail "no total: $(cat "$out")"
# [comm] algorithm = auto on 4 ranks: the tree below 16 MiB, rhd from there (coll_exec.c's crossover)
rows "$out" | awk '($1 < 16777216 && $9 != "tree") || ($1 >= 16777216 && $9 != "rhd") { print; bad = 1 } END { exit bad }' ||
  fail "AUTO did not switch from tree to rhd at 16 MiB: $(cat "$out")"

# --csv: a header and the table's rows, field for field
csv=$E2E_WORK/bench.csv
$P bench comm -n 2 --op allreduce --min 4K --max 64K --iters 3 --warmup 1 --csv "$csv" >"$out" 2>&1 ||
  fail "bench comm --csv failed: $(tail -n 5 "$out")"
head -n 1 "$csv" | grep -q "^op,ranks,transport,algo,dtype,redop,size_bytes,count,time_us,time_min_us,algbw_GBps,busbw_GBps,wrong,loop_us$" ||
  fail "CSV header: $(head -n 1 "$csv")"
[ "$(tail -n +2 "$csv" | wc -l)" = 5 ] || fail "expected 5 CSV rows: $(cat "$csv")"
diff <(rows "$out" | awk '{ print $1, $2, $3, $4, $8, $9 }') \
  <(tail -n +2 "$csv" | awk -F, '$1 == "allreduce" && $2 == 2 && $3 == "tcp" && $14 > 0 { print $7, $8, $5, $6, $13, $4 }') ||
  fail "the CSV rows differ from the table's"

# waiting callers that sleep at once (no polling first) get the same results
$P bench comm -n 4 --op allreduce --min 4K --max 1M --factor 16 --iters 5 comm.tcp.spin_us=0 >"$out" 2>&1 ||
  fail "bench comm comm.tcp.spin_us=0 failed: $(tail -n 5 "$out")"
[ "$(rows "$out" | wc -l)" = 3 ] && grep -q "^# Total #wrong         : 0$" "$out" ||
  fail "comm.tcp.spin_us=0: $(cat "$out")"
if $P bench comm -n 2 --op allreduce --min 4K --max 4K comm.tcp.spin_us=-1 >"$out" 2>&1; then
  fail "comm.tcp.spin_us=-1 was accepted"
fi
grep -q "spin_us" "$out" || fail "the spin_us error does not name the key: $(cat "$out")"
[ "$(grep -c "spin_us" "$out")" = 1 ] || fail "the spin_us error was printed by every rank: $(cat "$out")"
# options that do not fit the job: said once, before any rank starts
for bad in "--op broadcast --root 5|--root 5 is not a rank of this job of 2" \
           "--op sendrecv --min 8M --max 4K|min <= max (--min 8388608, --max 4096)" \
           "--op allreduce --min 3 --max 3|--max 3 bytes holds no f32 element (4 bytes each)" \
           "--op allgather --min 4 --max 4|--max 4 bytes holds no f32 element per rank" \
           "--op allreduce --min 4K --max 1T|of host buffers (send, receive and the expected result) on each of 2 ranks here" \
           "--op allreduce --min 4K --max 8K --factor 1.0000000000000002|--factor 1.0000000000000002 takes 3.12e+15 steps from --min 4096 to --max 8192 bytes"; do
  if $P bench comm -n 2 ${bad%%|*} >"$out" 2>&1; then fail "bench comm ${bad%%|*} was accepted"; fi
  [ "$(grep -cF -- "${bad#*|}" "$out")" = 1 ] && grep -q "no rank was started" "$out" && ! grep -q "tcp: rank" "$out" ||
    fail "bench comm ${bad%%|*}: not said once before the ranks started: $(cat "$out")"
done

# buffers larger than the host can give (pages a malloc promised would be
# taken only when touched, by the OOM killer): refused before they are
# touched, in one process of thread ranks too, with a --max that fits
if $P bench comm --comm threads --threads 2 --op allreduce --min 4K --max 1T >"$out" 2>&1; then
  fail "bench comm --threads 2 --max 1T was accepted"
fi
grep -q "needs 3072.0 GiB of host buffers .* on each of 2 ranks here, 6144.0 GiB in all, and this host can still give .*; give --max [0-9]*[KMG] or less" "$out" ||
  fail "bench comm --threads 2 --max 1T: $(cat "$out")"

# [comm] algorithm from the command line and from the environment reaches the collectives
small="bench comm -n 2 --op allreduce --min 4K --max 64K --factor 4 --iters 1 --warmup 0"
$P $small comm.algorithm=rhd >"$out" 2>&1 || fail "bench comm comm.algorithm=rhd: $(cat "$out")"
[ "$(rows "$out" | awk '{ print $9 }' | sort -u)" = rhd ] || fail "comm.algorithm=rhd did not run rhd: $(cat "$out")"
grep -q "algorithm \[comm\] algorithm = rhd" "$out" || fail "the header does not name [comm] algorithm: $(cat "$out")"
PLAIT_COMM_ALGORITHM=ring $P $small >"$out" 2>&1 || fail "bench comm PLAIT_COMM_ALGORITHM=ring: $(cat "$out")"
[ "$(rows "$out" | awk '{ print $9 }' | sort -u)" = ring ] || fail "PLAIT_COMM_ALGORITHM=ring did not run ring: $(cat "$out")"

# a wrong result: every checked result counted (1 warm-up + 3 timed + the loop's last per size), exit 1, in the CSV too
if $P bench comm -n 2 --op allreduce --min 4K --max 16K --iters 3 --warmup 1 --csv "$csv" --corrupt >"$out" 2>&1; then
  fail "bench comm exited 0 with wrong results: $(cat "$out")"
fi
[ "$(rows "$out" | awk '{ print $8 }' | sort -u)" = 5 ] || fail "#wrong is not 5 on every row: $(cat "$out")"
grep -q "plait bench comm: 15 wrong elements" "$out" || fail "no wrong-elements message: $(cat "$out")"
[ "$(tail -n +2 "$csv" | awk -F, '{ print $13 }' | sort -u)" = 5 ] || fail "CSV #wrong: $(cat "$csv")"
echo "bench comm OK"
