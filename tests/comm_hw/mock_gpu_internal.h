/*
 * Internals shared by the CUDA/NCCL stand-in's files (mock_gpu.c: state,
 * control and the execution of queued work; mock_cuda.c; mock_nccl.c).
 * Everything is guarded by g.mu unless it is thread-local.
 */
#ifndef PLAIT_TEST_MOCK_GPU_INTERNAL_H
#define PLAIT_TEST_MOCK_GPU_INTERNAL_H

#include <cuda_runtime.h>
#include <nccl.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "mock_gpu.h"

#define MAXR 16

typedef struct mop mop;
typedef struct msub msub;
typedef struct mclique mclique;

enum { OP_GROUP, OP_COPY, OP_FREE };
enum { SUB_COLL, SUB_SEND, SUB_RECV };
enum { C_ALLREDUCE, C_REDUCE, C_BCAST, C_ALLGATHER, C_RS };

struct msub {
    int kind, ckind;
    struct ncclComm *comm;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dt;
    ncclRedOp_t op;
    int root, peer;
    uint64_t seq;
    int done;
    mop *owner;
};

struct mop {
    int kind, done;
    struct CUstream_st *stream;
    msub *subs[2 * MAXR + 64];
    int nsub;
    void *dst;
    const void *src;
    size_t n;
    mop *all_next;
};

struct CUstream_st {
    int dev;
    mop **ops;
    size_t n, cap, head;
    int destroyed;
    struct CUstream_st *all_next;
};

struct CUevent_st {
    int dev;
    struct CUstream_st *s;
    size_t upto;
    int recorded, destroyed;
    struct CUevent_st *all_next;
};

struct mclique {
    uint64_t id;
    int n, joined;
    struct ncclComm *members[MAXR];
};

struct ncclComm {
    mclique *cl;
    int rank, n, dev, blocking;
    ncclResult_t state;
    int polls;
    int aborted, destroyed, finalizing;
    ncclResult_t async_err;
    char last[256];
    uint64_t coll_seq, send_seq[MAXR], recv_seq[MAXR];
    mop *pending;
    struct ncclComm *all_next;
};

typedef struct malloc_rec {
    struct malloc_rec *next;
    void *p;
} malloc_rec;

typedef struct mock_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ndev, no_driver, inprog_polls;
    int misuse, aborts, launches;
    char misuse_text[256];
    uint64_t next_clique;
    mclique *cliques[256];
    int ncl;
    struct ncclComm *comms;
    struct CUstream_st *streams;
    struct CUevent_st *events;
    mop *ops;
    malloc_rec *allocs;
    size_t n_allocs;
    char last[256];
} mock_state;
extern mock_state g;


extern __thread int tl_dev;
extern __thread cudaError_t tl_err;
extern __thread int tl_depth;
extern __thread mop *tl_gop;

#define LOCK() pthread_mutex_lock(&g.mu)
#define UNLOCK() pthread_mutex_unlock(&g.mu)

/* Count (and report the first) misuse by the code under test. */
void misuse(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Run whatever queued work can run now. */
void pump(void);
/* Append `o` to stream `s`; a new operation (listed for reset). */
void place(struct CUstream_st *s, mop *o);
mop *new_op(int kind);
/* Execute one operation if it can; 1 when something changed. */
int run_op(mop *o);
/* Record a cudaMalloc'ed pointer (freed at reset if the caller does not). */
void track(void *p);

#endif
