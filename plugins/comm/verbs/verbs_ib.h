/*
 * The verbs plugin's fabric over libibverbs (vb_fabric_ops for the engine):
 * device and port selection, one protection domain, completion channel,
 * completion queue and shared receive queue per world, one RC QP per peer,
 * the QP address exchange through the bootstrap, and the progress thread.
 *
 * Life cycle (verbs_plugin.c):
 *   vb_ib_open        pick and open the device (may fail: the caller still
 *                     takes part in the exchange, reporting why)
 *   vb_ib_exchange    allgather port and QP facts; every rank fails at once
 *                     if any rank failed, naming it; QPs to RTR and RTS
 *   (engine created over it: receive buffers posted; then a barrier)
 *   vb_ib_start       the progress thread
 *   vb_ib_stop, vb_ib_destroy_qps, (engine freed), vb_ib_close
 */
#ifndef PLAIT_VERBS_IB_H
#define PLAIT_VERBS_IB_H

#include "verbs.h"

typedef struct vb_ib vb_ib;

extern const vb_fabric_ops vb_ib_ops;

/* Is there an RDMA device with an active port? PLAIT_OK, or
 * PLAIT_ERR_UNSUPPORTED naming why ("no RDMA device found", or the device
 * and port states). Opens devices only to query them; prints nothing. */
plait_status vb_ib_probe(const plait_host *h);

/* Open the device of [comm.verbs] (or the first with an active port).
 * On failure *out is still a valid handle holding the reason, so the caller
 * can report it in the exchange; close it afterwards. */
plait_status vb_ib_open(const plait_host *h, const vb_settings *cfg, int rank, int size, vb_ib **out);

/* Exchange with every member and connect every QP. `failed_why` non-NULL:
 * this rank failed locally and only reports it. *peer_credits receives the
 * window each peer grants (size entries, owned by ib). *exchanged is 1 once
 * the allgather itself completed (every member then took part, whatever
 * failed after it). */
plait_status vb_ib_exchange(vb_ib *ib, const plait_bootstrap *bs, const char *failed_why,
                            const uint32_t **peer_credits, int *exchanged);

/* Send-side completions the CQ can absorb beyond the receive buffers. */
int vb_ib_send_budget(const vb_ib *ib);

plait_status vb_ib_start(vb_ib *ib, vb_engine *e);
void vb_ib_stop(vb_ib *ib);
void vb_ib_destroy_qps(vb_ib *ib);
void vb_ib_close(vb_ib *ib);

/* "mlx5_0 port 1 (InfiniBand, LID 7)" of this rank, for logs. */
const char *vb_ib_where(const vb_ib *ib);

#endif
