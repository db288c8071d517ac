/*
 * A signal that asks the process to stop at its next safe point instead of
 * ending it: [run] exit_signal. The handler only sets a flag (installed
 * with SA_RESTART, so that reads and writes carry on); whoever runs the
 * work asks plait_stop_signal_seen() where stopping is safe (the trainer:
 * after each step, agreed among the ranks, then a checkpoint).
 *
 * The names are the config's: none, SIGTERM, SIGINT, SIGHUP, SIGUSR1,
 * SIGUSR2. One signal at a time a process; install and release from the
 * main thread; plait_stop_signal_seen is async-signal-safe and may be
 * called from any thread.
 */
#ifndef PLAIT_CORE_RUNTIME_STOP_SIGNAL_H
#define PLAIT_CORE_RUNTIME_STOP_SIGNAL_H

/* The signal number a name stands for; 0 for "none" or a name not listed. */
int plait_stop_signal_number(const char *name);

/* The name of a listed signal number ("SIGTERM"); "none" otherwise. */
const char *plait_stop_signal_name(int sig);

/* Catch `sig` (a listed one; 0 does nothing) from now on, its flag
 * cleared. Replaces what was installed for it until release. Returns 0,
 * or -1 with errno where sigaction failed. */
int plait_stop_signal_catch(int sig);

/* The caught signal's number once it has arrived since catch, else 0. */
int plait_stop_signal_seen(void);

/* Put back what catch replaced; a no-op when nothing is caught. */
void plait_stop_signal_release(void);

#endif
