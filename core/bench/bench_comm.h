/*
 * `plait bench comm`: collective bandwidth and latency in the nccl-tests
 * style, with every result checked.
 *
 * For each size from min to max (times factor) every rank runs `warmup`
 * untimed and `iters` timed iterations of the operation; each iteration is
 * timed on every rank, the iteration's time is the slowest rank's, and the
 * reported time is the median over iterations (the peers' "time" in
 * /work/shared/peers, except that they put no barrier between iterations).
 * Then the same `iters` run back to back with no barrier between them and
 * "loop" is their total / iters on the slowest rank: nccl-tests' time and
 * the peers' "loop" figure, closer to a training step where collectives
 * follow each other. algbw = S / time; busbw = algbw times the
 * nccl-tests factor: allreduce 2(n-1)/n, allgather / reduce_scatter /
 * alltoall (n-1)/n, broadcast and sendrecv 1. S is the nccl-tests size:
 * allreduce, broadcast, sendrecv: the buffer; allgather: the gathered
 * output; reduce_scatter: the input; alltoall: one rank's buffer. Each row
 * (and the CSV's algo column) names the algorithm the operation ran, with
 * AUTO resolved for that size (plait_comm_last_algorithm).
 *
 * #wrong counts, over all ranks and every iteration (warm-up and timed, and
 * the last of the back-to-back loop, the only one whose result survives),
 * the elements that differ from the expected result, computed independently
 * from closed-form inputs (small integers, so every sum is exact). Before
 * each iteration the receive buffer is overwritten with a sentinel, so an
 * operation that does nothing cannot pass on an earlier result. Resetting
 * and checking are not timed: each iteration is timed alone, after a
 * barrier that starts the ranks together once every rank has checked and
 * reset (on 2 cores shared by 4 ranks, a rank still checking would
 * otherwise stretch the others' time).
 *
 * With device buffers (opts.mem), inputs and the reset are copied to the
 * device and every result is copied back before it is checked, all outside
 * the timed region; the operation runs on the device buffers, through the
 * comm plugin when it moves device memory (nccl), else through the core's
 * pinned host staging (docs/transport.md).
 */
#ifndef PLAIT_CORE_BENCH_COMM_H
#define PLAIT_CORE_BENCH_COMM_H

#include <stdio.h>
#include <stdint.h>

#include <plait/coll.h>
#include <plait/device.h>

typedef enum plait_bench_op {
    PLAIT_BENCH_ALLREDUCE = 0,
    PLAIT_BENCH_REDUCE_SCATTER,
    PLAIT_BENCH_ALLGATHER,
    PLAIT_BENCH_BROADCAST,
    PLAIT_BENCH_ALLTOALL,
    PLAIT_BENCH_SENDRECV,
    PLAIT_BENCH_OP_COUNT
} plait_bench_op;

/* Faults the bench injects into itself, to show that the check catches
 * them. */
typedef enum plait_bench_fault {
    PLAIT_BENCH_FAULT_NONE = 0,
    PLAIT_BENCH_FAULT_FLIP,  /* rank 0 flips one element of every result (--corrupt) */
    PLAIT_BENCH_FAULT_STALE  /* every rank skips the operation after the first timed iteration, as a
                                transport that writes nothing would (tests) */
} plait_bench_fault;

/* Where the measured buffers live: host memory, or device memory reached
 * through these functions (the open device: plait/device.h's alloc, free,
 * copy). Device buffers are filled and reset by copies to the device and
 * checked after a copy back, none of it timed. */
typedef struct plait_bench_mem {
    plait_mem_kind kind;    /* PLAIT_MEM_HOST: plain host buffers, the rest unused */
    const char *name;       /* shown in the header ("cuda", "sim") */
    void *(*alloc)(size_t bytes, const char *tag);
    void (*free)(void *ptr);
    plait_status (*copy)(void *dst, const void *src, size_t bytes, plait_copy_dir dir);
} plait_bench_mem;

typedef struct plait_bench_comm_opts {
    plait_bench_op op;
    uint64_t min_bytes, max_bytes;
    double factor;          /* > 1 */
    int warmup, iters;      /* iters >= 1 */
    plait_dtype dtype;
    plait_redop redop;
    plait_coll_algo algo;   /* AUTO = the communicator's [comm] algorithm */
    int root;               /* broadcast */
    const char *transport;  /* shown in the header ("tcp", "threads") */
    FILE *csv;              /* rank 0 appends rows; NULL = none */
    plait_bench_fault fault;
    const plait_bench_mem *mem; /* NULL = host memory */
} plait_bench_comm_opts;

/* "allreduce", ...; parse returns -1 for an unknown name. */
const char *plait_bench_op_name(plait_bench_op op);
int plait_bench_op_parse(const char *name);

/* The options against a job of n ranks (the run checks them too; the
 * launcher calls this once before any rank starts): PLAIT_ERR_INVALID_ARG
 * naming what is wrong. */
plait_status plait_bench_comm_check(const plait_bench_comm_opts *opts, int n);

/* The host memory one rank of a job of n ranks allocates for its buffers
 * (send, receive and the expected result at --max, each a host image of
 * the device's with --mem; the timings). */
uint64_t plait_bench_comm_host_bytes(const plait_bench_comm_opts *opts, int n);

/* Whether `local` ranks (processes, or threads of one process) of a job of
 * n ranks fit this host's memory (runtime/host_memory.h: MemAvailable, a
 * cgroup's limit, ulimit -v per process) with their buffers: checked before
 * any rank starts, because pages a malloc promised are taken only when
 * touched, and a host short of them ends processes (the OOM killer), not
 * the benchmark with an error. PLAIT_ERR_NO_MEMORY naming both sizes and the
 * largest --max that fits; PLAIT_OK when it fits or nothing is known. */
plait_status plait_bench_comm_check_memory(const plait_bench_comm_opts *opts, int n, int local, int threads);
/* Run the benchmark on `comm` (collective: every rank calls it with the
 * same options). Rank 0 prints the table to `out` (may be NULL elsewhere)
 * and rows to opts->csv. *wrong receives the total #wrong over all sizes
 * and ranks (equal on every rank: summed by an all-reduce over `comm`
 * itself, so only as true as the transport); *wrong_here (NULL: not
 * wanted) this rank's own count, which no transport carried (the
 * conformance kit's, which judges the transport). Errors: a failing
 * collective (message from the communicator), PLAIT_ERR_NO_MEMORY for
 * buffers. */
plait_status plait_bench_comm_run(plait_comm *comm, const plait_bench_comm_opts *opts, FILE *out,
                                  uint64_t *wrong, uint64_t *wrong_here);

#endif
