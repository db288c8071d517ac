/*
 * A host's replica keeper: a thread of the host's launcher that keeps the
 * in-memory copies of checkpoint shards (elastic/agent_wire.h's entries,
 * each a sealed memfd) for as long as the launcher lives, across its ranks'
 * restarts, and answers its ranks over one socket pair each:
 *   PUT      keep an image (the rank's own shard, or a peer's it received);
 *            for each shard the two newest steps are kept, so the newest
 *            complete step survives a snapshot that a failure cut short;
 *   LIST     what this host holds;
 *   GET      one image's fd, for a restarted rank to map;
 *   REGROUP  whether a host waits to join (the rank regroups at its
 *            boundary: elastic/membership.h).
 * The memory is the memfds': it lives in this process, so a rank that dies
 * loses nothing, and the host that dies takes only its own copies.
 *
 * Thread-safety: attach/detach/stop from one thread (the launcher's main
 * thread); the keeper's thread does the rest.
 */
#ifndef PLAIT_CORE_ELASTIC_AGENT_H
#define PLAIT_CORE_ELASTIC_AGENT_H

#include <stddef.h>
#include <stdint.h>
#include <plait/types.h>

typedef struct plait_agent plait_agent;

/* Start the keeper. `grow` (may be NULL) answers REGROUP; it is called on
 * the keeper's thread and must be thread-safe. */
plait_status plait_agent_start(int (*grow)(void *ctx), void *ctx, plait_agent **out);
/* One socket pair per rank of the next attempt: child_fds[i] (nranks
 * entries) is for local rank i to inherit (close-on-exec; the launcher
 * clears that in the child); the caller closes them once the ranks started.
 * Replaces the previous attempt's. */
plait_status plait_agent_attach(plait_agent *a, int nranks, int *child_fds);
/* Forget the attempt's sockets (the images stay): the keeper's thread
 * closes its ends, and the call returns once it has, so a new attempt's
 * sockets never share a number with one the thread still serves. */
void plait_agent_detach(plait_agent *a);
/* Images held and their bytes. Thread-safe. */
void plait_agent_held(plait_agent *a, int *images, uint64_t *bytes);
/* Stop the thread and free every image. NULL is ignored. */
void plait_agent_stop(plait_agent *a);

#endif
