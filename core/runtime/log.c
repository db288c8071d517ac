#include "runtime/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/out_file.h"

#define MAX_COMPONENT_RULES 16

struct component_rule {
    char name[32];
    int level;
};

static struct {
    pthread_mutex_t lock;
    int level;
    int n_rules;
    struct component_rule rules[MAX_COMPONENT_RULES];
    int rank;
    int file_fd;
    int initialized;
    struct timespec start;
    int status_fd;        /* the in-place line's descriptor, -1 = none */
    char status[512];     /* its text */
} g_log = {.lock = PTHREAD_MUTEX_INITIALIZER, .level = PLAIT_LOG_INFO, .rank = -1, .file_fd = -1, .status_fd = -1};

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

const char *plait_log_level_name(plait_log_level level) {
    if ((int)level < 0 || (int)level > PLAIT_LOG_TRACE) return "?";
    return level_names[level];
}

int plait_log_level_parse(const char *name) {
    for (int i = 0; i <= PLAIT_LOG_TRACE; i++)
        if (strcasecmp(name, level_names[i]) == 0) return i;
    if (strcasecmp(name, "warning") == 0) return PLAIT_LOG_WARN;
    return -1;
}

/* " name " -> "name" in place. */
static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = '\0';
    return s;
}

/* Parse `spec` on top of the default level `*level`; 0 or -1 (unknown level,
 * empty component, too many components). */
static int parse_spec(const char *spec, int *level, struct component_rule *rules, int *n_rules) {
    char buf[512];
    if (snprintf(buf, sizeof buf, "%s", spec) >= (int)sizeof buf) return -1;
    *n_rules = 0;
    char *save = NULL;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            int l = plait_log_level_parse(trim(item));
            if (l < 0) return -1;
            *level = l;
            continue;
        }
        *eq = '\0';
        char *name = trim(item);
        int l = plait_log_level_parse(trim(eq + 1));
        if (l < 0 || !*name || strlen(name) >= sizeof rules[0].name || *n_rules == MAX_COMPONENT_RULES) return -1;
        snprintf(rules[*n_rules].name, sizeof rules[0].name, "%s", name);
        rules[*n_rules].level = l;
        (*n_rules)++;
    }
    return 0;
}

int plait_log_check_spec(const char *spec) {
    int level = PLAIT_LOG_INFO, n_rules = 0;
    struct component_rule rules[MAX_COMPONENT_RULES];
    return parse_spec(spec, &level, rules, &n_rules);
}

int plait_log_configure(const char *spec) {
    int level = g_log.level, n_rules = 0;
    struct component_rule rules[MAX_COMPONENT_RULES];
    if (parse_spec(spec, &level, rules, &n_rules) != 0) return -1;
    pthread_mutex_lock(&g_log.lock);
    g_log.level = level;
    g_log.n_rules = n_rules;
    memcpy(g_log.rules, rules, sizeof(rules[0]) * (size_t)n_rules);
    pthread_mutex_unlock(&g_log.lock);
    return 0;
}

static void log_init_once(void) {
    if (g_log.initialized) return;
    g_log.initialized = 1;
    clock_gettime(CLOCK_MONOTONIC, &g_log.start);
}

void plait_log_init_from_env(void) {
    log_init_once();
    const char *spec = getenv("PLAIT_LOG_LEVEL");
    if (spec && *spec && plait_log_configure(spec) != 0)
        fprintf(stderr, "plait: warning: PLAIT_LOG_LEVEL='%s' is not valid (use error, warn, "
                        "info, debug or trace, optionally with component=level items); "
                        "using info\n", spec);
}

void plait_log_set_rank(int rank) { g_log.rank = rank; }

int plait_log_set_file(const char *path) {
    int fd = -1;
    if (path) {
        /* never through a link, never a FIFO or a device (out_file.h) */
        if (plait_out_open(path, O_APPEND, &fd) != PLAIT_OK) return -1;
    }
    pthread_mutex_lock(&g_log.lock);
    int old = g_log.file_fd;
    g_log.file_fd = fd;
    pthread_mutex_unlock(&g_log.lock);
    if (old >= 0) close(old);
    return 0;
}

int plait_log_enabled_for(plait_log_level level, const char *component) {
    int limit = g_log.level;
    if (component) {
        for (int i = 0; i < g_log.n_rules; i++)
            if (strcmp(g_log.rules[i].name, component) == 0) limit = g_log.rules[i].level;
    }
    return (int)level <= limit;
}

int plait_log_enabled(plait_log_level level) {
    if ((int)level <= g_log.level) return 1;
    for (int i = 0; i < g_log.n_rules; i++)
        if ((int)level <= g_log.rules[i].level) return 1;
    return 0;
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        p += w;
        n -= (size_t)w;
    }
}

void plait_log_set_status_line(int fd, const char *text) {
    pthread_mutex_lock(&g_log.lock);
    g_log.status_fd = text ? fd : -1;
    snprintf(g_log.status, sizeof g_log.status, "%s", text && fd >= 0 ? text : "");
    pthread_mutex_unlock(&g_log.lock);
}

/* A line for stderr; an in-place line showing is cleared first and drawn
 * again below it. */
static void write_stderr(const char *line, size_t len) {
    static const char clear[] = "\r\033[K";
    pthread_mutex_lock(&g_log.lock);
    if (g_log.status_fd >= 0) write_all(g_log.status_fd, clear, sizeof clear - 1);
    write_all(STDERR_FILENO, line, len);
    if (g_log.status_fd >= 0) write_all(g_log.status_fd, g_log.status, strlen(g_log.status));
    pthread_mutex_unlock(&g_log.lock);
}

static void emit(plait_log_level level, const char *component, int to_stderr, const char *fmt, va_list ap) {
    log_init_once();
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double t = (double)(now.tv_sec - g_log.start.tv_sec) + 1e-9 * (double)(now.tv_nsec - g_log.start.tv_nsec);
    char line[4096];
    int n;
    const char *tag = level == PLAIT_LOG_INFO ? "" : plait_log_level_name(level);
    char rank_prefix[16] = "";
    if (g_log.rank >= 0) snprintf(rank_prefix, sizeof rank_prefix, "[r%d] ", g_log.rank);
    n = snprintf(line, sizeof line, "%s%8.3f %s%s%s%s: ", rank_prefix, t, component ? component : "plait",
                 *tag ? " " : "", tag, "");
    if (n < 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    int m = vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    while (len > 0 && line[len - 1] == '\n') len--;
    line[len++] = '\n';
    if (to_stderr) write_stderr(line, len);
    pthread_mutex_lock(&g_log.lock);
    if (g_log.file_fd >= 0) write_all(g_log.file_fd, line, len);
    pthread_mutex_unlock(&g_log.lock);
}

void plait_vlog(plait_log_level level, const char *component, const char *fmt, va_list ap) {
    if (!plait_log_enabled_for(level, component)) return;
    emit(level, component, 1, fmt, ap);
}

void plait_log_file_only(plait_log_level level, const char *component, const char *fmt, ...) {
    if (g_log.file_fd < 0) return;
    va_list ap;
    va_start(ap, fmt);
    emit(level, component, 0, fmt, ap);
    va_end(ap);
}

void plait_log(plait_log_level level, const char *component, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    plait_vlog(level, component, fmt, ap);
    va_end(ap);
}
