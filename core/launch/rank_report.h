/*
 * A rank's report pipe to plait's launcher (launch.h): the rank's side,
 * and the wire both sides read. The launcher gives each rank the write end
 * as PLAIT_REPORT_FD. A rank writes one line a report, below PIPE_BUF so
 * that no two interleave: its last error line, which the launcher shows
 * when the rank fails, the finished mark, or the signal it handles.
 */
#ifndef PLAIT_CORE_LAUNCH_RANK_REPORT_H
#define PLAIT_CORE_LAUNCH_RANK_REPORT_H

/* The longest line either side handles, its newline included. */
#define PLAIT_REPORT_LINE 1024

/* A rank's line that says its command has finished, followed by its pid;
 * an error line never starts with this byte (ASCII ACK), which
 * plait_launch_report_error replaces. */
#define PLAIT_REPORT_FINISHED_MARK "\006finished "

/* A rank's line that says which signal it stops at with a checkpoint
 * ([run] exit_signal), then its pid: "\006handles <signal> <pid>". */
#define PLAIT_REPORT_HANDLES_MARK "\006handles "

/* In a rank: tell the launcher (if any: PLAIT_REPORT_FD) the error this
 * rank is about to fail with. The last report before the rank exits is
 * what the launcher shows. Newlines are folded. Thread-safe, cheap, never
 * fails visibly; a no-op outside a plait launch. */
void plait_launch_report_error(const char *message);

/* In a rank: tell the launcher (if any: PLAIT_REPORT_FD) that this
 * process's command has finished, so that its exit status, 0 included, is
 * the command's own; main calls it as it returns (cli/main.c). A rank
 * that ends without it (an _exit(0) in a plugin or a library) is a failed
 * rank to a launcher with expect_finished. The mark names this process's
 * pid: a plait process started by a rank, which inherits the pipe, cannot
 * mark the rank finished. Thread-safe, never fails visibly (a launcher
 * that is gone does not raise SIGPIPE); a no-op outside a plait launch, so
 * under mpirun, srun or torchrun a rank's exit status is all its launcher
 * learns. */
void plait_launch_report_finished(void);

/* In a rank: tell the launcher (if any) that this process stops at signal
 * `sig` after its step, with a checkpoint, and exits 0 ([run]
 * exit_signal), so that the launcher passes that signal on to the ranks
 * without counting it an interruption. Thread-safe, never fails visibly;
 * a no-op outside a plait launch. */
void plait_launch_report_handles(int sig);

#endif
