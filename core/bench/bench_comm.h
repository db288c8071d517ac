/*
 * `plait bench comm`: collective bandwidth and latency in the nccl-tests
 * style, with every result checked.
 *
 * For each size from min to max (times factor) every rank runs `warmup`
 * untimed and `iters` timed iterations of the operation; each iteration is
 * timed on every rank, the iteration's time is the slowest rank's, and the
 * reported time is the median over iterations (the convention of the peers
 * in /work/shared/peers). algbw = S / time; busbw = algbw times the
 * nccl-tests factor: allreduce 2(n-1)/n, allgather / reduce_scatter /
 * alltoall (n-1)/n, broadcast and sendrecv 1. S is the nccl-tests size:
 * allreduce, broadcast, sendrecv: the buffer; allgather: the gathered
 * output; reduce_scatter: the input; alltoall: one rank's buffer.
 *
 * #wrong counts, over all ranks, the elements that differ from the expected
 * result, computed independently from closed-form inputs (small integers,
 * so every sum is exact). Every warm-up iteration is checked, each after
 * the receive buffer was overwritten with a sentinel (an operation that
 * does nothing cannot pass), and so is the last timed iteration; the timed
 * iterations run back to back like the peers' loops (on 2 cores shared by 4
 * ranks, a rank checking between them would steal a core from the others).
 */
#ifndef PLAIT_CORE_BENCH_COMM_H
#define PLAIT_CORE_BENCH_COMM_H

#include <stdio.h>
#include <stdint.h>

#include <plait/coll.h>

typedef enum plait_bench_op {
    PLAIT_BENCH_ALLREDUCE = 0,
    PLAIT_BENCH_REDUCE_SCATTER,
    PLAIT_BENCH_ALLGATHER,
    PLAIT_BENCH_BROADCAST,
    PLAIT_BENCH_ALLTOALL,
    PLAIT_BENCH_SENDRECV,
    PLAIT_BENCH_OP_COUNT
} plait_bench_op;

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
    int corrupt;            /* tests only: rank 0 flips one element of every checked result */
} plait_bench_comm_opts;

/* "allreduce", ...; parse returns -1 for an unknown name. */
const char *plait_bench_op_name(plait_bench_op op);
int plait_bench_op_parse(const char *name);

/* Run the benchmark on `comm` (collective: every rank calls it with the
 * same options). Rank 0 prints the table to `out` (may be NULL elsewhere)
 * and rows to opts->csv. *wrong receives the total #wrong over all sizes
 * (equal on every rank). Errors: a failing collective (message from the
 * communicator), PLAIT_ERR_NO_MEMORY for buffers. */
plait_status plait_bench_comm_run(plait_comm *comm, const plait_bench_comm_opts *opts, FILE *out,
                                  uint64_t *wrong);

#endif
