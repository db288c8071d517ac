/*
 * The replica keeper (elastic/agent.h) and a rank's side of it
 * (elastic/agent_client.h), in one process: images handed over as sealed
 * memfds are listed and given back with their bytes, the two newest steps
 * of a shard are kept, a sealed image cannot be changed, REGROUP answers
 * what the launcher knows, a keeper that went away is an error, and
 * attempts replaced in quick succession while their ranks die each reach
 * the keeper.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/agent.h"
#include "elastic/agent_client.h"
#include "runtime/error.h"

static int g_grow;
static int grow(void *ctx) { return *(int *)ctx; }

/* Hand the keeper an image of `bytes` bytes filled with `value`. */
static void put(int64_t step, int shard, size_t bytes, unsigned char value) {
    int fd;
    void *map;
    assert_int_equal(plait_replica_mem_create(bytes, &fd, &map), PLAIT_OK);
    memset(map, value, bytes);
    assert_int_equal(plait_replica_mem_seal(fd, bytes, &map), PLAIT_OK);
    plait_replica_info info = {.step = step, .shard = shard, .n_shards = 2, .bytes = bytes, .crc = value, .origin = 1};
    if (plait_agent_put(&info, fd) != PLAIT_OK) fail_msg("%s", plait_last_error());
    munmap(map, bytes);
    close(fd);
}

static int held(int64_t step, int shard, const plait_replica_info *v, int n) {
    for (int i = 0; i < n; i++)
        if (v[i].step == step && v[i].shard == shard) return 1;
    return 0;
}

static void test_keeper(void **state) {
    (void)state;
    plait_agent *a = NULL;
    assert_int_equal(plait_agent_start(grow, &g_grow, &a), PLAIT_OK);
    int child;
    assert_int_equal(plait_agent_attach(a, 1, &child), PLAIT_OK);
    char fd[16];
    snprintf(fd, sizeof fd, "%d", child);
    setenv("PLAIT_AGENT_FD", fd, 1);
    assert_true(plait_agent_present());

    put(2, 0, 4096, 0x22);
    put(4, 0, 4096, 0x44);
    put(6, 0, 8192, 0x66);
    put(6, 1, 100, 0x16);
    put(6, 1, 200, 0x17); /* the same step again replaces it */
    plait_replica_info v[8];
    int n = 0;
    assert_int_equal(plait_agent_list(v, 8, &n), PLAIT_OK);
    assert_int_equal(n, 3);
    assert_false(held(2, 0, v, n)); /* the oldest of three steps went */
    assert_true(held(4, 0, v, n) && held(6, 0, v, n) && held(6, 1, v, n));
    int images;
    uint64_t bytes;
    plait_agent_held(a, &images, &bytes);
    assert_int_equal(images, 3);
    assert_int_equal(bytes, 4096 + 8192 + 200);

    int got;
    plait_replica_info info;
    assert_int_equal(plait_agent_get(6, 1, 2, &got, &info), PLAIT_OK);
    assert_int_equal(info.bytes, 200);
    assert_int_equal(info.crc, 0x17);
    const void *map;
    assert_int_equal(plait_replica_mem_map(got, info.bytes, &map), PLAIT_OK);
    assert_int_equal(((const unsigned char *)map)[199], 0x17);
    /* sealed: nothing can change it any more */
    errno = 0;
    assert_true(write(got, "x", 1) < 0);
    assert_int_equal(errno, EPERM);
    munmap((void *)map, info.bytes);
    close(got);
    assert_int_equal(plait_agent_get(2, 0, 2, &got, &info), PLAIT_ERR_UNSUPPORTED);
    assert_int_equal(got, -1);

    int yes = -1;
    assert_int_equal(plait_agent_regroup(&yes), PLAIT_OK);
    assert_int_equal(yes, 0);
    g_grow = 1;
    assert_int_equal(plait_agent_regroup(&yes), PLAIT_OK);
    assert_int_equal(yes, 1);

    /* the images outlive the rank's socket: a new attempt sees them */
    plait_agent_detach(a);
    assert_int_equal(plait_agent_list(v, 8, &n), PLAIT_ERR_PEER_LOST);
    close(child);
    assert_int_equal(plait_agent_attach(a, 1, &child), PLAIT_OK);
    snprintf(fd, sizeof fd, "%d", child);
    setenv("PLAIT_AGENT_FD", fd, 1);
    assert_int_equal(plait_agent_list(v, 8, &n), PLAIT_OK);
    assert_int_equal(n, 3);
    plait_agent_stop(a);
    close(child);
    unsetenv("PLAIT_AGENT_FD");
    assert_false(plait_agent_present());
    assert_int_equal(plait_agent_regroup(&yes), PLAIT_ERR_UNSUPPORTED);
}

