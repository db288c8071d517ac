/*
 * The watchdog over comm plugin calls. plait/comm.h asks a transport's
 * wait() to return PLAIT_ERR_TIMEOUT when its timeout expires and its
 * isend/irecv/test to return at once; the core's own timeouts, error
 * relays and restarts all rest on that. A plugin that breaks it (a wait
 * that ignores its timeout on a stopped peer, a test that blocks on a
 * socket) would hang its rank, and with it the job, for ever: the thread
 * inside the plugin cannot be taken back.
 *
 * So the plugin calls of the data path (isend, irecv, test, wait, the
 * posting of a native collective; coll_p2p.c, coll_exec.c, comm_p2p.c and
 * the conformance kit's), those that set up and end communicators (init,
 * derive, destroy: comm.c and the kit's; a plugin waiting there for a
 * member that never comes would hang every rank at start) and abort()
 * (comm_state.c) are bracketed by plait_watchdog_enter/leave. The core
 * makes no reg()/dereg() calls, and the stream and event calls only
 * enqueue on a device stream and are not watched. One process-wide thread,
 * started by the first call (a rank's first is its world's init(); the
 * call goes on once the thread runs, and a thread that cannot be made is
 * warned about in the log), looks at the calls in flight five times a
 * second; a call still
 * inside the plugin past its limit (the timeout it was given plus a grace,
 * plait_watchdog_limit) ends the process: it prints what was stuck (the
 * plugin, the function, the communicator, the peer, the rule of
 * plait/comm.h broken), hands the same line to the launcher
 * (plait_launch_report_error) and exits with status 1. The launcher then
 * ends the other ranks naming this one, as for any failed rank, and
 * --max-restarts may start the job again: a hang becomes a failure.
 * PyTorch's NCCL watchdog does the same for a stuck NCCL kernel.
 *
 * Cost: enter and leave are a few stores, a fence and two atomic stores on
 * a slot of the calling thread; no clock is read on the calling thread (the
 * watchdog measures how long a call's sequence number stays unchanged;
 * time the process spent stopped does not count).
 *
 * Thread-safety: enter/leave from any thread, each thread its own slot
 * (released when the thread exits). 128 threads at a time are watched;
 * calls of further threads run unwatched. Calls do not nest. A child made
 * by fork() starts its own watchdog on its first call.
 */
#ifndef PLAIT_CORE_COMM_WATCHDOG_H
#define PLAIT_CORE_COMM_WATCHDOG_H

#include <plait/comm.h>

#include "plugin/loader.h"

/* One plugin call, as the watchdog would name it. Copied at enter. */
typedef struct plait_watched_call {
    const plait_comm_ops *ops; /* the plugin's table: its name is looked up when the call is reported */
    const char *fn;            /* static text: "wait", "test", "isend", "an all_reduce", ... */
    const char *rule;          /* static text: the rule of plait/comm.h it would break ("timeout", "progress",
                                * "setup", "loss") */
    const char *comm_name;     /* the communicator's name ("dp", "world"): copied (up to 47 bytes) */
    int peer;                  /* the world rank the call waits on; -1 when none or many */
    double timeout_s;          /* the timeout the call was handed (wait; init, derive: the bootstrap's;
                                * destroy: the communicator's), else 0 */
    double limit_s;            /* inside the plugin longer than this ends the process (<= 0: unwatched) */
} plait_watched_call;

/* The limit for a call handed `timeout_s` (or made on a communicator whose
 * timeout is `timeout_s`): the timeout plus a grace of 5 s and a tenth of
 * the timeout, for a transport that checks its clock between polls. An
 * infinite or non-positive timeout gives 0 (unwatched). */
double plait_watchdog_limit(double timeout_s);

/* Start the watchdog's thread now rather than at the first call: for a
 * caller that counts the process's threads (the kit's [cleanup] check)
 * and must not see it appear. Idempotent; thread-safe. */
void plait_watchdog_start(void);

/* The calling thread enters a plugin call / has left it. */
void plait_watchdog_enter(const plait_watched_call *call);
void plait_watchdog_leave(void);

struct plait_comm;
/* Enter a call of `comm`'s plugin: `timeout_s` > 0 for a wait handed that
 * timeout (rule [timeout]); 0 for isend, irecv, test and the posting of a
 * native collective, which must return at once (rule [progress]) and are
 * given the communicator's timeout. `peer` is a member of `comm`, or -1. */
void plait_watchdog_enter_comm(const struct plait_comm *comm, const char *fn, int peer, double timeout_s);

/* Enter `fn` ("init", "derive", "destroy") of the comm plugin `ops`, which
 * sets up or ends the communicator `comm_name` under the timeout
 * `timeout_s` (the bootstrap's for init and derive, the communicator's for
 * destroy): a plugin setup call (plugin/loader.h: an exit inside it is
 * named, a change it makes to the working directory or a PLAIT_* variable
 * refused), watched under rule [setup] with the limit
 * plait_watchdog_limit(timeout_s). A plugin waiting there for a member that
 * never comes must give up by its timeout like a wait(). */
void plait_watchdog_enter_setup(plait_plugin_call *call, const plait_comm_ops *ops, const char *fn,
                                const char *comm_name, double timeout_s);
/* It has returned `st`: plait_plugin_call_leave's answer. */
plait_status plait_watchdog_leave_setup(plait_plugin_call *call, plait_status st);
/* destroy(plugin_comm) of the comm plugin `ops` for the communicator
 * `comm_name`, watched as above under `timeout_s`. A change it makes to the
 * process is logged as a warning: with the communicator gone, nothing is
 * left to refuse. */
void plait_watchdog_destroy(const plait_comm_ops *ops, void *plugin_comm, const char *comm_name, double timeout_s);

#endif
