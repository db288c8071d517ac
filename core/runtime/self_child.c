#include "runtime/self_child.h"

#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/error.h"
#include "runtime/out_file.h"
#include "runtime/regular_file.h"

extern char **environ;

int plait_self_child_run(const char *const *argv, const char *log) {
    /* opened here, not by the child: never through a link (out_file.h) */
    int fd = -1;
    if (plait_out_open(log, O_TRUNC, &fd) != PLAIT_OK) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fd, STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, fd, STDERR_FILENO);
    pid_t pid;
    int err = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(fd);
    if (err != 0) {
        plait_set_error(PLAIT_ERR_SYSTEM, "cannot start %s: %s", argv[0], strerror(err));
        errno = err;
        return -1;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            plait_set_error(PLAIT_ERR_SYSTEM, "cannot wait for %s: %s", argv[0], strerror(errno));
            return -1;
        }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
}

void plait_file_last_line(const char *path, char *out, size_t cap) {
    if (cap) out[0] = 0;
    FILE *f = NULL;
    /* a regular file only: a FIFO in its place would block the read */
    if (plait_fopen_regular(path, "log", PLAIT_ERR_INVALID_ARG, &f) != PLAIT_OK) return;
    char line[1024];
    while (fgets(line, sizeof line, f))
        if (line[0] != '\n') snprintf(out, cap, "%.*s", (int)strcspn(line, "\n"), line);
    fclose(f);
}
