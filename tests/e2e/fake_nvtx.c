/*
 * A stand-in for NVIDIA's libnvToolsExt.so.1 (tests/e2e/test_trace_nvtx.sh):
 * nvtxRangePushA and nvtxRangePop append "RANK TID push NAME" and "RANK TID
 * pop" lines to the file PLAIT_TEST_NVTX_LOG names (one write a line,
 * O_APPEND: the ranks share the file), so a test sees which ranges plait
 * opens and closes, on which thread, without Nsight Systems.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int nvtxRangePushA(const char *name);
int nvtxRangePop(void);

static _Thread_local int depth;

static void put(const char *what, const char *name) {
    const char *path = getenv("PLAIT_TEST_NVTX_LOG"), *rank = getenv("PLAIT_RANK");
    if (!path) return;
    char line[256];
    int n = snprintf(line, sizeof line, "%s %ld %s %s\n", rank ? rank : "0", (long)syscall(SYS_gettid), what,
                     name ? name : "-");
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (write(fd, line, (size_t)n) != n) (void)0;
    close(fd);
}

int nvtxRangePushA(const char *name) {
    put("push", name);
    return depth++;
}

int nvtxRangePop(void) {
    put("pop", NULL);
    return --depth;
}
