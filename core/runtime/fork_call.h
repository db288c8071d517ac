/*
 * Calling untrusted code in a forked child: a plugin's constructor, entry,
 * probe or report that crashes, exits or never returns takes down only the
 * child, and the caller learns which of those happened. What the child has
 * to say comes back through a pipe as bytes the caller parses. The parent
 * loads and runs nothing of it.
 *
 * Fork, not spawn: the child runs a function of this process. So call it
 * before this process creates a CUDA context (a driver context does not
 * survive fork; plait doctor gathers its plugins' reports before it opens
 * any device), and expect the child to have only the calling thread.
 * Thread-safe otherwise; blocks until the child ends or is stopped.
 */
#ifndef PLAIT_CORE_RUNTIME_FORK_CALL_H
#define PLAIT_CORE_RUNTIME_FORK_CALL_H

#include <stddef.h>

typedef struct plait_fork_result {
    int started;  /* 0: no pipe or no child (errno set); fn did not run */
    char *out;    /* what the child wrote to its fd (malloc'd, the caller frees; NULL if nothing) */
    size_t len;
    int status;   /* the child's wait status (WIFEXITED, WIFSIGNALED, ...) */
    int hung;     /* it had not finished within the limit and was killed */
} plait_fork_result;

/* In a child, run fn(fd, arg): fn writes its answer to fd and returns the
 * child's exit status (it exits with _exit: no atexit handlers, nothing
 * unloaded). The parent collects what was written until the child closes
 * the pipe or `limit_s` seconds pass (then it kills the child: hung). */
void plait_fork_call(int (*fn)(int fd, void *arg), void *arg, double limit_s, plait_fork_result *res);

/* Write all n bytes to fd (EINTR retried): 0, or -1. */
int plait_write_all(int fd, const void *buf, size_t n);

/* The child ended normally, with exit status 0, within the limit. */
int plait_fork_ok(const plait_fork_result *res);

#endif
