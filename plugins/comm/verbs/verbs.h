/*
 * The verbs comm plugin's engine: plait's point-to-point semantics over
 * reliable-connected queue pairs, independent of the verbs calls themselves.
 *
 * Layers
 *   verbs_proto.c   framing, credits, matching (pure functions)
 *   verbs_engine.c  requests, eager and rendezvous paths, completions,
 *   verbs_recv.c    the receive path,
 *   verbs_fail.c    failures, abort, wait -- this header; hardware reached
 *                   only through vb_fabric_ops
 *   verbs_ib.c      the fabric over libibverbs: device, SRQ, CQ, QPs,
 *                   memory registration, progress thread
 *   verbs_plugin.c  descriptor, [comm.verbs] keys, probe, init/derive
 * The unit tests run the engine over a loopback fabric in one process.
 *
 * One engine per world communicator; communicators derived from it share it
 * (and its QPs) and keep their traffic apart by the comm id in every header.
 *
 * Protocols (README.md has the reasoning):
 *   eager       len <= eager_max: header + data copied into a registered
 *               bounce buffer and SENT; the send completes once posted. The
 *               receiver copies it into the matching receive, or keeps a
 *               copy until the receive is posted.
 *   rendezvous  longer: the sender registers its buffer and SENDs an RTS
 *               (address, rkey, token); the receiver, once the matching
 *               receive is posted, RDMA-READs the data into it (in chunks of
 *               at most max_read) and SENDs a FIN, which completes the send.
 *
 * Concurrency: one mutex `mu` guards the engine. The fabric's progress
 * thread sleeps on the completion channel and, when woken, polls the CQ
 * under `mu` and broadcasts `cv`; callers in wait() poll the CQ once
 * themselves, then sleep on `cv` with their deadline. Nobody spins.
 */
#ifndef PLAIT_VERBS_H
#define PLAIT_VERBS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <plait/comm_util.h>
#include <plait/plait.h>

#include "verbs_proto.h"

#define VB_COMPONENT "verbs"

/* [comm.verbs] */
typedef struct vb_settings {
    char device[64];     /* "" = first device with an active port */
    int port;            /* 0 = first active port */
    int gid_index;       /* -1 = pick (RoCE v2 with an IPv4 address, else 0) */
    uint32_t eager_max;
    int credits;         /* per-peer window */
    int rx_depth;        /* bounce buffers in the shared receive queue */
    int tx_depth;        /* bounce buffers for sending */
    int sq_depth;        /* work requests per QP send queue */
    uint64_t max_read;   /* largest RDMA READ */
    int ib_timeout;      /* local ACK timeout exponent (4.096 us * 2^x) */
    int ib_retry;        /* transport retries */
    int sl, traffic_class;
    uint64_t max_message;
    int send_budget;     /* sends + READs in flight the CQ can absorb (0 = no limit); set by the fabric */
} vb_settings;

/* A registration: `handle` is the fabric's (struct ibv_mr *). */
typedef struct vb_mr {
    void *handle;
    uint32_t lkey, rkey;
} vb_mr;

/* What the fabric tells the engine about one work completion. */
typedef struct vb_cqe {
    uint64_t wr_id;
    int peer;              /* -1 when unknown */
    int ok;
    const char *status;    /* the work completion status text, e.g. "transport retry counter exceeded" */
    uint32_t vendor_err;
    uint32_t byte_len;     /* receives */
} vb_cqe;

/* The hardware as the engine sees it. Called with the engine's mutex held;
 * none may block. Posting functions return 0 or an errno value. */
typedef struct vb_fabric_ops {
    int (*post_send)(void *fab, int peer, uint64_t wr_id, const void *buf, uint32_t len, uint32_t lkey);
    int (*post_read)(void *fab, int peer, uint64_t wr_id, void *local, uint32_t lkey, uint64_t raddr, uint32_t rkey,
                     uint32_t len);
    int (*post_recv)(void *fab, uint64_t wr_id, void *buf, uint32_t len, uint32_t lkey);
    /* Fill up to `max` completions; returns how many (0 when none). */
    int (*poll)(void *fab, vb_cqe *out, int max);
    /* Register memory for local write and remote read; 0 or errno. */
    int (*reg)(void *fab, void *addr, size_t len, vb_mr *out);
    void (*dereg)(void *fab, vb_mr *mr);
    /* Put the connection to `peer` in the error state: its posted work
     * completes with flush errors, and nothing more moves. */
    void (*kill_peer)(void *fab, int peer);
    /* "mlx5_0:1 (10.0.0.3)" -- where `peer` is, for messages. */
    void (*describe_peer)(void *fab, int peer, char *buf, size_t cap);
} vb_fabric_ops;

typedef struct vb_engine vb_engine;
typedef struct vb_comm vb_comm;
typedef struct vb_req vb_req;

