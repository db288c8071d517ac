/* The working directory and the variables plait runs by around a plugin
 * call (see process_state.h). */
#include "runtime/process_state.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"

extern char **environ;

#define PREFIX "PLAIT_"

static size_t name_len(const char *entry) {
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : strlen(entry);
}

/* 1 for an environ entry plait goes on reading once plugins run: PLAIT_*,
 * and the few others a run reads later (PLAIT_WATCHED_OTHERS). */
static int watched(const char *entry) {
    if (strncmp(entry, PREFIX, sizeof PREFIX - 1) == 0) return 1;
    size_t len = name_len(entry);
    for (const char *o = PLAIT_WATCHED_OTHERS; *o; o += strspn(o, ", ")) {
        size_t n = strcspn(o, ", ");
        if (n == len && strncmp(entry, o, n) == 0) return 1;
        o += n;
    }
    return 0;
}

void plait_process_state_take(plait_process_state *s) {
    char dir[PATH_MAX];
    s->cwd = getcwd(dir, sizeof dir) ? strdup(dir) : NULL;
    size_t len = 0;
    for (char **e = environ; e && *e; e++)
        if (watched(*e)) len += strlen(*e) + 1;
    s->env = malloc(len + 1);
    s->env_len = 0;
    if (!s->env) return;
    for (char **e = environ; e && *e; e++)
        if (watched(*e)) {
            size_t n = strlen(*e) + 1;
            if (s->env_len + n > len) break; /* grown since it was measured */
            memcpy(s->env + s->env_len, *e, n);
            s->env_len += n;
        }
}

void plait_process_state_free(plait_process_state *s) {
    free(s->cwd);
    free(s->env);
    s->cwd = s->env = NULL;
    s->env_len = 0;
}

/* The entry of `env` (`len` bytes) whose name is `name` (`name_len` bytes),
 * or NULL. */
static const char *find_entry(const char *env, size_t len, const char *name, size_t name_len) {
    for (size_t off = 0; off < len; off += strlen(env + off) + 1)
        if (strncmp(env + off, name, name_len) == 0 && env[off + name_len] == '=') return env + off;
    return NULL;
}

int plait_env_name_secret(const char *name, size_t len) {
    static const char *const words[] = {"TOKEN", "SECRET", "PASSWORD", "KEY", "AUTH", "CRED"};
    char n[128];
    snprintf(n, sizeof n, "%.*s", (int)len, name);
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strstr(n, words[i])) return 1;
    return 0;
}

typedef struct out {
    char *p;
    size_t cap, used;
} out;

static void say(out *o, const char *fmt, ...) {
    if (o->used + 1 >= o->cap) return;
    if (o->used) o->used += (size_t)snprintf(o->p + o->used, o->cap - o->used, ", ");
    if (o->used + 1 >= o->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(o->p + o->used, o->cap - o->used, fmt, ap);
    va_end(ap);
    if (n > 0) o->used += (size_t)n < o->cap - o->used ? (size_t)n : o->cap - o->used - 1;
}

/* One variable of `before` as `after` has it (NULL: unset there). */
static void compare_one(out *o, const char *was, const char *now) {
    const char *e = was ? was : now;
    size_t n = name_len(e);
    const char *old = was ? was + n + 1 : NULL, *new = now ? now + n + 1 : NULL;
    if (old && new && strcmp(old, new) == 0) return;
    int hide = plait_env_name_secret(e, n);
    if (old && new && hide) say(o, "%.*s changed (values not shown)", (int)n, e);
    else if (old && new) say(o, "%.*s from '%s' to '%s'", (int)n, e, old, new);
    else if (new && hide) say(o, "%.*s set (value not shown)", (int)n, e);
    else if (new) say(o, "%.*s set to '%s'", (int)n, e, new);
    else if (hide) say(o, "%.*s unset", (int)n, e);
    else say(o, "%.*s unset (was '%s')", (int)n, e, old);
}

int plait_process_state_changed(const plait_process_state *before, char *what, size_t cap) {
    out o = {.p = what, .cap = cap};
    if (cap) what[0] = '\0';
    plait_process_state now;
    plait_process_state_take(&now);
    int changed = before->cwd && (!now.cwd || strcmp(before->cwd, now.cwd) != 0);
    if (changed)
        say(&o, "the working directory from '%s' to '%s'", before->cwd, now.cwd ? now.cwd : "(a directory getcwd cannot name)");
    if (before->env && now.env) {
        for (size_t off = 0; off < before->env_len; off += strlen(before->env + off) + 1) {
            const char *was = before->env + off;
            const char *is = find_entry(now.env, now.env_len, was, name_len(was));
            if (is && strcmp(was, is) == 0) continue;
            compare_one(&o, was, is);
            changed = 1;
        }
        for (size_t off = 0; off < now.env_len; off += strlen(now.env + off) + 1) {
            const char *is = now.env + off;
            if (find_entry(before->env, before->env_len, is, name_len(is))) continue;
            compare_one(&o, NULL, is);
            changed = 1;
        }
    }
    plait_process_state_free(&now);
    return changed;
}

plait_status plait_process_state_refuse(const plait_process_state *before, const char *subject, const char *tail) {
    char what[1024];
    if (!plait_process_state_changed(before, what, sizeof what)) return PLAIT_OK;
    return plait_set_error(PLAIT_ERR_ABI,
                           "%s changed the process: %s; a plugin must leave the process's working directory and "
                           "PLAIT_* variables (and " PLAIT_WATCHED_OTHERS ") as it found them: the rank finds the "
                           "run's files and its place in the job through them, so it stops rather than follow the "
                           "change%s",
                           subject, what, tail);
}
