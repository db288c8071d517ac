/* The restart facts passed from the launcher to its ranks (restart.h). */
#include "launch/restart.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

void plait_restart_env(const plait_restart_facts *f, char **env) {
    char buf[2200];
    int k = 0;
    snprintf(buf, sizeof buf, "PLAIT_RESTART_COUNT=%d", f->attempt);
    if ((env[k] = strdup(buf))) k++;
    snprintf(buf, sizeof buf, "PLAIT_MAX_RESTARTS=%d", f->max_restarts);
    if ((env[k] = strdup(buf))) k++;
    if (f->reason && *f->reason) {
        snprintf(buf, sizeof buf, "PLAIT_RESTART_REASON=%s", f->reason);
        if ((env[k] = strdup(buf))) k++;
    }
    if (f->new_dir && (env[k] = strdup("PLAIT_RESTART_NEW_DIR=1"))) k++;
    if (f->hosts > 0) {
        snprintf(buf, sizeof buf, "PLAIT_ELASTIC_HOSTS=%d", f->hosts);
        if ((env[k] = strdup(buf))) k++;
        snprintf(buf, sizeof buf, "PLAIT_ELASTIC_CHANGES=%d", f->changes);
        if ((env[k] = strdup(buf))) k++;
    }
    env[k] = NULL;
}

void plait_restart_env_free(char **env) {
    for (int i = 0; env[i]; i++) free(env[i]);
}

static int env_count(const char *name) {
    const char *v = getenv(name);
    char *end = NULL;
    long n = v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && n >= 0 && n <= 1000000 ? (int)n : 0;
}

int plait_restart_count(void) { return env_count("PLAIT_RESTART_COUNT"); }
int plait_restart_max(void) { return env_count("PLAIT_MAX_RESTARTS"); }

const char *plait_restart_reason(void) {
    const char *v = getenv("PLAIT_RESTART_REASON");
    return v ? v : "";
}

int plait_restart_new_dir(void) { return env_count("PLAIT_RESTART_NEW_DIR") == 1; }
int plait_restart_hosts(void) { return env_count("PLAIT_ELASTIC_HOSTS"); }
int plait_restart_changes(void) { return env_count("PLAIT_ELASTIC_CHANGES"); }

int plait_restart_failure_exit(int status) {
    int final = status == PLAIT_ERR_INVALID_CONFIG || plait_error_is_final();
    return final && getenv("PLAIT_REPORT_FD") ? PLAIT_RESTART_FINAL_EXIT : 1;
}
