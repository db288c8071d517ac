/* Each rank's environment (rank_env.h). */
#include "launch/rank_env.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

static const char *const g_owned_vars[] = {
    "PLAIT_RANK", "PLAIT_WORLD_SIZE", "PLAIT_LOCAL_RANK", "PLAIT_LOCAL_SIZE", "PLAIT_STORE_ADDR",
    "PLAIT_JOB_TOKEN", "PLAIT_STORE_FD", "PLAIT_REPORT_FD", "PLAIT_MATH_THREADS", "PLAIT_NNODES",
    "PLAIT_RESTART_COUNT", "PLAIT_MAX_RESTARTS", "PLAIT_RESTART_REASON", "PLAIT_RESTART_NEW_DIR", "PLAIT_AGENT_FD", "PLAIT_ELASTIC_HOSTS", "PLAIT_ELASTIC_CHANGES",
    "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", NULL};

static int owned(const char *entry) {
    for (int i = 0; g_owned_vars[i]; i++) {
        size_t n = strlen(g_owned_vars[i]);
        if (strncmp(entry, g_owned_vars[i], n) == 0 && entry[n] == '=') return 1;
    }
    return 0;
}

char **plait_launch_rank_env(const plait_launch_opts *o, int rank, const char *store_addr, const char *token,
                             int listen_fd, int report_fd, int threads, int agent_fd) {
    int nodes = o->nnodes > 1 ? o->nnodes : 1, node = nodes > 1 ? o->node_rank : 0;
    size_t n = 0, extra = 0;
    while (environ[n]) n++;
    while (o->extra_env && o->extra_env[extra]) extra++;
    char **env = calloc(n + extra + 16, sizeof *env);
    if (!env) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!owned(environ[i])) env[k++] = strdup(environ[i]);
    char buf[512];
#define ADD(...) (snprintf(buf, sizeof buf, __VA_ARGS__), env[k++] = strdup(buf))
    ADD("PLAIT_RANK=%d", node * o->nranks + rank);
    ADD("PLAIT_WORLD_SIZE=%d", nodes * o->nranks);
    ADD("PLAIT_LOCAL_RANK=%d", rank);
    ADD("PLAIT_LOCAL_SIZE=%d", o->nranks);
    ADD("PLAIT_NNODES=%d", nodes);
    ADD("PLAIT_STORE_ADDR=%s", store_addr);
    ADD("PLAIT_JOB_TOKEN=%s", token);
    ADD("PLAIT_REPORT_FD=%d", report_fd);
    ADD("PLAIT_MATH_THREADS=%d", threads);
    ADD("OPENBLAS_NUM_THREADS=%d", threads);
    ADD("OMP_NUM_THREADS=%d", threads);
    if (rank == 0 && listen_fd >= 0) ADD("PLAIT_STORE_FD=%d", listen_fd);
    if (agent_fd >= 0) ADD("PLAIT_AGENT_FD=%d", agent_fd);
#undef ADD
    for (size_t i = 0; i < extra; i++) env[k++] = strdup(o->extra_env[i]);
    for (size_t i = 0; i < k; i++)
        if (!env[i]) return NULL; /* leaks on OOM; the launch fails anyway */
    return env;
}

void plait_launch_rank_env_free(char **env) {
    if (!env) return;
    for (char **p = env; *p; p++) free(*p);
    free(env);
}