/* Ranks that die while the launcher starts the next attempt: the keeper
 * notices their ends hang up as the launcher replaces its sockets with
 * new ones (which take the same descriptor numbers), and must never close
 * a new attempt's socket for an old rank's hang-up: every new attempt
 * reaches it. */
static void test_attempts_in_quick_succession(void **state) {
    (void)state;
    enum { RANKS = 4, ATTEMPTS = 3000 };
    plait_agent *a = NULL;
    assert_int_equal(plait_agent_start(NULL, NULL, &a), PLAIT_OK);
    int child[RANKS];
    char fd[16];
    plait_replica_info v[8];
    int n = 0, lost = 0;
    for (int k = 0; k < ATTEMPTS; k++) {
        assert_int_equal(plait_agent_attach(a, RANKS, child), PLAIT_OK);
        /* a keeper stuck elsewhere fails the request instead of hanging it */
        const struct timeval limit = {.tv_sec = 5};
        assert_int_equal(setsockopt(child[k % RANKS], SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit), 0);
        snprintf(fd, sizeof fd, "%d", child[k % RANKS]);
        setenv("PLAIT_AGENT_FD", fd, 1);
        if (plait_agent_list(v, 8, &n) != PLAIT_OK) lost++;
        for (int i = 0; i < RANKS; i++) close(child[i]); /* the ranks die */
    }
    plait_agent_stop(a);
    unsetenv("PLAIT_AGENT_FD");
    printf("%d attempts, %d could not reach the keeper\n", ATTEMPTS, lost);
    assert_int_equal(lost, 0);
}

/* A keeper that never answers (its launcher stopped): the request fails
 * within the timeout set, naming the launcher, and later ones at once
 * (the conversation is out of step). Last: the loss is for the process. */
static void test_keeper_that_does_not_answer(void **state) {
    (void)state;
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
    for (int i = 0; i < 2; i++) { /* a descriptor the keeper's (3 and up), whatever is closed here */
        int high = fcntl(sv[i], F_DUPFD_CLOEXEC, 3);
        assert_true(high >= 3);
        close(sv[i]);
        sv[i] = high;
    }
    char fd[16];
    snprintf(fd, sizeof fd, "%d", sv[0]);
    setenv("PLAIT_AGENT_FD", fd, 1);
    plait_agent_set_timeout(0.3);
    plait_replica_info v[8];
    int n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(plait_agent_list(v, 8, &n), PLAIT_ERR_TIMEOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_true(took >= 0.3); /* not before its timeout */
    assert_non_null(strstr(plait_last_error(), "did not answer within 0.3 s"));
    assert_non_null(strstr(plait_last_error(), "launcher is stopped or stuck"));
    assert_int_equal(plait_agent_list(v, 8, &n), PLAIT_ERR_PEER_LOST);
    unsetenv("PLAIT_AGENT_FD");
    close(sv[0]);
    close(sv[1]);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_keeper), cmocka_unit_test(test_attempts_in_quick_succession),
                                       cmocka_unit_test(test_keeper_that_does_not_answer)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
