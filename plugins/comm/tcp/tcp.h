/*
 * The TCP comm plugin's internals.
 *
 * One engine per world communicator holds the connections (`streams`
 * sockets to every peer), an epoll set over them, and all matching state.
 * Communicators derived from the world share the engine; the comm id in
 * every frame keeps their traffic apart.
 *
 * Concurrency: one mutex (`mu`) guards the whole engine; socket I/O happens
 * under it, epoll_wait outside it. A caller blocked in wait() polls the
 * sockets itself (its own epoll set, `cep`) and does the recv/send calls —
 * no thread hand-off on the latency path; one caller polls at a time, other
 * waiting callers sleep on `cv` and are woken by completions. The progress
 * thread has its own epoll set (`ep`) over the same sockets and polls only
 * while large transfers are outstanding and no caller is waiting, so they
 * advance while the caller computes; a caller never waits for it (if both
 * are in epoll_wait, both wake, and the progress thread then goes back to
 * sleep). Sends are written inline by the posting thread when the stream's
 * queue is empty. Spinning is bounded: a waiting caller first polls its
 * sockets for up to [comm.tcp] spin_us (default 50 us, sched_yield between
 * polls, never past the wait's own deadline) because a reply often arrives
 * within microseconds; then it sleeps in epoll_wait. Every other wait is
 * epoll_wait or a condition variable, all with deadlines.
 */
#ifndef PLAIT_TCP_H
#define PLAIT_TCP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <plait/comm_util.h>
#include <plait/plait.h>

#include "tcp_wire.h"

#define TCP_COMPONENT "tcp"

typedef struct tcp_engine tcp_engine;
typedef struct tcp_comm tcp_comm;
typedef struct tcp_req tcp_req;
typedef struct tcp_chan tcp_chan;
typedef struct tcp_inmsg tcp_inmsg;

/* Settings from [comm.tcp]. */
typedef struct tcp_settings {
    int streams;
    char ifname[64];
    int64_t sndbuf, rcvbuf;
    uint64_t chunk_size;
    uint64_t max_message;
    int progress_thread;
    int cma;             /* single copy to same-host peers allowed */
    uint64_t cma_min;    /* from this message size on */
    double spin_s;       /* a waiting caller polls this long before sleeping */
} tcp_settings;

/* One queued piece of a send: header + payload slice. */
typedef struct tcp_chunk {
    struct tcp_chunk *next;
    tcp_req *req;
    tcp_frame hdr;
    const char *data;
    size_t len;   /* payload bytes */
    size_t sent;  /* bytes of header+payload written */
} tcp_chunk;

typedef struct tcp_conn {
    int fd;
    int peer;      /* world rank */
    int stream;
    uint32_t events; /* current epoll interest */
    /* sending */
    tcp_chunk *txq, *txq_tail;
    size_t tx_queued; /* bytes not yet written */
    /* receiving */
    char *rx;         /* staging buffer */
    size_t rx_len, rx_pos;
    int rx_payload;   /* 0: expecting a header; 1: inside a chunk's payload */
    tcp_inmsg *rx_msg;/* the chunk's message */
    uint64_t rx_off;  /* message offset of the next payload byte */
    uint64_t rx_left; /* payload bytes left in the chunk */
    int lowat;        /* current SO_RCVLOWAT (0 = kernel default) */
    int ended;        /* the peer ended this stream at a frame boundary (EOF) while
                       * another of its streams was open: no longer read */
} tcp_conn;

typedef struct tcp_peer {
    tcp_conn *conns; /* `streams` entries; NULL for this rank */
    int lost;
    plait_status lost_status;
    char lost_why[384];
    char addr[64];
    int pid;         /* its process id (same host) */
    int cma_send;    /* it reads our buffers directly (we send RTS) */
    int cma_recv;    /* we read its buffers directly (we accept RTS) */
    tcp_req *awaiting; /* our RTS sends waiting for its ACK (linked by anext) */
} tcp_peer;

