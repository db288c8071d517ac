/*
 * Thread-local error messages: every fallible core function returns a
 * plait_status and leaves the text here. Plugins reach the same store through
 * host->set_error / host->last_error.
 */
#ifndef PLAIT_CORE_ERROR_H
#define PLAIT_CORE_ERROR_H

#include <stdarg.h>
#include <plait/types.h>

/* Store the calling thread's message (formatted, truncated to 2 KiB) and
 * return `status`. Thread-safe (each thread has its own message). */
plait_status plait_set_error(plait_status status, const char *fmt, ...) PLAIT_PRINTF(2, 3);
plait_status plait_vset_error(plait_status status, const char *fmt, va_list ap);
/* Prefix the current message with formatted context: "loading x: <old>". */
plait_status plait_wrap_error(plait_status status, const char *fmt, ...) PLAIT_PRINTF(2, 3);
/* The calling thread's last message; "" if none. Valid until the next set. */
const char *plait_last_error(void);
void plait_clear_error(void);
/* How many messages this thread has set or wrapped so far: a caller that
 * compares the count before and after a plugin's call knows whether the
 * plugin set one, without clearing the message already there (which an
 * error being reported may still need). */
uint64_t plait_error_sets(void);
/* `raw` (NULL: "") as it may be shown on a terminal or in a log: control
 * bytes other than newline and tab, DEL and invalid UTF-8 written as \xNN,
 * so text from a file, a peer or a plugin cannot drive the terminal.
 * Truncated to fit out[cap] (cap > 0); returns its length. Thread-safe. */
size_t plait_printable_copy(char *out, size_t cap, const char *raw);
/* A failure no restart can mend (the run directory taken by another run or
 * removed under this one): marked where it is found, for the process to
 * exit with the status that tells a restarting launcher to end the job
 * (launch/restart.h). Process-wide, sticky, thread-safe. */
void plait_error_mark_final(void);
int plait_error_is_final(void);
/* Static lower-case name of a status ("timeout"). */
const char *plait_status_name(plait_status status);

/* Whether a failure message is second-hand: a rank going down tells its
 * peers why (the transports write "rank N is going down: REASON"), and a
 * rank that stops because of another says "... stopped after REASON" (the
 * core's relay "world rank N stopped after REASON", a rank's short final
 * error "stopped after world rank N failed"), so a chain of them nests to
 * the right. Returns NULL for a first-hand failure; else the innermost
 * account (a pointer into `message`), with *origin the world rank it names
 * ("rank N stopped...", "world rank N..." or the first "(world rank N)"),
 * -1 when it names none. Pure; thread-safe. */
const char *plait_error_relayed(const char *message, int *origin);

/* The world rank a timeout names as the one waited for: in "... timed
 * out after T s waiting to receive from rank 1 (world rank 5) ..." (the
 * communication layer's account of a wait that ran past [comm] timeout,
 * first-hand or relayed), the first "(world rank N)" after "timed out".
 * -1 when the message reports no such timeout. Pure; thread-safe. */
int plait_error_waited_for(const char *message);

/* The world rank hosting the job's store when `message` reports a failure
 * to reach or talk to it ("the job's store (hosted by rank 0) at ... closed
 * the connection"): a rank that could not join because the host went down
 * first. -1 when the message names no store host. Pure; thread-safe. */
int plait_error_store_host(const char *message);

#endif
