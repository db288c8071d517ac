/* plait_error_relayed: telling a failure a rank saw itself from one it
 * stopped for (another rank's account relayed inside it), and which rank
 * failed first, through the chains the transports and the core build.
 * plait_error_waited_for: the rank a timeout names as the one waited for
 * (the elastic launcher drops that rank's host). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "runtime/error.h"

static void test_first_hand(void **state) {
    (void)state;
    int origin = 7;
    assert_null(plait_error_relayed("step 3: allreduce #12 'dp gradient bucket' on comm 'dp' rank 0/4 (world rank 0): "
                                    "receiving from rank 2 (world rank 2): rank 2 closed the connection", &origin));
    assert_int_equal(origin, -1);
    assert_null(plait_error_relayed("rank 0 stopped: step 3: out of memory", &origin));
}

static void test_chains(void **state) {
    (void)state;
    int origin;
    /* a transport's relay of a peer's account (its own op names world rank 0) */
    const char *m = "step 3: allreduce #12 on comm 'dp' rank 1/4 (world rank 1): receiving from rank 0 (world rank 0): "
                    "tcp: receive failed: rank 0 is going down: allreduce #12 on comm 'dp' rank 0/4 (world rank 0): "
                    "receiving from rank 2 (world rank 2): rank 2 closed the connection";
    const char *root = plait_error_relayed(m, &origin);
    assert_non_null(root);
    assert_int_equal(strncmp(root, "allreduce #12 on comm 'dp' rank 0/4", 35), 0);
    assert_int_equal(origin, 0);
    /* the trainer's account passed on, through the core's relay, twice */
    m = "step 9: send to rank 1: rank 1 is going down: world rank 5 stopped after rank 3 stopped: step 9: recv #4 "
        "(world rank 3): rank 6 closed the connection";
    root = plait_error_relayed(m, &origin);
    assert_non_null(root);
    assert_int_equal(strncmp(root, "rank 3 stopped: step 9", 22), 0);
    assert_int_equal(origin, 3);
    /* a rank's short final error */
    assert_non_null(plait_error_relayed("train: step 7: world rank 1 stopped after world rank 2 failed (its error "
                                        "names the cause)", &origin));
    assert_int_equal(origin, 2);
    /* a relay naming nobody */
    assert_non_null(plait_error_relayed("rank 1 is going down: aborted", &origin));
    assert_int_equal(origin, -1);
}

/* Set and wrapped messages are counted, a cleared one is not; the count
 * tells a caller whether a call set a message without clearing one. */
static void test_error_sets(void **state) {
    (void)state;
    uint64_t n = plait_error_sets();
    plait_set_error(PLAIT_ERR_SYSTEM, "disk full");
    assert_int_equal(plait_error_sets(), n + 1);
    plait_wrap_error(PLAIT_ERR_SYSTEM, "checkpoint at step 2");
    assert_int_equal(plait_error_sets(), n + 2);
    assert_string_equal(plait_last_error(), "checkpoint at step 2: disk full");
    plait_clear_error();
    assert_int_equal(plait_error_sets(), n + 2);
}

static void test_store_host(void **state) {
    (void)state;
    assert_int_equal(plait_error_store_host("train: rank 3 joining the plait -n job (store address from the "
                                            "launcher): the job's store (hosted by rank 0) at 127.0.0.1:4000 closed "
                                            "the connection during the handshake"),
                     0);
    assert_int_equal(plait_error_store_host("cannot connect to the job's store (hosted by rank 12) at [::1]:7: refused"),
                     12);
    assert_int_equal(plait_error_store_host("run directory runs/x is in use by another run"), -1);
    assert_int_equal(plait_error_store_host("the job's store (hosted by rank x)"), -1);
    assert_int_equal(plait_error_store_host(NULL), -1);
}

static void test_waited_for(void **state) {
    (void)state;
    /* the communication layer's account of a wait past [comm] timeout */
    assert_int_equal(plait_error_waited_for("train: step 747: allreduce #777 'dp gradient bucket' (118528 elements = "
                                            "474112 B, f32 sum, tree) on comm 'dp' rank 0/2 (world rank 0): timed out "
                                            "after 4 s waiting to receive from rank 1 (world rank 5); outstanding: 1 "
                                            "receive from rank 1 (world rank 5)"),
                     5);
    /* relayed by a rank that stopped for it */
    assert_int_equal(plait_error_waited_for("rank 3 stopped: step 9: allreduce #40 on comm 'dp' rank 1/3 (world rank "
                                            "4): timed out after 4 s waiting to receive from rank 2 (world rank 12)"),
                     12);
    /* not a timeout, or no rank named */
    assert_int_equal(plait_error_waited_for("allreduce #12 on comm 'dp' rank 0/4 (world rank 0): receiving from rank 2 "
                                            "(world rank 2): rank 2 closed the connection"),
                     -1);
    assert_int_equal(plait_error_waited_for("the store timed out"), -1);
    assert_int_equal(plait_error_waited_for(NULL), -1);
}

/* Text a plugin or a file gave, made printable: escape sequences, other
 * control bytes and invalid UTF-8 as \xNN; newlines, tabs and valid UTF-8
 * kept; cut to fit. */
static void test_printable_copy(void **state) {
    (void)state;
    char out[64];
    plait_printable_copy(out, sizeof out, "1\x1b[31mRED\x07\tok\n\xc3\xa9\xff");
    assert_string_equal(out, "1\\x1b[31mRED\\x07\tok\n\xc3\xa9\\xff");
    assert_int_equal(plait_printable_copy(out, 8, "\x1b\x1b\x1b"), 4);
    assert_string_equal(out, "\\x1b");
    plait_printable_copy(out, sizeof out, NULL);
    assert_string_equal(out, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_hand),
        cmocka_unit_test(test_chains),
        cmocka_unit_test(test_waited_for),
        cmocka_unit_test(test_store_host),
        cmocka_unit_test(test_error_sets),
        cmocka_unit_test(test_printable_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
