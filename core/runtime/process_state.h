/*
 * What a plugin call may change in the process that plait goes on relying
 * on: the working directory (every relative path of the run: its config,
 * data, out_dir), the PLAIT_* environment variables (the rank's place in
 * the job, its settings, the job's token) and the few others a run reads
 * after its plugins are loaded (PLAIT_WATCHED_OTHERS: where scratch files
 * and the measured-peak cache go, the rendezvous directory, the GPUs the
 * nccl plugin numbers). Other variables are not plait's to watch. A plugin runs in the rank's
 * process with its rights, so nothing stops it changing them; plait notes
 * both before each plugin setup call and compares after it
 * (plugin/loader.h's plait_plugin_call), and a run notes them when it opens
 * and compares after its set-up and after each step's calls
 * (train/run.h's plait_run_check_process; `bench comm` after each size,
 * `sample` after each token), refusing a change rather than running on in
 * a process that no longer matches its job.
 *
 * Cost: one getcwd() and one walk of environ per take or compare (about a
 * microsecond with a few PLAIT_* variables, ten with thirty:
 * test_process_state times it).
 *
 * Thread-safety: as getenv(): a thread changing the environment during a
 * take or a compare is the race the C library already has.
 */
#ifndef PLAIT_CORE_RUNTIME_PROCESS_STATE_H
#define PLAIT_CORE_RUNTIME_PROCESS_STATE_H

#include <stddef.h>

#include <plait/types.h>

/* The variables besides PLAIT_* that are noted and compared. */
#define PLAIT_WATCHED_OTHERS "HOME, TMPDIR, XDG_CACHE_HOME, XDG_RUNTIME_DIR, CUDA_VISIBLE_DEVICES"

typedef struct plait_process_state {
    char *cwd;      /* NULL when getcwd() failed (a removed directory): not compared */
    char *env;      /* the watched entries of environ, "NAME=VALUE\0" each, in its order */
    size_t env_len; /* bytes of `env`; env == NULL: out of memory, not compared */
} plait_process_state;

/* Note the working directory and the watched variables now. */
void plait_process_state_take(plait_process_state *s);

/* 1 if the working directory or a watched variable differs from `before`,
 * each change written to `what` (", " between them): "the working
 * directory from '/a' to '/b'", "PLAIT_X from '1' to '2'", "PLAIT_Y set to
 * '1'", "PLAIT_Z unset (was '1')". The value of a variable whose name says
 * it may hold a secret (TOKEN, SECRET, PASSWORD, KEY, AUTH, CRED) is never
 * written, only its name ("PLAIT_JOB_TOKEN set (value not shown)"). 0 if
 * nothing changed. */
int plait_process_state_changed(const plait_process_state *before, char *what, size_t cap);

/* PLAIT_OK when nothing changed since `before` (the error untouched);
 * else PLAIT_ERR_ABI with the error set: "<subject> changed the process:
 * <each change, as above>; a plugin must leave the process's working
 * directory and PLAIT_* variables (and ...) as it found them: ..., so it stops
 * rather than follow the change<tail>". `subject` names the calls that ran
 * ("the comm plugin 'tcp''s init()"); `tail` ("": none) follows. `before`
 * stays the caller's. */
plait_status plait_process_state_refuse(const plait_process_state *before, const char *subject, const char *tail);

void plait_process_state_free(plait_process_state *s);

/* 1 if the environment variable named by the `len` bytes at `name` may
 * hold a secret (its name contains TOKEN, SECRET, PASSWORD, KEY, AUTH or
 * CRED, as PLAIT_JOB_TOKEN does): whatever plait prints names it and never
 * shows its value. */
int plait_env_name_secret(const char *name, size_t len);

#endif
