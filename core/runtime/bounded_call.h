/*
 * Calling code that may never return (a plugin's entry function or probe,
 * which must only answer at once) in a thread of its own, waiting for it at
 * most a given time. Unlike runtime/fork_call.h it runs in this process, so
 * what it returns is usable here (a descriptor array, a status), and costs
 * no fork; but a call that does not return cannot be stopped: it is left
 * running and abandoned, and the caller refuses what it belongs to. Use it
 * only where nothing the call holds (a lock of libc or of the dynamic
 * loader) is needed afterwards: not around dlopen.
 *
 * Thread-safe; blocks the caller until the call returns or the limit passes.
 */
#ifndef PLAIT_CORE_RUNTIME_BOUNDED_CALL_H
#define PLAIT_CORE_RUNTIME_BOUNDED_CALL_H

#include <stddef.h>
#include <plait/types.h>

/* Run fn(arg) in a new thread, on a copy of the `arg_size` bytes at `arg`
 * (so that an abandoned call never writes into the caller's memory), and
 * wait at most `limit_s` seconds (<= 0: no limit). Returns 1 when fn
 * returned: its result in *st, the thread's error message set on the
 * calling thread as fn left it, the copy written back to `arg`, and the
 * thread ended (joined: nothing of the call outlives it). Returns
 * 0 when it did not return in time (*st PLAIT_ERR_TIMEOUT, no error set:
 * the caller says what hung; the thread is abandoned, owning the copy) or
 * no thread could be started (*st PLAIT_ERR_SYSTEM, the error set); `arg`
 * is then untouched. */
int plait_bounded_call(plait_status (*fn)(void *arg), void *arg, size_t arg_size, double limit_s, plait_status *st);

#endif
