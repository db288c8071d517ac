/*
 * Wire format of the rendezvous store (little-endian on the wire; plait
 * runs on little-endian hosts and checks it at compile time).
 *
 * Request:  store_req_hdr, then key_len bytes of key, then val_len bytes.
 * Reply:    store_rep_hdr, then val_len bytes.
 *
 *   HELLO   key "",  value: u32 version, client nonce (32 bytes) -> OK value: server nonce, server proof
 *                                                                  | DENIED (then closed)
 *   AUTH    key "",  value: i32 rank, client proof (32 bytes)      -> OK | DENIED | FULL (then closed)
 *           or, flag STORE_AUTH_GAVE_UP, value: i32 rank: the client could not verify the server
 *           (store_auth.h: the proofs are HMAC-SHA-256 keyed by the job token)
 *   SET     key, value                                            -> OK
 *   GET     key, timeout_ms (0 = no wait)                         -> OK value | NOT_FOUND | TIMEOUT
 *   ADD     key, value: i64 delta                                 -> OK value: i64 new value
 *   GATHER  key = prefix, value: u32 n, u32 index, contribution   -> OK (u32 len, bytes) * n
 *                                                                  | TIMEOUT value: u32 missing[]
 * A malformed request gets BAD_REQUEST and the connection is closed. Once a
 * client that spoke the protocol failed AUTH or gave up on the server's proof
 * (a rank with another job token), every GATHER, parked or new, that still
 * misses that rank's contribution is answered ABORTED with the reason as its
 * value: it can never complete, so nobody waits out its timeout. So is every
 * GATHER, parked or new, of a prefix whose members disagree: a different n,
 * or another contribution for a taken index (store_gather.h).
 *
 * Definitions only (no functions, no state).
 */
#ifndef PLAIT_CORE_STORE_WIRE_H
#define PLAIT_CORE_STORE_WIRE_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the plait store protocol assumes a little-endian host"
#endif

#define STORE_REQ_MAGIC 0x514b4c50u /* "PLKQ" */
#define STORE_REP_MAGIC 0x524b4c50u /* "PLKR" */
#define STORE_PROTO_VERSION 2u
#define STORE_MAX_GATHER 65536

enum store_op { STORE_HELLO = 1, STORE_SET = 2, STORE_GET = 3, STORE_ADD = 4, STORE_GATHER = 5, STORE_AUTH = 6 };

/* AUTH flag: the client could not verify the server's proof and gives up;
 * the value is its i32 rank only (no proof is sent to an unverified peer). */
#define STORE_AUTH_GAVE_UP 1u

enum store_rep_status {
    STORE_OK = 0,
    STORE_NOT_FOUND = 1,
    STORE_TIMEOUT = 2,
    STORE_BAD_REQUEST = 3,
    STORE_DENIED = 4,
    STORE_TOO_LARGE = 5,
    STORE_ABORTED = 6,
    STORE_FULL = 7 /* AUTH: the store holds as many ranks' connections as it may */
};

typedef struct store_req_hdr {
    uint32_t magic;
    uint8_t op;
    uint8_t flags;
    uint16_t key_len;
    uint32_t val_len;
    uint32_t timeout_ms;
} store_req_hdr;

typedef struct store_rep_hdr {
    uint32_t magic;
    uint8_t status;
    uint8_t pad[3];
    uint32_t val_len;
    uint32_t reserved;
} store_rep_hdr;

_Static_assert(sizeof(store_req_hdr) == 16, "store request header is 16 bytes");
_Static_assert(sizeof(store_rep_hdr) == 16, "store reply header is 16 bytes");

#endif