enum { VB_REQ_SEND = 1, VB_REQ_RECV = 2 };

struct vb_req {
    vp_link link;          /* channel queues, peer sendq/readq, free list: first field */
    int kind;
    int done;
    plait_status status;
    vb_comm *comm;
    int peer;              /* world rank */
    int comm_peer;
    uint32_t tag, seq;
    char *buf;
    size_t cap;            /* send: length; receive: capacity */
    size_t len;            /* bytes moved */
    vb_mr mr;              /* rendezvous: the registration of buf */
    int own_mr;            /* registered by us (deregistered when done) */
    /* send */
    int rndv;
    uint64_t token;
    struct vb_exposed *exp;
    /* rendezvous receive */
    uint64_t raddr;
    uint32_t rkey;
    uint64_t rtoken;
    uint64_t msg_len;
    uint64_t read_posted;  /* bytes whose READ is posted */
    uint64_t read_done;
    int reads_inflight;
    int reading;           /* queued on the peer's readq or reading */
    plait_status fail_after; /* fail with this once the reads drained (abort / peer loss) */
    char err[512];
};

/* A message that arrived before its receive. */
typedef struct vb_msg {
    vp_link link;
    int type;              /* VB_EAGER / VB_RTS */
    uint32_t seq;
    uint64_t len;
    char *data;            /* eager copy (NULL for 0 bytes) */
    uint64_t raddr, rtoken;
    uint32_t rkey;
} vb_msg;

/* A send whose buffer a peer may read (RTS posted, FIN not yet seen). Kept
 * until the FIN arrives or the peer is lost, even if its request was
 * failed by an abort: the peer may still be reading. */
typedef struct vb_exposed {
    struct vb_exposed *next;
    uint64_t token;
    vb_mr mr;
    int own_mr;
    vb_req *req;           /* NULL once failed and released */
} vb_exposed;

/* An internal message waiting to be sent (FIN). */
typedef struct vb_ctrl {
    struct vb_ctrl *next;
    uint64_t token;
    uint32_t status;
    uint32_t comm_id;
} vb_ctrl;

typedef struct vb_peer {
    int lost;
    plait_status lost_status;
    char lost_why[384];
    vp_credit cr;
    int sq_used;
    int flush_needed;      /* completions since the last flush */
    vp_queue sendq;        /* eager sends and RTS, posting order */
    vb_ctrl *ctrl, *ctrl_tail;
    int abort_pending;     /* send an ABORT notice */
    vp_queue readq;        /* rendezvous receives with READs left to post */
    vb_exposed *exposed;
} vb_peer;

struct vb_comm {
    vb_engine *eng;
    uint32_t id;
    int rank, size;
    int *world_of;
    int is_world;
    int aborted;
    char abort_why[384];
    vb_comm *next;
};

/* A registered bounce buffer. */
typedef struct vb_slot {
    struct vb_slot *next;
    char *buf;
    int is_rx;
} vb_slot;

struct vb_engine {
    const plait_host *host;
    vb_settings cfg;
    int rank, size;
    void *fab;
    const vb_fabric_ops *fops;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;

    vb_peer *peers;
    vb_comm *comms;
    vp_table chans;
    vb_req *free_reqs;
    uint64_t next_token;

    /* bounce buffers: rx_depth for the SRQ, tx_depth for sending */
    char *pool;
    size_t pool_bytes, slot_bytes;
    vb_mr pool_mr;
    vb_slot *slots;
    vb_slot *tx_free;
    int rx_posted;
    int send_outstanding;  /* sends and READs posted, not completed */

    int stopping;
    /* counters, logged at debug level when the engine stops */
    uint64_t stat_eager, stat_rndv, stat_unexpected, stat_credit_msgs;
};

/* wr_id encoding: a pointer with the low 2 bits saying what it is. */
enum { VB_WR_TX = 0, VB_WR_RX = 1, VB_WR_READ = 2 };
#define VB_WR(ptr, kind) ((uint64_t)(uintptr_t)(ptr) | (uint64_t)(kind))
#define VB_WR_KIND(id) ((int)((id)&3u))
#define VB_WR_PTR(id) ((void *)(uintptr_t)((id) & ~(uint64_t)3u))

/* ---- verbs_engine.c ------------------------------------------------------ */

/* Settings with the defaults of [comm.verbs] (for tests). */
void vb_settings_default(vb_settings *s);

/* A started engine for `rank` of `size` over `fab` (whose connections are
 * up): allocates and registers the bounce buffers and posts the receives.
 * peer_credits[p]: the window peer p grants us (NULL: ours everywhere).
 * The caller drives progress (vb_progress) from its own thread as well. */
plait_status vb_engine_new(const plait_host *host, const vb_settings *cfg, int rank, int size, void *fab,
                           const vb_fabric_ops *fops, const uint32_t *peer_credits, vb_engine **out);
