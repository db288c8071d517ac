/*
 * A small pool of device events (plait/device.h, ABI 1.4) for one-use
 * marks the core records itself: the ready event of a collective or a
 * send/receive whose caller named none (commstate/comm_device.h). Without it
 * every such call would create and destroy an event (cudaEventCreate and
 * cudaEventDestroy, a few microseconds each, per bucket and per ZeRO-3
 * gather); with it a run creates only as many as are ever in flight at
 * once, in its first step, and reuses them.
 *
 * Ownership: an event from plait_event_pool_get belongs to the caller until
 * it hands it back with plait_event_pool_put, which it does once nothing
 * waits on it any more (a CUDA stream wait already queued on it is not a
 * use: cudaStreamWaitEvent takes the event's state at its call). The pool
 * keeps up to PLAIT_EVENT_POOL_IDLE idle events (more are destroyed on
 * put) of one device table, the first one it is given after it was
 * drained; another table's events (a test's stand-in device registered
 * while another is pooled) are created and destroyed directly.
 *
 * Lifetime: every pooled event belongs to the open device; the pool must
 * be drained before that device closes (plait_device_close does it) or a
 * registered stand-in is replaced (commstate/comm_device.c does it).
 *
 * Thread-safety: get and put from any thread (a mutex); drain while no
 * event of the pool is in use. Errors: get returns NULL with the device's
 * message set when it cannot create an event.
 */
#ifndef PLAIT_CORE_DEVICE_EVENT_POOL_H
#define PLAIT_CORE_DEVICE_EVENT_POOL_H

#include <plait/device.h>

#define PLAIT_EVENT_POOL_IDLE 64

/* An event of `ops` (a table with events): an idle pooled one, else a new one. */
plait_device_event *plait_event_pool_get(const plait_device_ops *ops);
/* Hand `ev` (from plait_event_pool_get with the same `ops`) back; NULL is ignored. */
void plait_event_pool_put(const plait_device_ops *ops, plait_device_event *ev);
/* Destroy every idle event and forget their table. */
void plait_event_pool_drain(void);

#endif
