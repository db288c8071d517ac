/*
 * Pipeline schedules as pure per-stage instruction lists (GPipe, 1F1B,
 * interleaved 1F1B), and the closed forms that describe them.
 *
 * Terms: p pipeline stages (ranks), m micro-batches per step, v model chunks
 * per stage ("virtual stages"). Model chunk c of stage s is virtual stage
 * k = c*p + s of V = v*p; in model order the activation of micro-batch j flows
 * k = 0, 1, ..., V-1, so the last stage's chunk c feeds stage 0's chunk c+1
 * (wrap-around), and gradients flow back the same way.
 *
 * How every list is built. Each stage runs the same two orders of its
 * (chunk, micro-batch) pairs:
 *   forward order:  micro-batches are cut into n = max(1, floor(m/p))
 *                   consecutive groups whose sizes differ by at most one,
 *                   larger first (so each holds p..2p-1 micro-batches when
 *                   m >= p, exactly p when p divides m, and the one group
 *                   holds m when m < p); group by group, chunk 0 .. v-1, the
 *                   group's micro-batches in order. GPipe: one group of m.
 *   backward order: the same, with chunks v-1 .. 0.
 * A stage first runs W_s forwards (warm-up), then alternates one forward and
 * one backward while forwards remain, then runs the remaining backwards:
 *   GPipe:                W_s = m*v                       (all forward, then all backward)
 *   1F1B / interleaved:   W_s = min(m*v, (p-s-1) + (v-1)*G)
 *   with G the largest group, G = ceil(m / floor(m/p)) if m >= p, else m.
 *   (G = p when p divides m. A group is never smaller than p when m >= p,
 *   so chunk c+1 of a micro-batch is due no sooner than its activation can
 *   have come round the p stages; the warm-up covers the largest group, or
 *   the last stage would reach BACKWARD(v-1, j) before FORWARD(v-1, j).)
 * Interleaved with v = 1 is exactly 1F1B. GPipe with v >= 2 is the looped
 * ("breadth-first") GPipe. Every FORWARD is preceded by its RECV_ACT (unless
 * it is virtual stage 0) and followed by its SEND_ACT (unless it is virtual
 * stage V-1); every BACKWARD likewise by RECV_GRAD / SEND_GRAD. A receive
 * placed just before its consumer is the latest point it can be, so a stage
 * with blocking receives and asynchronous sends never waits longer than the
 * data dependencies force. The list ends with REDUCE_GRADS, OPTIM_STEP.
 *
 * Peers: RECV_ACT / SEND_GRAD talk to the previous stage (s-1+p) % p and
 * RECV_GRAD / SEND_ACT to the next stage (s+1) % p, for every chunk (the
 * wrap-around is chunk c on stage p-1 <-> chunk c+1 on stage 0).
 *
 * Message order: every stage uses the same forward (backward) order, and
 * that order is unchanged when chunk c is replaced by c+1, so on each
 * directed link the activations (gradients) are sent in exactly the order
 * the receiver receives them. A transport matching by (peer, tag) in FIFO
 * order is therefore enough, with one tag for activations and another for
 * gradients (with p = 2 both neighbours are the same rank, so the two kinds
 * must not share a tag). tests/pp's simulator checks this, the absence of
 * deadlock, every dependency and the bounds below for many (p, m, v).
 *
 * Sends in flight: buffers of a posted send must stay untouched until the
 * send completes. Under a rendezvous transport a send completes only once
 * its receiver posts the receive, which may come after the receiver needs
 * other data from the sender, so an executor may wait for a send only at
 * a point the lists allow: plait's executor (core/train/step_pipeline.c)
 * waits, before posting a send, for the one W sends before it on the same
 * link (its kind: activations or gradients), W = 1 with one chunk a stage
 * (1F1B, zb1, gpipe), p + 1 where a stage of several chunks runs a
 * backward before its last forward (interleaved), and never before the
 * step's end where every forward comes first (looped gpipe, which would
 * deadlock: stage 0 receives its second chunk's inputs only after all its
 * first chunk's forwards). With those waits the lists still never
 * deadlock and every closed form below holds (tests/pp's simulator checks
 * both: test_windowed_sends; a window of 1 under interleaved costs time),
 * and the buffers in flight are a function of the list alone, which the
 * planner counts exactly (core/cost/rank_cost.c).
 *
 * Closed forms (proved for the lists built here by the simulator, with
 * forward time tF and backward time tB per chunk and micro-batch, equal on
 * all stages; they hold for any tF, tB). Let
 *     I = (p-1) + (v-1) * max(0, p-m)        ("idle chunk-steps")
 * Then every stage is busy m*v*(tF+tB), the step takes (m*v + I)*(tF+tB),
 * and every stage is idle (step time minus busy time) exactly I*(tF+tB).
 * The idle share (bubble) is I / (m*v + I):
 *     v = 1 (GPipe, 1F1B), any m:           (p-1) / (m+p-1)
 *     v >= 2, m >= p (any m, not only multiples of p):
 *                                           (p-1) / (v*m+p-1)
 *     v >= 2, m < p:  (v*(p-m)+m-1) / (v*p+m-1)   (a group smaller than p
 *                     must wait for its first micro-batch to come round)
 * Peak live activations on stage s (a (chunk, mb) is live from its FORWARD
 * to its BACKWARD):
 *     GPipe:               m*v
 *     1F1B:                min(p-s, m)
 *     interleaved:         min(p-s + (v-1)*G, m*v)
 *                          (Megatron-LM's order keeps 2(p-s-1) + (v-1)p + 1
 *                          live; with asynchronous sends p-s-1 warm-up
 *                          steps suffice)
 *     zb1:                 min(p, m) (live until BACKWARD_WEIGHT)
 *
 * Zero bubble, ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024):
 * "zb1", one chunk per stage. The backward of each micro-batch is split in
 * two: BACKWARD_INPUT (the gradient of the stage's input, which the previous
 * stage waits for) and BACKWARD_WEIGHT (its parameters' gradients, which
 * nobody waits for). Stage s runs 1F1B's warm-up W_s = min(m, p-s-1)
 * forwards, then for each remaining forward: FORWARD, BACKWARD_INPUT, and
 * the oldest BACKWARD_WEIGHT once more than s of them are pending; then the
 * remaining BACKWARD_INPUTs, each followed by the oldest pending
 * BACKWARD_WEIGHT; then the rest of them. Every stage thus holds up to
 * min(p, m) micro-batches between their FORWARD and their BACKWARD_WEIGHT,
 * as many as 1F1B's first stage: the peak over the pipeline is 1F1B's.
 * Weight gradients are computed in micro-batch order, as 1F1B computes
 * them, so every accumulation sees the same operands in the same order.
 * With forward, input-gradient and weight-gradient passes of times tF, tB,
 * tW, every stage is busy m*(tF+tB+tW) and idle
 *     (p-1) * max(tF, tB, tF+tB-tW)                  when m >= p,
 * against 1F1B's (p-1)*(tF+tB+tW); with tF = tB = tW = t (the paper's
 * assumption), for any m, idle I*t with
 *     I = (p-1) + max(0, p-m)        bubble I / (3m + I):
 *     m >= p:  (p-1)/(3m+p-1)        m < p:  (2p-m-1)/(2m+2p-1)
 * (a third of 1F1B's idle time when m >= p). The simulator checks both.
 *
 * Everything here is pure: no I/O, no globals, no allocation; thread-safe.
 */
