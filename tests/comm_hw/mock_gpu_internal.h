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

enum { OP_GROUP, OP_COPY, OP_FREE, OP_WAIT };
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
    struct CUstream_st *wait_s; /* OP_WAIT: until wait_s's first wait_upto operations ran */
    size_t wait_upto;
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

/* A member's view of its clique: the shared segment (mock_clique.c), mapped
 * by every member, whether a thread of this process or another process. */
struct mclique {
    struct shm_clique *sh;
    size_t map_bytes;
    int n;
    mclique *all_next;
};

struct ncclComm {
    mclique *cl;
    int rank, n, dev, blocking;
    ncclResult_t state;
    int polls;
    int aborted, destroyed, finalizing;
    double next_liveness; /* when to look at the peers' processes again */
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

typedef struct created_id created_id;

typedef struct mock_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int ndev, no_driver, inprog_polls;
    int misuse, aborts, launches;
    char misuse_text[256];
    uint64_t next_clique;
    mclique *cliques;
    created_id *created;      /* unique ids made here whose members have not all joined */
    uint64_t op_calls[MOCK_OP_COUNT], op_bytes[MOCK_OP_COUNT];
    uint64_t corrupt_at;      /* PLAIT_MOCK_NCCL_CORRUPT: that large f32 allreduce gets a wrong result */
    uint64_t corrupt_seen;    /* large f32 allreduces so far */
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

/* ---- mock_clique.c: cliques across threads and processes ---------------- */

/* Where the host reaches "device" memory: the sim test device hands out
 * host memory at address + 2^62 (tests/device/sim_device.c); the stand-in
 * translates those back (a test-only coupling); anything else is taken as
 * host memory (the stand-in's own cudaMalloc). */
void *mock_host_ptr(const void *p);
/* A fresh unique id: a shared segment members open through
 * /proc/<pid>/fd/<fd> (it disappears with its last user, never a file). */
ncclResult_t clique_new_id(ncclUniqueId *id);
/* Join `c` (rank, n, dev set) to the clique of `id`; g.mu held. On failure
 * `why` says why. */
ncclResult_t clique_join(struct ncclComm *c, const ncclUniqueId *id, char *why, size_t cap);
/* Members that joined so far. */
int clique_joined(const struct ncclComm *c);
/* Mark `c` aborted (peers see a remote error) or left, and unmap. */
void clique_leave(struct ncclComm *c, int aborted);
/* A peer aborted or its process died without leaving: 1 and `why`. */
int clique_peer_failed(struct ncclComm *c, char *why, size_t cap);
/* One step of a collective or send/receive at the head of its stream: 1
 * when something changed (x->done once finished). */
int clique_step(msub *x);
/* Close the unique ids made here whose members have all joined (or all,
 * with `all`). */
void clique_sweep_created(int all);
/* Unmap a clique (reset). */
void clique_free(mclique *cl);
/* Write the op counters to $PLAIT_MOCK_NCCL_STATS/nccl-stats.<pid>. */
void mock_write_stats(void);

#endif