/* A message seen on the wire (at least one chunk) and not yet delivered. */
struct tcp_inmsg {
    tcp_inmsg *next;
    tcp_chan *chan;
    uint32_t seq;
    uint64_t len;
    uint64_t reserved; /* payload bytes announced by chunk headers so far */
    uint64_t got;      /* payload bytes received */
    char *buf;         /* user buffer (matched), own buffer (unexpected), NULL (discard) */
    size_t cap;        /* of an own buffer */
    int owned;
    int rts;           /* announced by RTS: the bytes are still in the sender */
    uint64_t raddr, rtoken;
    tcp_req *req;      /* matched receive */
};

/* Everything between one (peer, communicator, tag) pair. */
struct tcp_chan {
    tcp_chan *hnext;
    int peer; /* world rank */
    uint32_t comm_id, tag;
    uint32_t send_seq, recv_seq;
    tcp_req *posted, *posted_tail; /* receives waiting for their message, seq order */
    tcp_inmsg *msgs;
};

enum { TCP_SEND = 1, TCP_RECV = 2, TCP_CTRL = 3 /* internal frame (ACK); released once written */ };

struct tcp_req {
    tcp_req *next;   /* posted list / free list */
    int kind;
    int done;
    plait_status status;
    char err[512];
    tcp_comm *comm;
    tcp_chan *chan;
    int peer;        /* world rank */
    int comm_peer;   /* rank in comm */
    uint32_t tag, seq;
    char *buf;
    size_t cap;      /* receive capacity / send length */
    size_t len;      /* bytes moved */
    int chunks_left; /* send */
    tcp_chunk *chunks;
    tcp_inmsg *msg;  /* receive matched to a message in flight */
    int cma;         /* send announced by RTS, done at the ACK */
    uint64_t token;
    tcp_req *anext;  /* peer->awaiting list */
    unsigned char ctrl[16]; /* RTS / ACK payload */
    tcp_chunk one;   /* storage for single-chunk sends; must stay last (req_new clears up to it) */
};

struct tcp_comm {
    tcp_engine *eng;
    uint32_t id;
    int rank, size;
    int *world_of;   /* comm rank -> world rank */
    int aborted;
    char abort_why[384];
    tcp_comm *next;  /* engine's list */
    int is_world;
};

struct tcp_engine {
    const plait_host *host;
    tcp_settings cfg;
    int rank, size;
    tcp_peer *peers;
    int listen_fd;
    int ep, cep;          /* epoll sets: progress thread's, callers' */
    int wake_fd, cwake_fd;/* eventfds in ep and cep */
    uint8_t secret[TCP_SECRET_BYTES];
    char my_addr[64];

    pthread_mutex_t mu;
    pthread_cond_t cv;   /* callers: completions, token released */
    pthread_cond_t pcv;  /* progress thread */
    int caller_polling;  /* a caller is in (or handling) epoll_wait on cep */
    int caller_handling; /* ... and is handling what it returned (holds mu) */
    int cwake_pending;   /* cwake_fd written and not yet consumed */
    int waiting;         /* callers blocked on cv */
    int pt_sleeping;     /* the progress thread waits on pcv */
    int pt_polling;      /* the progress thread is in epoll_wait on ep */
    int stop;
    int has_thread;
    int reading_last_words; /* depth of tcp_read_last_words: reading a failing peer's streams */
    pthread_t thread;
    size_t tx_pending;   /* conns with queued sends */

    tcp_comm *comms;
    int n_comms;
    tcp_chan **chans;
    size_t n_chan_buckets, n_chans;
    tcp_req *free_reqs;
    char *scratch;       /* discard target */
    size_t scratch_len;
    uint64_t rejected;   /* stray connections refused during setup */
    struct { void *ptr; size_t cap; } ubuf[8]; /* reusable unexpected-message buffers */
    size_t ubuf_bytes;
    /* received messages, and those that arrived before their receive
     * (buffered, one extra copy) — logged at debug level on destroy */
    uint64_t stat_msgs, stat_bytes, stat_unexpected, stat_unexpected_bytes, stat_cma, stat_cma_bytes;
    uint8_t cookie[16];  /* read by same-host peers to test single copy */
    uint64_t next_token;
};

