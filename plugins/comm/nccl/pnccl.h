/*
 * The NCCL comm plugin's internals (README.md describes the behaviour).
 *
 * One pnccl_comm per plait communicator, each owning its own NCCL
 * communicator (the world's from ncclCommInitRankConfig over the world
 * bootstrap; every derived one from a fresh unique id through the child's
 * bootstrap), a CUDA stream for operations issued without one, and a pool of
 * requests, each with a CUDA event. Communicators of one world are listed in
 * a pnccl_world so aborting the world aborts everything derived from it.
 *
 * Concurrency: `mu` serialises every NCCL and CUDA call on a communicator,
 * so abort() (any thread) never frees the NCCL communicator under a call in
 * flight. Nobody sleeps holding `mu`: waits drop it between polls. Lock
 * order: world->mu before comm->mu; never the other way.
 *
 * Requests: a collective is handed to NCCL when posted (its event is
 * recorded on the stream right after). Point-to-point sends and receives are
 * queued and handed to NCCL together, as one ncclGroupStart/End, at the next
 * test/wait/collective on the communicator: NCCL's send and receive kernels
 * block until their peer's counterpart runs, so a rank that posts "send to
 * 1, receive from 1" must not launch them one after the other. With
 * nonblocking communicators (the default) NCCL may answer ncclInProgress
 * before the work is on the stream; the event is recorded only once
 * ncclCommGetAsyncError says the communicator left that state.
 */
#ifndef PLAIT_PNCCL_H
#define PLAIT_PNCCL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include <plait/plait.h>

#include "nccl_map.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the plait nccl plugin needs NCCL 2.14 or later (ncclCommInitRankConfig, nonblocking communicators)"
#endif

#define PNCCL_COMPONENT "nccl"

/* [comm.nccl] and the job's timeout. */
typedef struct pnccl_settings {
    int device;        /* -1: local rank modulo the visible devices */
    int nonblocking;   /* NCCL nonblocking communicators */
    int poll_us;       /* longest sleep between two checks in wait() */
    int spin_us;       /* wait() checks without sleeping this long first */
    char net[32];      /* ncclConfig_t.netName; "" = NCCL's choice */
    double timeout_s;  /* [comm] timeout: init, launches, finalize */
} pnccl_settings;

enum { PNCCL_SEND = 1, PNCCL_RECV = 2, PNCCL_COLL = 3, PNCCL_SYNC = 4 };
enum {
    PNCCL_QUEUED = 0,   /* p2p: not yet handed to NCCL */
    PNCCL_LAUNCHING,    /* in a group NCCL answered ncclInProgress for */
    PNCCL_LAUNCHED,     /* on the stream; its event is recorded */
    PNCCL_DONE          /* finished (status says how) */
};

typedef struct pnccl_comm pnccl_comm;

typedef struct pnccl_req {
    struct pnccl_req *qnext;         /* queued / launching list, or the free list */
    struct pnccl_req *prev, *next;   /* the communicator's active list */
    int kind, state;
    plait_status status;
    cudaEvent_t ev;                  /* created once, reused with the request */
    cudaStream_t stream;
    void *buf;                       /* p2p */
    size_t bytes;                    /* p2p: posted length; collectives: bytes of the result */
    int peer;                        /* p2p: rank in the communicator */
    uint32_t tag;
    void *tmp;                       /* staging buffer freed at release (no cudaMallocAsync) */
    char what[96];                   /* "allreduce of 1024 f32", for messages */
    char err[640];
} pnccl_req;

typedef struct pnccl_world {
    pthread_mutex_t mu;
    pnccl_comm *comms;               /* every live communicator of this world */
    int refs;
} pnccl_world;

struct pnccl_comm {
    const plait_host *host;
    pnccl_world *world;
    pnccl_comm *wnext;               /* world->comms */
    pnccl_settings cfg;
    ncclComm_t nc;                   /* NULL once aborted */
    cudaStream_t stream;             /* for operations without a stream */
    int device;
    int async_alloc;                 /* the device has stream-ordered allocation (cudaMallocAsync) */
    int rank, size;
    uint32_t id;                     /* the bootstrap's comm id (0 = world) */
    int is_world;                    /* made by init (aborting it aborts the whole world) */
    int *world_of;                   /* member -> world rank */

