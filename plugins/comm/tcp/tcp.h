/*
 * The TCP comm plugin's internals.
 *
 * One engine per world communicator holds the connections (`streams`
 * sockets to every peer), an epoll set over them, and all matching state.
 * Communicators derived from the world share the engine; the comm id in
 * every frame keeps their traffic apart.
 *
 * Concurrency: one mutex (`mu`) guards the whole engine. Socket I/O for
 * receiving is done only by the thread holding the "poller token": a caller
 * blocked in wait() takes it and does the epoll_wait/recv itself (no thread
 * hand-off on the latency path); the progress thread takes it only when
 * large transfers are outstanding and nobody is waiting, so they advance
 * while the caller computes. A caller that finds the progress thread
 * polling asks it to yield (eventfd). Sends are written inline by the
 * posting thread when the stream's queue is empty. Nobody spins: waiting
 * is epoll_wait or a condition variable, both with deadlines.
 */
#ifndef PLAIT_TCP_H
#define PLAIT_TCP_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

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
} tcp_conn;

typedef struct tcp_peer {
    tcp_conn *conns; /* `streams` entries; NULL for this rank */
    int lost;
    plait_status lost_status;
    char lost_why[384];
    char addr[64];
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
    int owned;
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

enum { TCP_SEND = 1, TCP_RECV = 2 };

struct tcp_req {
    tcp_req *next;   /* posted list / free list */
    int kind;
    int done;
    int big;         /* counted in engine->big_pending */
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

enum { POLLER_NONE = 0, POLLER_THREAD = 1, POLLER_CALLER = 2 };

struct tcp_engine {
    const plait_host *host;
    tcp_settings cfg;
    int rank, size;
    tcp_peer *peers;
    int listen_fd;
    int ep;
    int wake_fd;
    int wake_pending;
    uint8_t secret[TCP_SECRET_BYTES];
    char my_addr[64];

    pthread_mutex_t mu;
    pthread_cond_t cv;   /* callers: completions, token released */
    pthread_cond_t pcv;  /* progress thread */
    int poller;
    int waiting;         /* callers blocked on cv */
    int pt_sleeping;
    int stop;
    int has_thread;
    pthread_t thread;
    size_t big_pending;  /* big receives posted and not done */
    size_t tx_pending;   /* conns with queued sends */

    tcp_comm *comms;
    int n_comms;
    tcp_chan **chans;
    size_t n_chan_buckets, n_chans;
    tcp_req *free_reqs;
    char *scratch;       /* discard target */
    size_t scratch_len;
    uint64_t rejected;   /* stray connections refused during setup */
};

/* A receive or send this large (bytes) is worth progressing asynchronously. */
#define TCP_ASYNC_BYTES (256u * 1024u)
/* Receive staging buffer per connection, and the size of a staged read. */
#define TCP_RX_BUF (64u * 1024u)
#define TCP_RX_READ (16u * 1024u)

/* tcp_setup.c */
plait_status tcp_read_settings(const plait_host *host, const plait_config *cfg, tcp_settings *out);
/* Pick the address to listen on (ifname, loopback for one-host jobs, else
 * the first suitable interface); fills family/addr/ifname of *info. */
plait_status tcp_pick_address(const plait_host *host, const tcp_settings *cfg, int all_local,
                              tcp_addr_info *info, struct sockaddr_storage *ss, socklen_t *sl);
/* Connect every pair; fills eng->peers[*].conns. */
plait_status tcp_connect_all(tcp_engine *eng, const tcp_addr_info *infos, double timeout_s);
void tcp_tune_socket(const tcp_engine *eng, int fd);

/* tcp_engine.c */
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