/* Receive staging buffer per connection, and the size of a staged read. */
#define TCP_RX_BUF (64u * 1024u)
#define TCP_RX_READ (16u * 1024u)

/* tcp_report.c: what plait doctor shows (plait_plugin_desc.report). */
void tcp_report(const plait_host *h, const plait_config *cfg, plait_report_fn line, void *ctx);

/* tcp_setup.c */
plait_status tcp_read_settings(const plait_host *host, const plait_config *cfg, tcp_settings *out);
/* Pick the address to listen on (ifname, loopback for one-host jobs, else
 * the first suitable interface); fills family/addr/ifname of *info. */
plait_status tcp_pick_address(const plait_host *host, const tcp_settings *cfg, int all_local,
                              tcp_addr_info *info, struct sockaddr_storage *ss, socklen_t *sl);
/* Connect every pair; fills eng->peers[*].conns. */
plait_status tcp_connect_all(tcp_engine *eng, const tcp_addr_info *infos, double timeout_s);
void tcp_tune_socket(const tcp_engine *eng, int fd);

/* tcp_state.c: shared helpers; every one expects mu held unless noted. */
void tcp_peer_name(const tcp_comm *c, int world_peer, char *buf, size_t cap); /* "rank 3" / "rank 1 of communicator 7 (world rank 3)" */
void tcp_wake(int eventfd);
void tcp_req_done(tcp_engine *e, tcp_req *r);
void tcp_req_fail(tcp_engine *e, tcp_req *r, plait_status st, const char *fmt, ...) PLAIT_PRINTF(4, 5);
tcp_req *tcp_req_new(tcp_engine *e);
void tcp_req_release(tcp_engine *e, tcp_req *r);
int tcp_async_work(const tcp_engine *e);
void tcp_maybe_kick(tcp_engine *e);
tcp_chan *tcp_chan_find(tcp_engine *e, int peer, uint32_t comm, uint32_t tag, int create);
void tcp_msg_unlink(tcp_chan *ch, tcp_inmsg *m);
void tcp_msg_free(tcp_engine *e, tcp_inmsg *m);
#define TCP_UBUF_SLOTS 8
/* A buffer of at least `len` bytes for an unexpected message (*cap gets
 * its size), and giving one back (kept for reuse within limits). */
void *tcp_ubuf_get(tcp_engine *e, size_t len, size_t *cap);
void tcp_ubuf_put(tcp_engine *e, void *p, size_t cap);
tcp_comm *tcp_comm_by_id(tcp_engine *e, uint32_t id);
void tcp_conn_close(tcp_engine *e, tcp_conn *c);
void tcp_fail_peer(tcp_engine *e, int p, plait_status st, const char *why);
void tcp_protocol_error(tcp_engine *e, tcp_conn *c, const char *fmt, ...) PLAIT_PRINTF(3, 4);
/* A failed read or write on `c` (err: the errno; 0: the end of the
 * stream). An end at a frame boundary while another stream of the peer is
 * open only marks `c` ended: a rank that finished closes its streams one by
 * one while its last messages may still travel on the others. The peer is
 * lost when its last stream ends, or at once on an error or an end in the
 * middle of a frame. */
void tcp_io_error(tcp_engine *e, tcp_conn *c, int err);
/* For a timeout's message: "rank 3 closed stream 0 (1 of its 2 streams
 * ended) and keeps the others open" into buf, or NULL when no stream of
 * world rank p has ended. */