    pthread_mutex_t mu;
    int aborted;                     /* abort() was called or a fatal error was seen */
    plait_status fail_status;        /* how later operations fail */
    char why[512];
    pnccl_req *queued, *queued_tail; /* p2p waiting for launch, in posting order */
    pnccl_req *launching;            /* group handed to NCCL, still in progress */
    pnccl_req *active;               /* every request not yet released */
    pnccl_req *free_reqs;
};

/* nccl_plugin.c */
extern const plait_host *pnccl_host;

/* nccl_ops.c: the operations expect mu NOT held. */
plait_status pnccl_isend(pnccl_comm *c, const plait_buffer *buf, int peer, uint32_t tag, pnccl_req **out);
plait_status pnccl_irecv(pnccl_comm *c, const plait_buffer *buf, int peer, uint32_t tag, pnccl_req **out);
plait_status pnccl_test(pnccl_comm *c, pnccl_req *r, int *done, size_t *bytes);
plait_status pnccl_wait(pnccl_comm *c, pnccl_req *r, double timeout_s, size_t *bytes);
/* Abort one communicator (NCCL abort, pending requests fail with `status`
 * and `why`). Idempotent. */
void pnccl_abort_comm(pnccl_comm *c, plait_status status, const char *why);
/* Release a communicator's requests and NCCL communicator (finalize with
 * the timeout when healthy, else abort). */
void pnccl_release(pnccl_comm *c);
/* Settle a call that may have answered ncclInProgress: poll the
 * communicator's state until it leaves it or `deadline` (host->now()) passes,
 * sleeping between polls with mu released. mu held on entry and return.
 * Returns the final NCCL result (ncclInProgress at the deadline); -1 if the
 * communicator was aborted meanwhile. */
int pnccl_settle(pnccl_comm *c, ncclResult_t r, double deadline);
/* Sleep about `us` microseconds (never a busy wait). */
void pnccl_sleep_us(double us);

/* Shared by nccl_ops.c and nccl_coll.c; mu held, the device current. */
/* A pooled request (its event created once), listed as active; NULL with
 * the error set. */
pnccl_req *pnccl_req_get(pnccl_comm *c, int kind);
void pnccl_req_put(pnccl_comm *c, pnccl_req *r);
/* "send of 4096 bytes (tag 7) to rank 1" / "allreduce of 1024 f32 ...". */
void pnccl_req_describe(const pnccl_comm *c, const pnccl_req *r, char *buf, size_t cap);
/* Record the event of every request of a `qnext` list now on its stream. */
void pnccl_record_events(pnccl_comm *c, pnccl_req *list);
/* Hand queued sends/receives to NCCL as one group; with `block`, settle an
 * in-progress launch first (the communicator must be idle before the next
 * NCCL call). PLAIT_OK unless the communicator failed. */
plait_status pnccl_launch_queued(pnccl_comm *c, int block);
/* NCCL's asynchronous state; takes the communicator down on an error. */
plait_status pnccl_check_async(pnccl_comm *c);
/* Take the communicator down: fail unfinished requests (crediting finished
 * kernels when `credit_completed`), then ncclCommAbort. Idempotent. */
void pnccl_go_down(pnccl_comm *c, plait_status st, const char *why, int credit_completed);

extern const plait_native_coll_ops pnccl_coll_ops;
plait_status pnccl_stream_create(void *comm, plait_stream **stream);
plait_status pnccl_stream_sync(void *comm, plait_stream *stream, double timeout_s);
void pnccl_stream_destroy(void *comm, plait_stream *stream);
/* plait_comm_ops.wait_event (ABI 1.4): the stream waits on the GPU. */
plait_status pnccl_wait_event(void *comm, plait_stream *stream, void *native_event);
/* ABI 1.5: record a device event after what was posted on the stream. */
plait_status pnccl_record_event(void *comm, plait_stream *stream, void *native_event);

/* "rank 3" or "rank 1 of communicator 7 (world rank 3)". */
void pnccl_peer_name(const pnccl_comm *c, int peer, char *buf, size_t cap);

/* nccl_report.c: what plait doctor shows (plait_plugin_desc.report). */
void nccl_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx);

#endif
