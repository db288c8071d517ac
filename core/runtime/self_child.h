/*
 * Running this very program again as a child (bench sweep's layouts, the
 * conformance kit's training runs): /proc/self/exe with an argument list,
 * its stdout and stderr into a log file, waited for. Not for ranks of a
 * job (launch/ starts those, with the job's environment).
 * Thread-safe (posix_spawn); blocks until the child exits.
 */
#ifndef PLAIT_CORE_RUNTIME_SELF_CHILD_H
#define PLAIT_CORE_RUNTIME_SELF_CHILD_H

#include <stddef.h>

/* Run /proc/self/exe with `argv` (NULL-terminated; argv[0] is the name it
 * sees) and the current environment, output to `log` (created or
 * truncated, never through a link: runtime/out_file.h). Returns the exit
 * status (0..255), 128+signal when a signal ended it, or -1 when it could
 * not start (the error set: the log refused, or no process). */
int plait_self_child_run(const char *const *argv, const char *log);

/* The last non-empty line of text file `path` without its newline, into
 * out[cap] ("" when the file is missing, empty or not a regular file). */
void plait_file_last_line(const char *path, char *out, size_t cap);

#endif
