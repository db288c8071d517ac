/*
 * Ring attention's failed transfers name the transfer that failed: cp 2
 * with threads as ranks and in-process point-to-point (a 0.5 s deadline),
 * rank 0 running the model's ring attention, rank 1 a peer that answers
 * only part of it. A peer that answers nothing leaves the forward waiting
 * for a K/V block; a peer that passes the backward's K/V blocks but never
 * its dK/dV sums leaves the backward waiting for a sum. Each message names
 * the layer and the cp rank.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm_threads.h"
#include "kernels/kernels.h"
#include "model/model_internal.h"
#include "model/ring_attention.h"
#include "runtime/error.h"

#define RB 1
#define RT 4 /* two chunks of 1 token a rank */
#define RHS 4
#define RNH 1
#define RW ((RNH + 2 * RNH) * RHS) /* a qkv row */
#define KV_NUMEL (RB * RT * 2 * RNH * RHS)
#define TAG_KV_BWD 2 /* ring_attention.c's tag of the backward's K|V blocks */

typedef struct job {
    plait_threads_world *w;
    int backward;      /* rank 0 runs the backward; else the forward */
    plait_status st;   /* rank 0's */
    char msg[2048];    /* rank 0's error */
    volatile int done; /* rank 0 returned: the peer may free its communicator */
    int setup_failed;
} job;

static plait_comm *world_of(job *j, int rank) {
    plait_comm_settings s;
    plait_comm_settings_default(&s);
    s.timeout_s = 0.5;
    plait_comm *c = NULL;
    if (plait_threads_comm_world(j->w, rank, &s, &c) != PLAIT_OK) j->setup_failed = 1;
    return c;
}

static void ring_rank(job *j, plait_comm *c) {
    plait_model *m = calloc(1, sizeof *m);
    m->k = plait_kernels_table();
    m->B = RB, m->T = RT, m->HS = RHS;
    m->cp = 2, m->cp_rank = 0, m->cp_comm = c;
    float qkv[RB * RT * RW], out[RB * RT * RNH * RHS], lse[RB * RNH * RT], dout[RB * RT * RNH * RHS],
        dqkv[RB * RT * RW];
    for (size_t i = 0; i < sizeof qkv / sizeof *qkv; i++) qkv[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < sizeof dout / sizeof *dout; i++) dout[i] = 0.5f;
    memset(out, 0, sizeof out);
    memset(lse, 0, sizeof lse);
    plait_clear_error();
    j->st = j->backward ? plait_ring_attention_backward(m, 3, dqkv, dout, qkv, out, lse, RNH, RNH)
                        : plait_ring_attention_forward(m, 3, out, lse, qkv, RNH, RNH);
    snprintf(j->msg, sizeof j->msg, "%s", plait_last_error());
    plait_ring_attention_free(m);
    free(m);
}

/* The peer: in the backward, the first step's K|V receive and send, seen
 * through; nothing more. */
static void peer_rank(job *j, plait_comm *c) {
    if (j->backward) {
        float in[KV_NUMEL] = {0}, send[KV_NUMEL] = {0};
        plait_request *r[2] = {NULL, NULL};
        if (plait_comm_p2p(c, 0, in, KV_NUMEL, PLAIT_F32, 0, TAG_KV_BWD, PLAIT_MEM_HOST, &r[0]) != PLAIT_OK ||
            plait_comm_p2p(c, 1, send, KV_NUMEL, PLAIT_F32, 0, TAG_KV_BWD, PLAIT_MEM_HOST, &r[1]) != PLAIT_OK ||
            plait_request_wait(r[0]) != PLAIT_OK || plait_request_wait(r[1]) != PLAIT_OK)
            j->setup_failed = 1;
    }
    /* a bound against a hang: rank 0's deadlines end it well before */
    for (int i = 0; i < 3000 && !j->done; i++) usleep(10000);
}

static void rank_main(int rank, void *arg) {
    job *j = arg;
    plait_comm *c = world_of(j, rank);
    if (!c) return;
    if (rank == 0) {
        ring_rank(j, c);
        j->done = 1;
    } else {
        peer_rank(j, c);
    }
    plait_comm_free(c);
}

/* Rank 0's ring fails, naming the layer, the cp rank and `want`; `unwanted`
 * (NULL: none) is not in the message. */
static void expect_failure(int backward, const char *want, const char *unwanted) {
    job j;
    memset(&j, 0, sizeof j);
    j.backward = backward;
    j.w = plait_threads_world_new(2, 30.0);
    assert_non_null(j.w);
    assert_int_equal(plait_threads_run(2, rank_main, &j), PLAIT_OK);
    plait_threads_world_free(j.w);
    assert_false(j.setup_failed);
    fprintf(stderr, "%s: %s\n", backward ? "backward" : "forward", j.msg);
    assert_int_not_equal(j.st, PLAIT_OK);
    assert_non_null(strstr(j.msg, "ring attention of layer 3 (cp rank 0 of 2)"));
    assert_non_null(strstr(j.msg, want));
    if (unwanted) assert_null(strstr(j.msg, unwanted));
}

static void test_forward_names_the_kv_transfer(void **state) {
    (void)state;
    expect_failure(0, "waiting for a K/V transfer", NULL);
}

static void test_backward_names_the_sum_transfer(void **state) {
    (void)state;
    expect_failure(1, "waiting for a dK/dV sum's transfer", "K/V transfer");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_names_the_kv_transfer),
        cmocka_unit_test(test_backward_names_the_sum_transfer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
