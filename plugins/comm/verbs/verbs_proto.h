/*
 * The verbs plugin's protocol logic as pure functions: message framing and
 * validation, flow-control credits, and matching of messages to receives
 * per (peer, communicator, tag). No verbs calls, no locks, no threads: the
 * engine calls these under its mutex, and the unit tests drive them
 * directly on machines without RDMA hardware.
 */
#ifndef PLAIT_VERBS_PROTO_H
#define PLAIT_VERBS_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "verbs_wire.h"

/* ---- framing ----------------------------------------------------------- */

/* A header for `type` (grant, comm, tag, seq, len as given; the rest 0). */
vb_hdr vp_header(uint8_t type, uint16_t grant, uint32_t comm_id, uint32_t tag, uint32_t seq, uint64_t len);

/* Check one received message of `wire_len` bytes (header and payload).
 * Returns its type, or -1 with a reason in `why` (bad magic / version /
 * type / flags, a length that disagrees with the type, an eager payload over
 * `eager_max`, an RTS of 0 bytes or over `max_message`). */
int vp_check(const void *wire, size_t wire_len, uint32_t eager_max, uint64_t max_message, char *why, size_t cap);

/* Bytes a message of `type` occupies on the wire (EAGER: with `len`
 * payload bytes; ABORT: with `len` bytes of text). */
size_t vp_wire_len(int type, uint64_t len);

/* Eager or rendezvous for a message of `len` bytes. */
static inline int vp_protocol_for(uint64_t len, uint32_t eager_max) { return len <= eager_max ? VB_EAGER : VB_RTS; }

/* Length of chunk `i` when `len` bytes are read in pieces of at most
 * `max_chunk`, and how many pieces there are (at least 1). */
uint64_t vp_chunks(uint64_t len, uint64_t max_chunk);
uint64_t vp_chunk_len(uint64_t len, uint64_t max_chunk, uint64_t i);

/* ---- credits ------------------------------------------------------------ */

/* Flow control toward one peer. `credits`: counted messages we may still
 * send it; `to_return`: counted messages of its we consumed and have not
 * granted back; `window`: what we granted it initially (our half). */
typedef struct vp_credit {
    int32_t credits;
    int32_t to_return;
    int32_t window;
} vp_credit;

/* my_window: credits we give the peer; peer_window: credits it gives us. */
void vp_credit_init(vp_credit *c, int32_t my_window, int32_t peer_window);
/* Does a message of `type` count against the window? */
static inline int vp_counted(int type) { return type != VB_CREDIT && type != VB_ABORT; }
/* May a message of `type` go now? Takes a credit for counted types. */
int vp_credit_take(vp_credit *c, int type);
/* The grant to piggyback on a message we send (and forget it is owed). */
uint16_t vp_credit_grant(vp_credit *c);
/* A message of `type` carrying `grant` was consumed. */
void vp_credit_received(vp_credit *c, int type, uint16_t grant);
/* Should we send an explicit CREDIT now (half our window is owed)? */
int vp_credit_due(const vp_credit *c);

/* ---- matching ------------------------------------------------------------ */

typedef struct vp_link {
    struct vp_link *next;
} vp_link;

typedef struct vp_queue {
    vp_link *head, *tail;
} vp_queue;

void vp_queue_push(vp_queue *q, vp_link *x);
vp_link *vp_queue_pop(vp_queue *q);
/* Remove `x` if queued; 1 when it was. */
int vp_queue_remove(vp_queue *q, vp_link *x);

/* Everything between one (peer, communicator, tag). */
typedef struct vp_chan {
    struct vp_chan *hnext;
    int peer;
    uint32_t comm_id, tag;
    uint32_t send_seq;   /* next seq we send */
    uint32_t recv_seq;   /* next seq we expect */
    vp_queue posted;     /* receives waiting for their message, posting order */
    vp_queue unexpected; /* messages waiting for their receive, arrival order */
} vp_chan;

typedef struct vp_table {
    vp_chan **buckets;
    size_t n_buckets, n;
} vp_table;

/* 0, or -1 when out of memory. */
int vp_table_init(vp_table *t);
/* The channel, created when `create` (NULL when out of memory or absent). */
vp_chan *vp_chan_find(vp_table *t, int peer, uint32_t comm_id, uint32_t tag, int create);
/* Call fn on every channel (fn may not add or remove channels). */
void vp_table_each(vp_table *t, void (*fn)(vp_chan *ch, void *ctx), void *ctx);
/* Remove and free the channels of `comm_id` (or all with all = 1); their
 * queued items are handed to `drop` first (may be NULL). */
void vp_table_drop(vp_table *t, uint32_t comm_id, int all, void (*drop)(vp_link *x, int posted, void *ctx),
                   void *ctx);
void vp_table_free(vp_table *t);

/* A receive was posted: returns the message it matches (removed from the
 * unexpected queue), or NULL after queueing the receive. */
vp_link *vp_post_recv(vp_chan *ch, vp_link *recv);
/* A message with `seq` arrived. Returns 0 with *recv the receive it
 * matches (removed from the posted queue) or NULL after queueing the message
 * as unexpected; -1 when seq is not the one expected (a protocol error). */
int vp_arrive(vp_chan *ch, uint32_t seq, vp_link *msg, vp_link **recv);

#endif