const char *tcp_ended_note(const tcp_engine *e, int p, char *buf, size_t cap);
/* Read what world rank p's streams still hold (its ABORT frame, which fails
 * it with the cause it sent) before reporting it lost for another reason;
 * -1 when already inside such a reading (`nested`: inside more than a few),
 * whose caller then reports. */
int tcp_read_last_words(tcp_engine *e, int p, int nested);
void tcp_set_events(tcp_engine *e, tcp_conn *c, uint32_t ev);
plait_status tcp_check_peer(tcp_comm *cm, int peer, const char *op);
/* The start that an isend (kind TCP_SEND) and an irecv (TCP_RECV) share:
 * the peer checked, its channel found or made, a new request filled in
 * with the buffer, peer and tag. NULL with *st (the error set) when the
 * peer is refused or memory runs out. */
tcp_req *tcp_req_post(tcp_comm *cm, const plait_buffer *buf, int peer, uint32_t tag, int kind, plait_status *st);

/* tcp_send.c, tcp_recv.c: socket I/O on one connection (mu held). */
void tcp_conn_flush(tcp_engine *e, tcp_conn *c);
/* Returns 1 when it stopped at its read budget with bytes left to read. */
int tcp_conn_read(tcp_engine *e, tcp_conn *c);

/* tcp_notice.c: tell every live peer why this rank is going down (an ABORT
 * frame with `why`), finishing a chunk in flight first where needed; mu held
 * throughout (nothing else writes meanwhile). Takes at most TCP_NOTICE_S and
 * writes at most TCP_NOTICE_MAX_BYTES of a chunk per peer; what peers send
 * meanwhile is dropped, so the caller must close every connection next
 * (tcp_fail_peer). Best effort: a peer that is gone or not reading misses
 * the frame. */
#define TCP_NOTICE_S 0.5
#define TCP_NOTICE_MAX_BYTES (8u << 20)
void tcp_notify_peers(tcp_engine *e, const char *why);

/* tcp_cma.c: single copy between ranks of one host. */
/* Fill the cma fields of our published address info. */
void tcp_cma_describe(tcp_engine *e, tcp_addr_info *mine);
/* After the address exchange: probe same-host peers, agree (one more
 * allgather, done by every rank whatever its settings). */
plait_status tcp_cma_setup(tcp_engine *e, const plait_bootstrap *bs, const tcp_addr_info *infos);
/* Handle an RTS or ACK frame (header + payload) from `c`'s peer; 0, or -1
 * after failing the peer. */
int tcp_cma_control(tcp_engine *e, tcp_conn *c, const tcp_frame *h, const unsigned char *payload);
/* Copy an RTS-announced message into receive `r` (length already checked),
 * acknowledge it and complete `r`. */
void tcp_cma_deliver(tcp_engine *e, tcp_inmsg *m, tcp_req *r);
/* Acknowledge an RTS whose data will not be read (receive failed). */
void tcp_cma_ack(tcp_engine *e, int peer, uint64_t token, uint32_t status);
/* Queue one internal frame to `peer` and try to write it. */
void tcp_queue_ctrl(tcp_engine *e, int peer, uint8_t type, const tcp_frame *like, const void *payload);

/* tcp_send.c, tcp_recv.c, tcp_progress.c: the plugin's operations. */
plait_status tcp_engine_start(tcp_engine *eng);
void tcp_engine_stop(tcp_engine *eng);
plait_status tcp_isend(tcp_comm *c, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out);
plait_status tcp_irecv(tcp_comm *c, const plait_buffer *buf, int peer, uint32_t tag, tcp_req **out);
plait_status tcp_test(tcp_comm *c, tcp_req *r, int *done, size_t *bytes);
plait_status tcp_wait(tcp_comm *c, tcp_req *r, double timeout_s, size_t *bytes);
void tcp_abort(tcp_comm *c, const char *reason);
/* Forget a communicator's channels (it has no pending requests). */
void tcp_comm_unregister(tcp_comm *c);
plait_status tcp_comm_register(tcp_engine *eng, tcp_comm *c);

#endif
