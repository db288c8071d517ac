/*
 * Wire format of the verbs comm plugin (little-endian hosts only).
 *
 * Every rank has one reliable-connected (RC) queue pair per peer; all of a
 * rank's QPs share one completion queue and one shared receive queue (SRQ)
 * of bounce buffers. Messages travel as IBV_WR_SEND of a vb_hdr followed by
 * a type-specific payload:
 *
 *   EAGER   hdr + the message's bytes (at most eager_max)
 *   RTS     hdr + vb_rts: a long message waits in the sender's registered
 *           buffer; the receiver, once a matching receive is posted, pulls
 *           it with RDMA READ straight into that receive's buffer
 *   FIN     hdr + vb_fin: the receiver is done reading (or refused the
 *           message); completes the sender's request and releases its MR
 *   CREDIT  hdr only: returns flow-control credits (hdr.grant)
 *   ABORT   hdr + reason text: the sender is going down and says why
 *
 * (comm_id, tag, seq) identify a message: seq counts messages per (sender,
 * receiver, communicator, tag), and since one RC QP delivers in order, the
 * receiver checks that each arrives with the next expected seq and matches
 * the n-th message of a channel to its n-th receive.
 *
 * Flow control: a sender may have at most `credits` counted messages (every
 * type but CREDIT and ABORT) unconsumed at a peer; the peer grants credits
 * back in hdr.grant of anything it sends, or in a CREDIT message once half
 * its window is owed. CREDIT and ABORT need no credit, so grants always
 * flow; RNR retry covers the SRQ running short under incast.
 */
#ifndef PLAIT_VERBS_WIRE_H
#define PLAIT_VERBS_WIRE_H

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the plait verbs wire format assumes a little-endian host"
#endif

#define VB_WIRE_VERSION 1
#define VB_HDR_MAGIC 0x5642u       /* "BV" */
#define VB_INFO_MAGIC 0x49424c50u  /* "PLBI" */
#define VB_ABORT_MAX 256

enum { VB_EAGER = 1, VB_RTS = 2, VB_FIN = 3, VB_CREDIT = 4, VB_ABORT = 5 };

/* FIN status: what the receiver did with an RTS-announced message. */
enum {
    VB_FIN_OK = 0,        /* read into the receive buffer */
    VB_FIN_REFUSED = 1,   /* the receive buffer was too small (the receive failed; the send is complete) */
    VB_FIN_READ_FAILED = 2, /* the RDMA READ failed */
    VB_FIN_ABORTED = 3    /* the receiver's communicator was aborted */
};

typedef struct vb_hdr {
    uint16_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t grant;    /* credits returned to the receiver of this header */
    uint16_t flags;    /* 0 */
    uint32_t comm_id;
    uint32_t tag;
    uint32_t seq;
    uint32_t reserved; /* 0 */
    uint64_t len;      /* EAGER: payload bytes; RTS: the message's length; else 0 */
} vb_hdr;

typedef struct vb_rts {
    uint64_t addr;     /* the message in the sender's memory */
    uint64_t token;    /* echoed by the FIN */
    uint32_t rkey;
    uint32_t reserved;
} vb_rts;

typedef struct vb_fin {
    uint64_t token;
    uint32_t status;   /* VB_FIN_* */
    uint32_t reserved;
} vb_fin;

/* What every rank publishes at init (followed by `size` vb_qp_info, one per
 * peer, its own entry zero): how to reach its port, and the settings both
 * ends of a connection must agree on. */
typedef struct vb_port_info {
    uint32_t magic;
    uint16_t version;
    uint8_t link_layer;   /* IBV_LINK_LAYER_* */
    uint8_t port;
    uint16_t lid;
    uint8_t mtu;          /* enum ibv_mtu of the active port */
    uint8_t ok;           /* 0: this rank failed to set up; `reason` says why */
    uint8_t gid[16];
    int32_t gid_index;
    uint32_t eager_max;
    uint32_t credits;     /* the window this rank grants each peer */
    uint32_t max_rd_atomic;
    char dev[32];
    char host[64];
    char reason[192];
} vb_port_info;

typedef struct vb_qp_info {
    uint32_t qpn;
    uint32_t psn;
} vb_qp_info;

_Static_assert(sizeof(vb_hdr) == 32, "verbs header is 32 bytes");
_Static_assert(sizeof(vb_rts) == 24 && sizeof(vb_fin) == 16, "rts/fin payloads");
_Static_assert(sizeof(vb_port_info) == 332, "verbs port info is 332 bytes");

#endif