#ifndef PLAIT_PP_SCHEDULE_H
#define PLAIT_PP_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>
#include <plait/parallel.h>

typedef enum pp_schedule_kind {
    PP_SCHEDULE_GPIPE = 0,
    PP_SCHEDULE_1F1B = 1,
    PP_SCHEDULE_INTERLEAVED = 2,
    PP_SCHEDULE_ZB1 = 3 /* ZB-H1: backward split into input and weight gradients */
} pp_schedule_kind;

/* 1 if the kind's lists split each backward (BACKWARD_INPUT, BACKWARD_WEIGHT). */
static inline int pp_schedule_splits_backward(pp_schedule_kind kind) { return kind == PP_SCHEDULE_ZB1; }

/* Upper limits accepted by the builders (far beyond any sensible run). */
#define PP_MAX_STAGES 4096
#define PP_MAX_CHUNKS 64
#define PP_MAX_MICRO_BATCHES (1 << 20)

/* "gpipe", "1f1b", "interleaved", "zb1"; "?" for an unknown kind. */
const char *pp_schedule_name(pp_schedule_kind kind);
/* Parse a schedule name; returns 0 and sets *kind, or -1 if unknown. */
int pp_schedule_parse(const char *name, pp_schedule_kind *kind);

/* Check (kind, p, stage, m, v): p >= 1, 0 <= stage < p, m >= 1, v >= 1,
 * 1F1B and zb1 need v = 1, v >= 2 needs p >= 2 (a chunk never sends to itself),
 * sizes within the PP_MAX_* limits. Returns PLAIT_OK, or
 * PLAIT_ERR_INVALID_ARG with a message in err (may be NULL; err_len bytes,
 * always terminated). */
plait_status pp_schedule_check(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m,
                               int32_t v, char *err, size_t err_len);

/* Exact number of instructions of stage `stage`'s list (0 if the arguments
 * fail pp_schedule_check). */
size_t pp_schedule_length(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v);

/* Warm-up forwards W_s of the stage (see above); 0 for invalid arguments. */
int64_t pp_schedule_warmup(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v);

/* Build stage `stage`'s instruction list into out[0 .. *n). Returns
 * PLAIT_OK; PLAIT_ERR_INVALID_ARG for arguments pp_schedule_check refuses;
 * PLAIT_ERR_NO_MEMORY when cap < pp_schedule_length() (then *n is set to the
 * needed length and out is untouched; out may be NULL to ask the length).
 * `mb` in the instructions is the local micro-batch index 0..m-1; `chunk` is
 * the stage's model chunk 0..v-1; REDUCE_GRADS and OPTIM_STEP carry mb = -1. */
plait_status pp_schedule_build(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m,
                               int32_t v, plait_instr *out, size_t cap, size_t *n, char *err,
                               size_t err_len);

/* I = (p-1) + (v-1)*max(0, p-m): each stage's idle time in units of one
 * chunk's (tF + tB). Same on every stage. 0 for invalid arguments.
 * zb1: I = (p-1) + max(0, p-m) in units of one pass, the forward, the
 * input gradient and the weight gradient each taking that long. */
int64_t pp_schedule_idle_steps(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v);
/* The bubble I / (m*v + I) in [0, 1) (zb1: I / (3m + I)); 0 for invalid
 * arguments. */
double pp_schedule_bubble(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v);
/* The bubble formula as text for the chosen case, e.g. "(p-1)/(m+p-1)". */
const char *pp_schedule_bubble_formula(pp_schedule_kind kind, int32_t p, int32_t m, int32_t v);
/* Peak live activations ((chunk, mb) pairs between FORWARD and BACKWARD)
 * on stage `stage`; 0 for invalid arguments. */
int64_t pp_schedule_peak_live(pp_schedule_kind kind, int32_t p, int32_t stage, int32_t m, int32_t v);

#endif