/* Release everything (no thread may be in the engine; communicators gone). */
void vb_engine_free(vb_engine *e);

/* Poll the fabric's completions and act on them; mu held. Returns how
 * many completions were handled. Broadcasts cv when any were. */
int vb_progress(vb_engine *e);

/* The world communicator of a new engine, and derived ones. */
plait_status vb_comm_world(vb_engine *e, uint32_t id, vb_comm **out);
plait_status vb_comm_derive(vb_comm *parent, uint32_t id, int rank, int size, const int *members, vb_comm **out);
void vb_comm_free(vb_comm *c);

plait_status vb_isend(vb_comm *c, const plait_buffer *buf, int peer, uint32_t tag, const vb_mr *mr, vb_req **out);
plait_status vb_irecv(vb_comm *c, const plait_buffer *buf, int peer, uint32_t tag, const vb_mr *mr, vb_req **out);
plait_status vb_test(vb_comm *c, vb_req *r, int *done, size_t *bytes);
plait_status vb_wait(vb_comm *c, vb_req *r, double timeout_s, size_t *bytes);
/* Fail the communicator's pending and future operations (the world's:
 * tell every peer why, then drop every connection). Any thread. */
void vb_abort(vb_comm *c, const char *reason);

/* Register a user buffer (plait_comm_ops.reg). */
plait_status vb_reg(vb_engine *e, const plait_buffer *buf, vb_mr **out);
void vb_dereg(vb_engine *e, vb_mr *mr);

/* The connection to `peer` broke (error completion, async event, garbage):
 * fail everything involving it and put its QP in the error state; mu held. */
void vb_fail_peer(vb_engine *e, int peer, plait_status st, const char *why);
/* The same; with kill = 0 the QP stays up (world abort: notices still go
 * out, READs in flight drain). */
void vb_lose_peer(vb_engine *e, int peer, plait_status st, const char *why, int kill);

/* ---- internals shared by verbs_engine.c and verbs_recv.c (mu held) ------- */
void vb_peer_name(const vb_comm *c, int world_peer, char *buf, size_t cap);
/* A cleared request from the pool (NULL when out of memory); back to it. */
vb_req *vb_req_new(vb_engine *e);
void vb_req_release(vb_engine *e, vb_req *r);
/* Room for one more send-side work request to `peer` (its send queue and
 * the CQ's budget). */
int vb_send_room(const vb_engine *e, int peer);
/* A bounce buffer for one message of `type` to `peer` if the send queue,
 * the buffers and (for counted types) the credits allow; NULL otherwise. */
vb_slot *vb_reserve(vb_engine *e, int peer, int type);
/* Post a filled bounce buffer; 0, or -1 after failing the peer. */
int vb_post_slot(vb_engine *e, int peer, vb_slot *s, size_t len);
void vb_req_done(vb_engine *e, vb_req *r);
void vb_req_fail(vb_engine *e, vb_req *r, plait_status st, const char *fmt, ...) PLAIT_PRINTF(4, 5);
/* Queue a FIN to `peer` (sent by the next flush). */
void vb_queue_ctrl(vb_engine *e, int peer, uint32_t comm_id, uint64_t token, uint32_t status);
/* Post what is queued for `peer` as far as slots, send-queue room and
 * credits allow (and READs of its rendezvous receives); every peer with
 * something queued. Call at the top level of an operation, never while
 * iterating queues (a posting failure fails the peer). */
void vb_flush_peer(vb_engine *e, int peer);
void vb_flush_all(vb_engine *e);
vb_comm *vb_comm_by_id(vb_engine *e, uint32_t id);
void vb_protocol_error(vb_engine *e, int peer, const char *fmt, ...) PLAIT_PRINTF(3, 4);
/* Start (or continue) the READs of a matched rendezvous receive. */
void vb_start_read(vb_engine *e, vb_req *r);
void vb_pump_reads(vb_engine *e, int peer);
/* A received message (bounce buffer `wire`, `len` bytes) from `peer`. */
void vb_on_message(vb_engine *e, int peer, const char *wire, size_t len);
void vb_on_read_done(vb_engine *e, vb_req *r, const vb_cqe *c);
void vb_msg_free(vb_msg *m);
/* A rendezvous receive that cannot finish: reported (and FIN'd) once no
 * READ into its buffer is in flight. */
void vb_fail_reading(vb_engine *e, vb_req *r, plait_status st, const char *why);
/* Host memory only (UNSUPPORTED otherwise), non-NULL when non-empty. */
plait_status vb_check_buffer(vb_engine *e, const plait_buffer *b);
/* A user registration (from vb_reg) covering [p, p+len), or NULL. */
const vb_mr *vb_usable_mr(const vb_mr *mr, const void *p, size_t len);

/* verbs_report.c: what plait doctor shows (plait_plugin_desc.report). */
void vb_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx);

#endif
