/*
 * Wire format of the TCP comm plugin (little-endian hosts only).
 *
 * Setup: every rank listens on one port and publishes a tcp_addr_info
 * (bootstrap allgather; also under the key "tcp.addr.<rank>" of the world
 * bootstrap). For every pair (i < j), rank i opens `streams` connections to
 * rank j; on each it sends a tcp_hello carrying j's secret (from j's
 * tcp_addr_info, so only job members know it) and waits for j's tcp_ack.
 * Anything else arriving on the port is logged and closed.
 *
 * Data: a message is cut into chunks of at most chunk_size bytes, striped
 * over the streams to its peer; every chunk is a tcp_frame header followed
 * by chunk_len payload bytes. (comm_id, tag, seq) identify the message: seq
 * counts messages per (sender, receiver, communicator, tag), so the receiver
 * matches the n-th message to its n-th receive whatever stream it came on.
 * The receiver validates every header (magic, version, type, known
 * communicator, lengths and offsets within the message and within limits,
 * consistency with earlier chunks); a bad one fails the connection to that
 * peer with PLAIT_ERR_PROTOCOL, never an overrun.
 *
 * Single copy between ranks on one host ([comm.tcp] cma): at setup every
 * rank checks which same-host peers' memory it may read with
 * process_vm_readv (it reads a random cookie each published) and the ranks
 * exchange the answers. A message of at least cma_min bytes to such a peer
 * is then announced by one RTS frame (the 16-byte tcp_rts payload gives the
 * sender's buffer address and a token) instead of its data; the receiver,
 * once the matching receive is posted, copies the bytes straight from the
 * sender's buffer into its own (one copy instead of TCP's two) and answers
 * with an ACK frame (tcp_rts_ack) that completes the send. comm_id, tag and
 * seq of an RTS match like a data message's; msg_len is the message length.
 */
#ifndef PLAIT_TCP_WIRE_H
#define PLAIT_TCP_WIRE_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the plait tcp wire format assumes a little-endian host"
#endif

#define TCP_WIRE_VERSION 2
#define TCP_FRAME_MAGIC 0x46544c50u /* "PLTF" */
#define TCP_HELLO_MAGIC 0x48544c50u /* "PLTH" */
#define TCP_ACK_MAGIC 0x41544c50u   /* "PLTA" */
#define TCP_ADDR_MAGIC 0x44544c50u  /* "PLTD" */
#define TCP_SECRET_BYTES 32

/* ABORT: a rank that is going down tells its peers why (payload: the reason
 * text, at most TCP_ABORT_MAX bytes), so a failure cascades with its cause
 * ("rank 0 is going down: lost rank 2 in allreduce #61") instead of each rank
 * only reporting the neighbour it last heard from. It is the last frame on
 * its stream, at a frame boundary like any other (the sender finishes a
 * chunk in flight first: tcp_notice.c). */
enum { TCP_FRAME_DATA = 1, TCP_FRAME_RTS = 2, TCP_FRAME_ACK = 3, TCP_FRAME_ABORT = 4 };
#define TCP_ABORT_MAX 320

typedef struct tcp_frame {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t flags;     /* 0 */
    uint32_t comm_id;
    uint32_t tag;
    uint32_t seq;
    uint32_t chunk_len; /* payload bytes after this header */
    uint64_t msg_len;   /* the whole message */
    uint64_t offset;    /* of this chunk in the message */
} tcp_frame;

typedef struct tcp_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t stream;     /* 0 .. streams-1 */
    int32_t from_rank;   /* world ranks */
    int32_t to_rank;
    int32_t world_size;
    uint16_t streams;
    uint16_t reserved;
    uint8_t secret[TCP_SECRET_BYTES]; /* the acceptor's secret */
} tcp_hello;

typedef struct tcp_ack {
    uint32_t magic;
    int32_t rank; /* the acceptor's world rank */
} tcp_ack;

typedef struct tcp_addr_info {
    uint32_t magic;
    uint16_t family; /* AF_INET / AF_INET6 */
    uint16_t port;   /* host order */
    uint8_t addr[16];
    uint8_t secret[TCP_SECRET_BYTES];
    uint16_t streams;
    uint16_t version;
    char ifname[20];
    /* single copy between ranks of one host */
    int32_t pid;
    uint32_t reserved;
    uint64_t host_key;    /* hash of host name, kernel boot id and network namespace */
    uint64_t cookie_addr; /* where `cookie` lives in this process */
    uint8_t cookie[16];
    uint8_t pad[8];
} tcp_addr_info;

/* Payload of an RTS frame and of its ACK. */
typedef struct tcp_rts {
    uint64_t addr;  /* the message in the sender's memory */
    uint64_t token; /* echoed by the ACK */
} tcp_rts;

typedef struct tcp_rts_ack {
    uint64_t token;
    uint32_t status; /* 0, or the errno of the receiver's failed read */
    uint32_t reserved;
} tcp_rts_ack;

_Static_assert(sizeof(tcp_frame) == 40, "tcp frame header is 40 bytes");
_Static_assert(sizeof(tcp_hello) == 56, "tcp hello is 56 bytes");
_Static_assert(sizeof(tcp_ack) == 8, "tcp ack is 8 bytes");
_Static_assert(sizeof(tcp_addr_info) == 128, "tcp address info is 128 bytes");
_Static_assert(sizeof(tcp_rts) == 16 && sizeof(tcp_rts_ack) == 16, "rts payloads are 16 bytes");

#endif
