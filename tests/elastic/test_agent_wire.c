/*
 * The messages between a rank and its replica keeper (elastic/agent_wire.h)
 * on a SOCK_SEQPACKET pair: a message whole, with the memfd it carries
 * arriving as another descriptor of the same memory; a message too long
 * for the receiver's buffer marked cut, never read as a shorter one; the
 * peer's end read as 0. And the membership store's per-launcher keys
 * (elastic/store_keys.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "elastic/agent_wire.h"
#include "elastic/store_keys.h"

static void pair(int sv[2]) { assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0); }

static void test_message_with_fd(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    int mfd = memfd_create("agent-wire-test", MFD_CLOEXEC);
    assert_true(mfd >= 0);
    assert_int_equal(write(mfd, "replica", 7), 7);
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_PUT, .e = {.step = 42, .shard = 1, .n_shards = 2, .bytes = 7}};
    assert_int_equal(agent_send(sv[0], &m, sizeof m, mfd), (ssize_t)sizeof m);
    close(mfd); /* the receiver's descriptor keeps the memory */

    agent_msg got;
    int fd = -2, cut = -1;
    assert_int_equal(agent_recv(sv[1], &got, sizeof got, &fd, &cut), (ssize_t)sizeof got);
    assert_int_equal(cut, 0);
    assert_true(fd >= 0);
    assert_memory_equal(&got, &m, sizeof m);
    char buf[8] = "";
    assert_int_equal(pread(fd, buf, 7, 0), 7);
    assert_memory_equal(buf, "replica", 7);
    close(fd);

    /* without an fd: none arrives */
    assert_int_equal(agent_send(sv[0], &m, sizeof m, -1), (ssize_t)sizeof m);
    assert_int_equal(agent_recv(sv[1], &got, sizeof got, &fd, &cut), (ssize_t)sizeof got);
    assert_int_equal(fd, -1);
    assert_int_equal(cut, 0);
    close(sv[0]);
    close(sv[1]);
}

static void test_cut_and_end(void **state) {
    (void)state;
    int sv[2];
    pair(sv);
    agent_msg m = {.magic = AGENT_MAGIC, .op = AGENT_LIST, .count = 3};
    assert_int_equal(agent_send(sv[0], &m, sizeof m, -1), (ssize_t)sizeof m);
    char small[8];
    int fd = -2, cut = 0;
    ssize_t r = agent_recv(sv[1], small, sizeof small, &fd, &cut);
    assert_true(r > 0);
    assert_int_equal(cut, 1); /* the rest is gone: the caller must refuse it */
    assert_int_equal(fd, -1);
    close(sv[0]);
    assert_int_equal(agent_recv(sv[1], small, sizeof small, &fd, &cut), 0); /* the peer's end */
    assert_int_equal(cut, 0);
    close(sv[1]);
}

static void test_lid_keys(void **state) {
    (void)state;
    char key[64];
    elastic_key_lid(key, sizeof key, "m/hb/", 0x1234abcdull);
    assert_string_equal(key, "m/hb/000000001234abcd");
    elastic_key_lid(key, sizeof key, "m/bye/", UINT64_MAX);
    assert_string_equal(key, "m/bye/ffffffffffffffff");
    char tiny[8];
    elastic_key_lid(tiny, sizeof tiny, "m/hb/", 1); /* truncated, terminated */
    assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_with_fd),
        cmocka_unit_test(test_cut_and_end),
        cmocka_unit_test(test_lid_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
