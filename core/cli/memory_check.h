/*
 * Before any rank starts: does the layout fit the memory of this host?
 *
 * The memory each rank will hold is what `plait plan` predicts for it (its
 * cost model: parameters, gradients and optimizer state by the ZeRO
 * formulas, activations by schedule, micro-batch and recomputation, working
 * buffers, the runtime). On a device whose memory is host memory (cpu) the
 * ranks on this host share what the host can still give (MemAvailable, a
 * cgroup's limit, ulimit -v per process); on a device with memory of its own
 * each rank's model state must fit its device's memory (asked of the
 * device in a child process, cli/cost_device.h, so the caller never opens
 * it and may still fork). A layout that does not fit is refused with the
 * prediction, its largest parts, what is available, and the changes of one
 * setting that would fit (a smaller micro-batch, recomputation, a ZeRO
 * stage), each predicted the same way. With [optim] offload the moments
 * are counted apart: offload_path's free space must hold the ranks' files
 * (nvme), and on a device of its own the host's memory what offload = host
 * keeps there; each refused naming the path or the memory, what is free and
 * what is needed.
 *
 * Not thread-safe (loads configs and plugins, uses the thread's error slot).
 */
#ifndef PLAIT_CLI_MEMORY_CHECK_H
#define PLAIT_CLI_MEMORY_CHECK_H

#include "config/config.h"

#include "cost/activations.h"
#include "cost/cost.h"

/* What plait plan predicts for each rank of `cfg` (finalized), in world
 * order, on this machine's defaults and the device `dev` describes: a
 * malloc'd array of *n (the caller frees it), or NULL (the preflight's
 * error set) when it has no layout. */
plait_cost_mem *plait_cli_predict_memory(plait_config *cfg, const plait_cost_device *dev, int *n);

/* Check `cfg` (finalized; loaded from `path` with the overrides `over`,
 * which rebuild its variants for the suggestions) for `local_ranks` ranks
 * on this host (0 = every rank of the layout). PLAIT_OK when it fits, when
 * [run] memory_check is false, or when there is nothing to compare with;
 * else PLAIT_ERR_NO_MEMORY with the whole explanation as the message
 * (ending "no rank was started"). */
plait_status plait_cli_memory_check(plait_config *cfg, const char *path, int n_over, char *const *over,
                                    int local_ranks);

/* Bytes free in [optim] offload_path (statvfs), or -1 with the reason in
 * `why` (may be NULL) when it is unset, missing or read-only. */
double plait_cli_offload_free(const plait_config *cfg, char *why, size_t cap);

#endif
