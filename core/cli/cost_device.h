/*
 * The device whose memory `plait plan`, `plait bench sweep`, `plait config
 * check` and the check before `plait train` count, as the cost model needs
 * it (its kernel table's bf16 path and attention scratch) and the memory
 * check (its own memory, if any).
 *
 * A config's ranks run its `[device] plugin`. The cpu device is not
 * opened: its kernels are the core's and its memory is the host's. Any
 * other device is opened in a child process, since opening it here would
 * leave a driver context in a process that may fork ranks next (CUDA does
 * not survive fork). A device that does not open here (no GPU) is counted
 * as the cpu device, with its reason kept for the one line that says so.
 * The answer is kept for the rest of the process: asking again for the
 * same device, ordinal, precision and model shape (config check's table,
 * then its verdict; the memory check of each elastic round) opens nothing.
 *
 * A cluster file says what its ranks run instead (plait_cli_device_planned):
 * a GPU cluster the cuda device, a CPU node the cpu device; nothing is
 * opened.
 *
 * Not thread-safe (the kept answer; fork).
 */
#ifndef PLAIT_CLI_COST_DEVICE_H
#define PLAIT_CLI_COST_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "cost/activations.h"
#include "cost/cluster.h"

typedef struct plait_cli_device {
    char counted[64];      /* the device the memory is counted for: "cuda_emu", or "cpu" */
    char note[640];        /* why that one, one clause: "[device] plugin", or why the named one did not open */
    int fell_back;         /* the named device did not open here, so the cpu device is counted */
    uint64_t memory_bytes; /* its own memory; 0 = host memory, or it cannot say */
    char name[128];        /* what it calls itself, when memory_bytes > 0 */
    plait_cost_device cost;
} plait_cli_device;

/* The device the ranks of `cfg` (finalized) will open, asked as above. */
void plait_cli_device_ask(const plait_config *cfg, plait_cli_device *out);

/* The device the ranks of cluster `c` run, for the model of `cfg`. */
void plait_cli_device_planned(const plait_config *cfg, const plait_cluster *c, plait_cli_device *out);

/* "memory counted for the cuda_emu device ([device] plugin)": one line,
 * without a newline, into buf. */
void plait_cli_device_line(const plait_cli_device *d, char *buf, size_t cap);

#endif
