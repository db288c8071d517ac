/*
 * A stand-in for the CUDA runtime and NCCL, for testing the nccl plugin on
 * machines without a GPU. Linked into a test executable, its definitions
 * of cudaXxx / ncclXxx come first in the global symbol scope, so the real
 * plugin (dlopen'ed by the loader) calls these instead of libcudart and
 * libnccl. Ranks are threads of the test; "device memory" is host memory.
 *
 * Ranks may also be processes (`plait train` with the stand-in preloaded,
 * LD_PRELOAD=libplait_mock_gpu.so): a communicator's members meet in a
 * shared segment named by the unique id (mock_clique.c), each process runs
 * its own streams, and data crosses through the segment. "Device" pointers
 * of the sim test device (host memory at address + 2^62) are translated
 * back to host addresses. Environment: PLAIT_MOCK_GPUS (devices reported,
 * default 4), PLAIT_MOCK_NCCL_REGION_MB (largest message, default 64),
 * PLAIT_MOCK_NCCL_STATS (see below), PLAIT_MOCK_NCCL_CORRUPT=K (the K-th
 * f32 allreduce of at least 1024 elements -- a gradient, not control data --
 * of each process gets 1.0 added to its first result element: proves a
 * test comparing results can fail).
 *
 * Semantics kept strict on purpose, so plugin mistakes show:
 *   - operations run on a stream in order, asynchronously: a collective
 *     runs once every rank of its communicator issued it and it reached the
 *     head of each rank's stream; sends and receives match per peer pair in
 *     issue order, and (as in NCCL) a send and its receive only run
 *     concurrently when their own group allows it -- so launching "send,
 *     then receive" to a peer doing the same outside one group deadlocks;
 *   - nonblocking communicators answer ncclInProgress, and a launch is only
 *     on the stream once ncclCommGetAsyncError says ncclSuccess;
 *   - misuse is counted (mock_gpu_misuse): an event recorded on a stream
 *     before an in-progress launch reached it, an NCCL call on a
 *     communicator with another thread's device current, a call on a
 *     communicator that is still in progress, destroyed or aborted, a freed
 *     buffer or destroyed stream with work pending.
 */
#ifndef PLAIT_TEST_MOCK_GPU_H
#define PLAIT_TEST_MOCK_GPU_H

#include <nccl.h>

/* Forget everything (communicators, streams, counters) and present
 * `devices` GPUs. Call between tests, with no thread inside the mock. */
void mock_gpu_reset(int devices);
/* cudaGetDeviceCount fails as without a driver. */
void mock_gpu_no_driver(void);
/* Nonblocking launches and inits stay in progress for this many polls. */
void mock_gpu_set_inprogress_polls(int polls);
/* Every live communicator of `device` (-1: all) reports `err` from now on,
 * with ncclGetLastError saying `text`. */
void mock_gpu_inject_error(int device, ncclResult_t err, const char *text);
/* Counters. */
int mock_gpu_misuse(void);
const char *mock_gpu_misuse_text(void); /* the first misuse seen */
int mock_gpu_aborts(void);              /* ncclCommAbort calls */
int mock_gpu_live_comms(void);          /* communicators neither destroyed nor aborted */
int mock_gpu_launches(void);            /* groups handed to streams */
size_t mock_gpu_live_allocations(void); /* cudaMalloc(Async) not yet freed */

/* NCCL operations that completed in this process, and their bytes (the
 * message size as nccl-tests counts it: count x element size, times the
 * ranks for allgather's output and reduce-scatter's input). With
 * PLAIT_MOCK_NCCL_STATS=DIR set, every process also writes them to
 * DIR/nccl-stats.<pid> ("allreduce CALLS BYTES" lines) whenever one of its
 * communicators is destroyed or aborted, and at exit. */
enum { MOCK_OP_ALLREDUCE, MOCK_OP_REDUCE, MOCK_OP_BROADCAST, MOCK_OP_ALLGATHER, MOCK_OP_REDUCE_SCATTER,
       MOCK_OP_SEND, MOCK_OP_RECV, MOCK_OP_COUNT };
unsigned long long mock_gpu_op_calls(int op);
unsigned long long mock_gpu_op_bytes(int op);

#endif
