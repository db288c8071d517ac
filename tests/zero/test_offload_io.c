/*
 * The offloaded state's file reads and writes (plugins/optim/common/
 * offload_io.h) through io_uring and through the pread/pwrite threads:
 * several requests in flight at once land where they were aimed (O_DIRECT
 * where the file system takes it), a write that the file-size limit cuts
 * short ends with EFBIG after moving what it could, and a read past the
 * end of the file with EIO. Where io_uring cannot be made here the ring's
 * half says so and only the threads are checked.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "offload_io.h"

#define REQS 4
#define REQ_BYTES (256u << 10)

static char path[4096];

/* An io of the kind asked for (1: io_uring), or NULL where the ring cannot
 * be made here. */
static offload_io *open_io(int ring) {
    int ring_err = 0;
    offload_io *io = offload_io_create(2, ring ? 32u : 0u, &ring_err);
    assert_non_null(io);
    if (ring && !offload_io_uses_ring(io)) {
        print_message("io_uring is not available here (%s): its half is not checked\n", strerror(ring_err));
        offload_io_destroy(io);
        return NULL;
    }
    assert_int_equal(offload_io_uses_ring(io), ring);
    return io;
}

static int open_file(int *direct) {
    const char *tmp = getenv("TMPDIR");
    snprintf(path, sizeof path, "%s/plait-offload-io-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    fd = open(path, O_RDWR | O_DIRECT);
    *direct = fd >= 0;
    if (fd < 0) fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    unlink(path);
    return fd;
}

static void round_trip(int ring) {
    offload_io *io = open_io(ring);
    if (!io) return;
    int direct;
    int fd = open_file(&direct);
    unsigned char *out, *in;
    assert_int_equal(posix_memalign((void **)&out, 4096, REQS * REQ_BYTES), 0);
    assert_int_equal(posix_memalign((void **)&in, 4096, REQS * REQ_BYTES), 0);
    for (size_t i = 0; i < REQS * REQ_BYTES; i++) out[i] = (unsigned char)(i * 7 + i / 4093);
    memset(in, 0, REQS * REQ_BYTES);
    offload_req w[REQS], r[REQS];
    /* written in reverse order, all in flight before the first wait */
    for (int k = REQS - 1; k >= 0; k--) {
        w[k] = (offload_req){
            .fd = fd, .write = 1, .buf = out + k * REQ_BYTES, .bytes = REQ_BYTES, .off = (off_t)k * REQ_BYTES};
        offload_io_submit(io, &w[k]);
    }
    for (int k = 0; k < REQS; k++) assert_int_equal(offload_io_wait(io, &w[k]), 0);
    for (int k = 0; k < REQS; k++) {
        r[k] = (offload_req){
            .fd = fd, .write = 0, .buf = in + k * REQ_BYTES, .bytes = REQ_BYTES, .off = (off_t)k * REQ_BYTES};
        offload_io_submit(io, &r[k]);
    }
    for (int k = REQS - 1; k >= 0; k--) assert_int_equal(offload_io_wait(io, &r[k]), 0);
    assert_memory_equal(in, out, REQS * REQ_BYTES);
    /* a request of no bytes is done at once */
    offload_req none = {.fd = fd, .write = 1, .buf = out, .bytes = 0};
    offload_io_submit(io, &none);
    assert_int_equal(offload_io_wait(io, &none), 0);
    offload_io_destroy(io);
    close(fd);
    free(out);
    free(in);
    print_message("%s: %d requests of %u KiB each way%s: ok\n", ring ? "io_uring" : "threads", REQS, REQ_BYTES >> 10,
                  direct ? ", O_DIRECT" : "");
}

/* A write the file-size limit cuts after its first half: the half lands,
 * then EFBIG; a read past the end: EIO. In a child, whose limit ends with it. */
static void failures(int ring) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        offload_io *io = open_io(ring);
        if (!io) _exit(0);
        int direct;
        int fd = open_file(&direct);
        unsigned char *buf;
        if (posix_memalign((void **)&buf, 4096, 2 * REQ_BYTES) != 0) _exit(10);
        memset(buf, 0x5a, 2 * REQ_BYTES);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit lim = {.rlim_cur = REQ_BYTES, .rlim_max = RLIM_INFINITY};
        if (setrlimit(RLIMIT_FSIZE, &lim) != 0) _exit(11);
        offload_req w = {.fd = fd, .write = 1, .buf = buf, .bytes = 2 * REQ_BYTES};
        offload_io_submit(io, &w);
        int err = offload_io_wait(io, &w);
        if (err != EFBIG) {
            fprintf(stderr, "the cut write: %s, not EFBIG\n", strerror(err));
            _exit(12);
        }
        if (lseek(fd, 0, SEEK_END) != (off_t)REQ_BYTES) _exit(13);
        offload_req r = {.fd = fd, .write = 0, .buf = buf, .bytes = 2 * REQ_BYTES};
        offload_io_submit(io, &r);
        err = offload_io_wait(io, &r);
        if (err != EIO) {
            fprintf(stderr, "the read past the end: %s, not EIO\n", strerror(err));
            _exit(14);
        }
        offload_io_destroy(io);
        _exit(0);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("%s: the failures were not reported as expected (status %d)", ring ? "io_uring" : "threads", status);
}

static void test_threads(void **state) {
    (void)state;
    round_trip(0);
    failures(0);
}

static void test_ring(void **state) {
    (void)state;
    round_trip(1);
    failures(1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_ring),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
