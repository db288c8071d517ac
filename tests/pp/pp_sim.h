/*
 * A communication-free executor of pipeline instruction lists (test only).
 *
 * Every stage runs its list in order with its own clock:
 *   FORWARD takes t_forward, BACKWARD t_backward (per chunk and micro-batch;
 *   the tests use 1 and 2, and also other ratios); a split backward takes
 *   t_backward for BACKWARD_INPUT and t_weight for BACKWARD_WEIGHT;
 *   SEND_* is posted instantly: the data exists from the sender's clock on
 *   (with a send window, once the send that many before it on the link
 *   was received: the sender waits for it);
 *   RECV_* blocks until the matching data exists, then the clock jumps to
 *   max(clock, time the data was sent). Messages travel on directed links
 *   (sender stage, receiver stage, kind = activation | gradient) and are
 *   matched in FIFO order per link, as a transport matching by (peer, tag)
 *   does; the receive must get exactly the (chunk, mb) it names;
 *   REDUCE_GRADS blocks until every send of the stage has been received and,
 *   on the first and last stage (the embedding group, p >= 2), until the
 *   other one has reached its REDUCE_GRADS too (a collective);
 *   OPTIM_STEP takes no time and must be the last instruction.
 * The executor is as-soon-as-possible: the times it computes depend only on
 * the lists, not on the order in which it advances the stages.
 *
 * It reports the first violation: an instruction that is malformed or out of
 * place, a dependency broken (FORWARD before its input arrived, BACKWARD
 * before its FORWARD or before the gradient of its output arrived, a send
 * of data not yet computed, anything twice), a receive getting another
 * (chunk, mb) than it names, a deadlock (no stage can move but some have
 * instructions left, with what each waits for), an unmatched receive or
 * send, and work missing at the end.
 *
 * A (chunk, mb) gets either BACKWARD or BACKWARD_INPUT then BACKWARD_WEIGHT;
 * SEND_GRAD needs the input gradient (BACKWARD or BACKWARD_INPUT),
 * REDUCE_GRADS every weight gradient too.
 *
 * Measures per stage: busy time, idle = makespan - busy (blocked in receives,
 * in REDUCE_GRADS, or done before the slowest stage), peak live activations
 * ((chunk, mb) between its FORWARD and its BACKWARD or BACKWARD_WEIGHT), and peak held slots
 * (a (chunk, mb) also counts until its sends have been received: the
 * buffers an executor needs if it never waits to reuse one).
 *
 * Not thread-safe per result; no globals.
 */
#ifndef PLAIT_TEST_PP_SIM_H
#define PLAIT_TEST_PP_SIM_H

#include <stddef.h>
#include <stdint.h>
#include <plait/parallel.h>

typedef struct pp_sim_config {
    int32_t stages;        /* p */
    int32_t chunks;        /* v: model chunks per stage */
    int32_t micro_batches; /* m */
    int64_t t_forward, t_backward;
    int64_t t_weight;      /* BACKWARD_WEIGHT (lists that split the backward) */
    /* per stage, or NULL: a send of stage s waits until the one
     * send_window[s] before it on its link was received, as the executor
     * waits for it (train/step_pipeline.c); 0: never waits */
    const int32_t *send_window;
} pp_sim_config;

typedef enum pp_sim_verdict {
    PP_SIM_OK = 0,
    PP_SIM_BAD_INSTR,   /* malformed or misplaced instruction */
    PP_SIM_DEPENDENCY,  /* data used before it exists, or work done twice */
    PP_SIM_ORDER,       /* a receive found another (chunk, mb) first on its link */
    PP_SIM_DEADLOCK,    /* stages wait on each other forever */
    PP_SIM_UNMATCHED,   /* a receive whose sender finished without sending, or a send never received */
    PP_SIM_INCOMPLETE   /* lists ended with forward/backward work or the step missing */
} pp_sim_verdict;

typedef struct pp_sim_stage {
    int64_t busy;       /* compute time */
    int64_t idle;       /* makespan - busy */
    int64_t recv_wait;  /* time blocked in receives */
    int64_t sync_wait;  /* time blocked in REDUCE_GRADS */
    int64_t finish;     /* clock after the last instruction */
    int64_t peak_live;
    int64_t peak_held;
} pp_sim_stage;

typedef struct pp_sim_result {
    pp_sim_verdict verdict;
    int64_t makespan;
    int32_t n_stages;
    pp_sim_stage *stage; /* n_stages entries (malloc'd; pp_sim_result_free) */
    char message[1024];  /* what went wrong, naming stage, instruction index and peer */
} pp_sim_result;

/* Run the lists lists[s][0 .. lens[s]) of every stage s < cfg->stages.
 * Fills *res (call pp_sim_result_free afterwards, whatever the verdict) and
 * returns res->verdict. */
pp_sim_verdict pp_sim_run(const pp_sim_config *cfg, const plait_instr *const *lists, const size_t *lens,
                          pp_sim_result *res);
void pp_sim_result_free(pp_sim_result *res);

/* "FORWARD", "RECV_ACT", ... */
const char *pp_sim_op_name(int op);
/* "ok", "deadlock", ... */
const char *pp_sim_verdict_name(pp_sim_verdict v);

#endif
