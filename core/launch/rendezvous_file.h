/*
 * The private rendezvous file of a job whose ranks all run on this host but
 * whose launcher gives no store address or token (mpirun / srun on one
 * node): rank 0 publishes its store's port and a fresh token in a mode-0600
 * file inside a per-user mode-0700 directory; the other ranks wait for it.
 * See bootstrap.h for where it lives.
 *
 * Thread-safety: no shared state; each rank uses it from its joining thread.
 */
#ifndef PLAIT_CORE_RENDEZVOUS_FILE_H
#define PLAIT_CORE_RENDEZVOUS_FILE_H

#include <stddef.h>
#include <plait/types.h>

/* The file's path for `job_id`, creating the per-user directory (0700) if
 * needed and refusing one that another user owns or others can write. */
plait_status plait_rdv_file_path(const char *job_id, char *path, size_t cap);
/* Atomically (temp file + rename) write port and token. */
plait_status plait_rdv_file_publish(const char *path, int port, const char *token);
/* Wait (sleeping ~20 ms between looks) until the file exists, is ours,
 * mode 0600, well-formed and written by a live process; then return its
 * port and token. PLAIT_ERR_TIMEOUT after `deadline` (plait_clock_now()). */
plait_status plait_rdv_file_wait(const char *path, double deadline, int *port, char *token,
                                 size_t token_cap);
void plait_rdv_file_remove(const char *path);

#endif
