/*
 * The guard against a clean-looking early exit. plait's commands end by
 * returning from main; nothing of plait calls exit() (cli/cli.h). A process
 * that nevertheless exits while its command runs was ended by code plait
 * loaded: a plugin calling exit(0) in its init, a library giving up. Exit
 * status 0 would tell a launcher (plait's own, mpirun, srun) that the rank
 * succeeded, and its peers would wait for it until [comm] timeout.
 *
 * So while armed, an exit of this process is reported as an error naming
 * what the process was inside (the innermost plait_exit_guard_enter of the
 * calling thread, else of the thread that armed the guard): on stderr, in
 * the log file and through the report function (the launcher's report
 * channel). An exit with status 0 then becomes exit status 1, so that it is
 * counted as the failure it is; another status is kept.
 *
 * Handlers registered with atexit() or on_exit() before the guard was
 * armed are skipped on such an exit (the guard ends the process with
 * _exit), so arm it early: main arms it before the command runs. _exit()
 * and signals pass it by; plait's launcher still counts a rank that ends
 * with status 0 before main returned as failed (it never marked its command
 * finished: launch/launch.h). A child made by fork() is not guarded: its
 * exits are its parent's to judge (runtime/fork_call.h).
 *
 * Thread-safety: enter/leave from any thread, each thread its own stack of
 * marks (4 deep are named; deeper ones are counted, not kept). Arm and
 * disarm from one thread.
 */
#ifndef PLAIT_CORE_RUNTIME_EXIT_GUARD_H
#define PLAIT_CORE_RUNTIME_EXIT_GUARD_H

#include <plait/types.h>

/* From now on an exit of this process is reported, `command` ("plait
 * train", copied) prefixing the message; `report` (may be NULL) is handed the message
 * besides stderr and the log file. The first call registers the handler;
 * later calls re-arm it. */
void plait_exit_guard_arm(const char *command, void (*report)(const char *message));
/* The command has finished: exits are plait's own again. */
void plait_exit_guard_disarm(void);

/* The calling thread enters a part the message can name ("inside the comm
 * plugin 'tcp''s init()") / has left it. Pairs nest. */
void plait_exit_guard_enter(const char *fmt, ...) PLAIT_PRINTF(1, 2);
void plait_exit_guard_leave(void);

#endif
