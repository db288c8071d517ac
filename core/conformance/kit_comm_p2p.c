/* The point-to-point checks of `plait plugin test` (see kit_comm.h). Each
 * message carries its sequence number and sender in its first 8 bytes and a
 * pattern after them, so a receiver tells a lost, reordered or altered
 * message apart. Tags are distinct per check, so a check that fails with
 * requests pending cannot feed the next one. */
#include "conformance/kit_comm.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commstate/comm_watchdog.h"
#include "runtime/clock.h"

void kit_fail(kit_outcome *o, const char *rule, const char *fmt, ...) {
    if (o->verdict == KIT_FAIL) return;
    o->verdict = KIT_FAIL;
    snprintf(o->rule, sizeof o->rule, "%s", rule);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->why, sizeof o->why, fmt, ap);
    va_end(ap);
}

static uint8_t pattern(int src, uint32_t tag, uint32_t seq, size_t i) {
    return (uint8_t)(src * 31 + tag * 7 + seq * 13 + i * 3 + 1);
}

/* Fill a message: seq and sender first (when it has room), then the pattern. */
static void fill(uint8_t *buf, size_t bytes, int src, uint32_t tag, uint32_t seq) {
    for (size_t i = 0; i < bytes; i++) buf[i] = pattern(src, tag, seq, i);
    if (bytes >= 8) {
        uint32_t head[2] = {seq, (uint32_t)src};
        memcpy(buf, head, sizeof head);
    }
}

/* 0 if buf holds message `seq` of `src` (length checked by the caller). */
static int intact(const uint8_t *buf, size_t bytes, int src, uint32_t tag, uint32_t seq) {
    for (size_t i = bytes >= 8 ? 8 : 0; i < bytes; i++)
        if (buf[i] != pattern(src, tag, seq, i)) return -1;
    return 0;
}

static uint32_t seq_of(const uint8_t *buf) {
    uint32_t s;
    memcpy(&s, buf, sizeof s);
    return s;
}

static void watch(const kit_p2p *k, const char *fn, int peer, double timeout_s) {
    plait_watched_call c = {.ops = k->ops, .fn = fn, .rule = timeout_s > 0 ? "timeout" : "progress",
                            .comm_name = "plugin test", .peer = peer, .timeout_s = timeout_s,
                            .limit_s = plait_watchdog_limit(timeout_s > 0 ? timeout_s : k->timeout_s)};
    plait_watchdog_enter(&c);
}

plait_status kit_post(kit_p2p *k, int is_send, void *buf, size_t bytes, int peer, uint32_t tag, void **req) {
    plait_buffer b = {.ptr = buf, .bytes = bytes, .kind = PLAIT_MEM_HOST, .device = -1};
    *req = NULL;
    watch(k, is_send ? "isend" : "irecv", peer, 0);
    plait_status st = is_send ? k->ops->isend(k->comm, &b, peer, tag, NULL, req)
                              : k->ops->irecv(k->comm, &b, peer, tag, NULL, req);
    plait_watchdog_leave();
    return st;
}

plait_status kit_wait(kit_p2p *k, void *req, double timeout_s, size_t *bytes) {
    watch(k, "wait", -1, timeout_s);
    plait_status st = k->ops->wait(k->comm, req, timeout_s, bytes);
    plait_watchdog_leave();
    return st;
}

plait_status kit_test(kit_p2p *k, void *req, int *done, size_t *bytes) {
    watch(k, "test", -1, 0);
    plait_status st = k->ops->test(k->comm, req, done, bytes);
    plait_watchdog_leave();
    return st;
}


/* wait() with what is left until `deadline` (at least a millisecond). */
static plait_status wait_until(kit_p2p *k, void *req, double deadline, size_t *bytes) {
    double left = deadline - plait_clock_now();
    return kit_wait(k, req, left > 1e-3 ? left : 1e-3, bytes);
}

static int next_rank(const kit_p2p *k) { return (k->rank + 1) % k->size; }
static int prev_rank(const kit_p2p *k) { return (k->rank + k->size - 1) % k->size; }

/* ---- order ---------------------------------------------------------------- */

#define ORDER_K 8
#define ORDER_TAG_A 0x10u
#define ORDER_TAG_B 0x11u
static size_t order_len(int tag_b, uint32_t s) { return 8 + 24 * (tag_b ? ORDER_K - 1 - s : s); }

/* Receives of one (peer, tag) after waiting: classify lost before reordered. */
static void judge_stream(kit_p2p *k, kit_outcome *o, int peer, uint32_t tag, uint8_t **bufs, const size_t *got,
                         const plait_status *st) {
    int tag_b = tag == ORDER_TAG_B, have[ORDER_K] = {0}, received = 0;
    for (uint32_t s = 0; s < ORDER_K; s++) {
        if (st[s] != PLAIT_OK || got[s] < 8) continue;
        uint32_t q = seq_of(bufs[s]);
        if (q < ORDER_K && !have[q]) received++;
        if (q < ORDER_K) have[q] = 1;
    }
    if (received < ORDER_K) {
        int first = 0;
        while (first < ORDER_K && have[first]) first++;
        kit_fail(o, "delivery", "rank %d: message #%d of %d that rank %d sent on tag %u never arrived within %g s "
                 "(%d of %d received)", k->rank, first, ORDER_K, peer, tag, k->timeout_s, received, ORDER_K);
        return;
    }
    for (uint32_t s = 0; s < ORDER_K; s++) {
        uint32_t q = seq_of(bufs[s]);
        if (q != s) {
            kit_fail(o, "order", "rank %d: receive #%u from rank %d on tag %u got message #%u: messages of one "
                     "(sender, receiver, tag) were matched out of posting order", k->rank, s, peer, tag, q);
            return;
        }
        if (got[s] != order_len(tag_b, s) || intact(bufs[s], got[s], peer, tag, s))
            kit_fail(o, "delivery", "rank %d: message #%u from rank %d on tag %u arrived altered (%zu bytes, %zu "
                     "sent)", k->rank, s, peer, tag, got[s], order_len(tag_b, s));
    }
}

void kit_check_order(kit_p2p *k, kit_outcome *o) {
    int n = k->size;
    size_t per = (size_t)n * 2 * ORDER_K;
    uint8_t **rbuf = calloc(per, sizeof *rbuf), **sbuf = calloc(per, sizeof *sbuf);
    void **rreq = calloc(per, sizeof *rreq), **sreq = calloc(per, sizeof *sreq);
    size_t *got = calloc(per, sizeof *got);
    plait_status *rst = calloc(per, sizeof *rst);
    if (!rbuf || !sbuf || !rreq || !sreq || !got || !rst) {
        kit_fail(o, "setup", "rank %d: out of memory", k->rank);
        goto out;
    }
    /* slot of (peer, tag, seq) */
#define SLOT(p, b, s) (((size_t)(p) * 2 + (size_t)(b)) * ORDER_K + (s))
    plait_status st = PLAIT_OK;
    /* receives: tag B before tag A, so matching cannot rely on posting across tags */
    for (int p = 0; p < n && st == PLAIT_OK; p++)
        for (int b = 1; b >= 0 && p != k->rank && st == PLAIT_OK; b--)
            for (uint32_t s = 0; s < ORDER_K && st == PLAIT_OK; s++) {
                size_t i = SLOT(p, b, s);
                rbuf[i] = malloc(8 + 24 * ORDER_K);
                st = rbuf[i] ? kit_post(k, 0, rbuf[i], 8 + 24 * ORDER_K, p, b ? ORDER_TAG_B : ORDER_TAG_A, &rreq[i])
                             : PLAIT_ERR_NO_MEMORY;
            }
    for (uint32_t s = 0; s < ORDER_K && st == PLAIT_OK; s++)
        for (int p = 0; p < n && st == PLAIT_OK; p++)
            for (int b = 0; b < 2 && p != k->rank && st == PLAIT_OK; b++) {
                size_t i = SLOT(p, b, s), len = order_len(b, s);
                uint32_t tag = b ? ORDER_TAG_B : ORDER_TAG_A;
                sbuf[i] = malloc(len);
                if (!sbuf[i]) st = PLAIT_ERR_NO_MEMORY;
                else {
                    fill(sbuf[i], len, k->rank, tag, s);
                    st = kit_post(k, 1, sbuf[i], len, p, tag, &sreq[i]);
                }
            }
    if (st != PLAIT_OK) {
        kit_fail(o, "order", "rank %d: posting a message failed: %s", k->rank, plait_last_error());
        goto out;
    }
    double deadline = plait_clock_now() + k->timeout_s;
    for (size_t i = 0; i < per; i++)
        if (rreq[i]) {
            rst[i] = wait_until(k, rreq[i], deadline, &got[i]);
            if (rst[i] != PLAIT_ERR_TIMEOUT) rreq[i] = NULL;
            if (rst[i] != PLAIT_OK && rst[i] != PLAIT_ERR_TIMEOUT)
                kit_fail(o, "delivery", "rank %d: a receive failed: %s", k->rank, plait_last_error());
        }
    for (int p = 0; p < n; p++)
        for (int b = 0; b < 2 && p != k->rank; b++)
            judge_stream(k, o, p, b ? ORDER_TAG_B : ORDER_TAG_A, &rbuf[SLOT(p, b, 0)], &got[SLOT(p, b, 0)],
                         &rst[SLOT(p, b, 0)]);
    for (size_t i = 0; i < per; i++)
        if (sreq[i]) {
            plait_status s2 = wait_until(k, sreq[i], deadline, NULL);
            if (s2 != PLAIT_ERR_TIMEOUT) sreq[i] = NULL;
            if (s2 != PLAIT_OK)
                kit_fail(o, "delivery", "rank %d: a send did not complete: %s", k->rank, plait_last_error());
        }
#undef SLOT
    if (o->verdict == KIT_PASS)
        snprintf(o->why, sizeof o->why, "%d messages per peer on 2 tags, 8..%d bytes", 2 * ORDER_K,
                 8 + 24 * (ORDER_K - 1));
out:
    /* buffers of requests still pending stay allocated: the plugin may still write into them */
    for (size_t i = 0; rbuf && i < per; i++)
        if (!rreq || !rreq[i]) free(rbuf[i]);
    for (size_t i = 0; sbuf && i < per; i++)
        if (!sreq || !sreq[i]) free(sbuf[i]);
    free(rbuf);
    free(sbuf);
    free(rreq);
    free(sreq);
    free(got);
    free(rst);
}

/* ---- one message each way around the ring -------------------------------- */

/* Send `n` messages to the next rank and receive `n` from the previous one:
 * sizes[i] bytes on tags[i], receive buffers of caps[i] bytes, receives posted
 * in reverse order when `reverse` (distinct tags only: on one tag, posting
 * order is matching order). Checks lengths and contents; `rule` names a
 * mismatch. */
static void ring_exchange(kit_p2p *k, kit_outcome *o, const char *rule, int n, const uint32_t *tags,
                          const size_t *sizes, const size_t *caps, int reverse) {
    uint8_t *sb[8] = {0}, *rb[8] = {0};
    void *sr[8] = {0}, *rr[8] = {0};
    plait_status st = PLAIT_OK;
    for (int j = 0; j < n && st == PLAIT_OK; j++) {
        int i = reverse ? n - 1 - j : j;
        rb[i] = malloc(caps[i] ? caps[i] : 1);
        st = rb[i] ? kit_post(k, 0, rb[i], caps[i], prev_rank(k), tags[i], &rr[i]) : PLAIT_ERR_NO_MEMORY;
    }
    for (int i = 0; i < n && st == PLAIT_OK; i++) {
        sb[i] = malloc(sizes[i] ? sizes[i] : 1);
        if (sb[i]) fill(sb[i], sizes[i], k->rank, tags[i], (uint32_t)i);
        st = sb[i] ? kit_post(k, 1, sb[i], sizes[i], next_rank(k), tags[i], &sr[i]) : PLAIT_ERR_NO_MEMORY;
    }
    if (st != PLAIT_OK) kit_fail(o, rule, "rank %d: posting failed: %s", k->rank, plait_last_error());
    double deadline = plait_clock_now() + k->timeout_s;
    for (int i = 0; i < n; i++) {
        if (!rr[i]) continue;
        size_t got = 0;
        plait_status w = wait_until(k, rr[i], deadline, &got);
        if (w != PLAIT_ERR_TIMEOUT) rr[i] = NULL;
        if (w == PLAIT_ERR_TIMEOUT)
            kit_fail(o, rule, "rank %d: the %zu-byte message on tag %u from rank %d never arrived within %g s",
                     k->rank, sizes[i], tags[i], prev_rank(k), k->timeout_s);
        else if (w != PLAIT_OK)
            kit_fail(o, rule, "rank %d: receiving %zu bytes on tag %u from rank %d failed: %s", k->rank, sizes[i],
                     tags[i], prev_rank(k), plait_last_error());
        else if (got != sizes[i] || (got >= 8 && seq_of(rb[i]) != (uint32_t)i) ||
                 intact(rb[i], got, prev_rank(k), tags[i], (uint32_t)i))
            kit_fail(o, rule, "rank %d: the receive on tag %u from rank %d got %zu bytes that are not the %zu-byte "
                     "message sent on that tag", k->rank, tags[i], prev_rank(k), got, sizes[i]);
    }
    for (int i = 0; i < n; i++) {
        if (!sr[i]) continue;
        plait_status w = wait_until(k, sr[i], deadline, NULL);
        if (w != PLAIT_ERR_TIMEOUT) sr[i] = NULL;
        if (w != PLAIT_OK)
            kit_fail(o, rule, "rank %d: the %zu-byte send on tag %u to rank %d did not complete: %s", k->rank,
                     sizes[i], tags[i], next_rank(k), plait_last_error());
    }
    for (int i = 0; i < n; i++) {
        if (!rr[i]) free(rb[i]);
        if (!sr[i]) free(sb[i]);
    }
}

void kit_check_tags(kit_p2p *k, kit_outcome *o) {
    static const uint32_t tags[] = {0u, 1u, 0x7fffffffu, 0x80000000u, 0xfffffffeu, 0xffffffffu};
    size_t sizes[6], caps[6];
    for (int i = 0; i < 6; i++) sizes[i] = caps[i] = 16 + (size_t)i * 8;
    ring_exchange(k, o, "tags", 6, tags, sizes, caps, 1);
    if (o->verdict == KIT_PASS) snprintf(o->why, sizeof o->why, "tags 0, 1, 2^31-1, 2^31, 2^32-2, 2^32-1");
}

void kit_check_zero(kit_p2p *k, kit_outcome *o) {
    static const uint32_t tags[] = {0x20u, 0x20u, 0x20u, 0x20u, 0x21u};
    static const size_t sizes[] = {16, 0, 16, 0, 0}, caps[] = {16, 16, 16, 16, 0};
    ring_exchange(k, o, "zero", 5, tags, sizes, caps, 0);
    if (o->verdict == KIT_PASS) snprintf(o->why, sizeof o->why, "0-byte messages between others on one tag");
}

void kit_check_posting(kit_p2p *k, kit_outcome *o) {
    /* sends first; the receives are posted only after every rank's sends */
    size_t sizes[2] = {64, k->large_bytes};
    uint32_t tags[2] = {0x30u, 0x31u};
    uint8_t *sb[2] = {0}, *rb[2] = {0};
    void *sr[2] = {0}, *rr[2] = {0};
    plait_status st = PLAIT_OK;
    for (int i = 0; i < 2 && st == PLAIT_OK; i++) {
        sb[i] = malloc(sizes[i]);
        rb[i] = malloc(sizes[i]);
        if (!sb[i] || !rb[i]) st = PLAIT_ERR_NO_MEMORY;
        else {
            fill(sb[i], sizes[i], k->rank, tags[i], (uint32_t)i);
            st = kit_post(k, 1, sb[i], sizes[i], next_rank(k), tags[i], &sr[i]);
        }
    }
    if (st == PLAIT_OK) st = k->bs->barrier(k->bs->ctx);
    for (int i = 0; i < 2 && st == PLAIT_OK; i++) st = kit_post(k, 0, rb[i], sizes[i], prev_rank(k), tags[i], &rr[i]);
    if (st != PLAIT_OK) kit_fail(o, "posting", "rank %d: posting failed: %s", k->rank, plait_last_error());
    double deadline = plait_clock_now() + k->timeout_s;
    for (int i = 0; i < 2; i++) {
        if (!rr[i]) continue;
        size_t got = 0;
        plait_status w = wait_until(k, rr[i], deadline, &got);
        if (w != PLAIT_ERR_TIMEOUT) rr[i] = NULL;
        if (w != PLAIT_OK)
            kit_fail(o, i ? "delivery" : "posting", "rank %d: the %zu-byte message from rank %d, received after "
                     "it was sent, did not arrive: %s", k->rank, sizes[i], prev_rank(k),
                     w == PLAIT_ERR_TIMEOUT ? "timed out" : plait_last_error());
        else if (got != sizes[i] || intact(rb[i], got, prev_rank(k), tags[i], (uint32_t)i))
            kit_fail(o, "delivery", "rank %d: the %zu-byte message from rank %d arrived altered (%zu bytes)",
                     k->rank, sizes[i], prev_rank(k), got);
    }
    for (int i = 0; i < 2; i++) {
        if (!sr[i]) continue;
        plait_status w = wait_until(k, sr[i], deadline, NULL);
        if (w != PLAIT_ERR_TIMEOUT) sr[i] = NULL;
        if (w != PLAIT_OK)
            kit_fail(o, "posting", "rank %d: the %zu-byte send to rank %d did not complete once its receive was "
                     "posted: %s", k->rank, sizes[i], next_rank(k), plait_last_error());
    }
    for (int i = 0; i < 2; i++) {
        if (!rr[i]) free(rb[i]);
        if (!sr[i]) free(sb[i]);
    }
    if (o->verdict == KIT_PASS)
        snprintf(o->why, sizeof o->why, "64 B and %zu B sent before their receives were posted", sizes[1]);
}

void kit_check_truncation(kit_p2p *k, kit_outcome *o) {
    /* a 200-byte message into a 100-byte receive inside guard bytes, then a normal one */
    enum { GUARD = 64, CAP = 100, LONG = 200 };
    /* one block for every buffer: kept if a request is left pending */
    uint8_t *rb = malloc(GUARD + CAP + GUARD + LONG + 32);
    if (!rb) {
        kit_fail(o, "setup", "rank %d: out of memory", k->rank);
        return;
    }
    uint8_t *sb = rb + GUARD + CAP + GUARD, *rb2 = sb + LONG, *sb2 = rb2 + 16;
    memset(rb, 0xa5, GUARD + CAP + GUARD);
    fill(sb, LONG, k->rank, 0x40u, 0);
    fill(sb2, 16, k->rank, 0x40u, 1);
    void *r1 = NULL, *r2 = NULL, *s1 = NULL, *s2 = NULL;
    plait_status st = kit_post(k, 0, rb + GUARD, CAP, prev_rank(k), 0x40u, &r1);
    if (st == PLAIT_OK) st = kit_post(k, 0, rb2, 16, prev_rank(k), 0x40u, &r2);
    if (st == PLAIT_OK) st = kit_post(k, 1, sb, LONG, next_rank(k), 0x40u, &s1);
    if (st == PLAIT_OK) st = kit_post(k, 1, sb2, 16, next_rank(k), 0x40u, &s2);
    if (st != PLAIT_OK) kit_fail(o, "truncation", "rank %d: posting failed: %s", k->rank, plait_last_error());
    double deadline = plait_clock_now() + k->timeout_s;
    size_t got = 0;
    plait_status w = r1 ? wait_until(k, r1, deadline, &got) : PLAIT_ERR_INTERNAL;
    if (w == PLAIT_ERR_TIMEOUT)
        kit_fail(o, "truncation", "rank %d: the receive too small for its %d-byte message never completed", k->rank,
                 LONG);
    else if (r1 && w == PLAIT_OK)
        kit_fail(o, "truncation", "rank %d: a %d-byte message into a %d-byte receive completed without an error "
                 "(%zu bytes reported)", k->rank, LONG, CAP, got);
    for (int i = 0; i < GUARD; i++)
        if (rb[i] != 0xa5 || rb[GUARD + CAP + i] != 0xa5) {
            kit_fail(o, "truncation", "rank %d: a %d-byte message overran its %d-byte receive buffer", k->rank, LONG,
                     CAP);
            break;
        }
    w = r2 ? wait_until(k, r2, deadline, &got) : PLAIT_ERR_INTERNAL;
    if (r2 && w != PLAIT_OK)
        kit_fail(o, "truncation", "rank %d: the message after the truncated one did not arrive: %s", k->rank,
                 w == PLAIT_ERR_TIMEOUT ? "timed out" : plait_last_error());
    else if (r2 && (got != 16 || intact(rb2, got, prev_rank(k), 0x40u, 1)))
        kit_fail(o, "truncation", "rank %d: the message after the truncated one arrived altered", k->rank);
    /* the oversize send may complete or fail, but must end */
    plait_status ws1 = s1 ? wait_until(k, s1, deadline, NULL) : PLAIT_OK;
    plait_status ws2 = s2 ? wait_until(k, s2, deadline, NULL) : PLAIT_OK;
    if (ws1 == PLAIT_ERR_TIMEOUT || ws2 == PLAIT_ERR_TIMEOUT)
        kit_fail(o, "truncation", "rank %d: a send around the truncated message never completed", k->rank);
    if (o->verdict == KIT_FAIL) return; /* a request may be pending: keep its memory */
    free(rb);
    if (o->verdict == KIT_PASS)
        snprintf(o->why, sizeof o->why, "%d B into %d B failed cleanly; the next message arrived", LONG, CAP);
}

void kit_check_progress(kit_p2p *k, kit_outcome *o) {
    size_t bytes = k->large_bytes < ((size_t)4 << 20) ? k->large_bytes : (size_t)4 << 20;
    uint8_t *sb = malloc(bytes), *rb = malloc(bytes);
    void *sr = NULL, *rr = NULL;
    if (!sb || !rb) {
        free(sb);
        free(rb);
        kit_fail(o, "setup", "rank %d: out of memory", k->rank);
        return;
    }
    fill(sb, bytes, k->rank, 0x50u, 0);
    plait_status st = kit_post(k, 0, rb, bytes, prev_rank(k), 0x50u, &rr);
    if (st == PLAIT_OK) st = kit_post(k, 1, sb, bytes, next_rank(k), 0x50u, &sr);
    if (st != PLAIT_OK) {
        kit_fail(o, "progress", "rank %d: posting failed: %s", k->rank, plait_last_error());
        return; /* buffers stay: a request may be pending */
    }
    /* only test(), a millisecond apart, as the core does while it computes */
    double deadline = plait_clock_now() + k->timeout_s;
    int rdone = 0, sdone = 0;
    size_t got = 0;
    while ((!rdone || !sdone) && plait_clock_now() < deadline) {
        if (!rdone) {
            st = kit_test(k, rr, &rdone, &got);
            if (st != PLAIT_OK) break;
        }
        if (!sdone) {
            st = kit_test(k, sr, &sdone, NULL);
            if (st != PLAIT_OK) break;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (st != PLAIT_OK)
        kit_fail(o, "progress", "rank %d: test() failed: %s", k->rank, plait_last_error());
    else if (!rdone || !sdone)
        kit_fail(o, "progress", "rank %d: a %zu-byte %s still pending after %g s of test() calls: without the "
                 "flag PLAIT_COMM_ASYNC_PROGRESS, test() itself must move data", k->rank, bytes,
                 !rdone ? "receive was" : "send was", k->timeout_s);
    else if (got != bytes || intact(rb, got, prev_rank(k), 0x50u, 0))
        kit_fail(o, "delivery", "rank %d: the %zu-byte message arrived altered", k->rank, bytes);
    if (st != PLAIT_OK || !rdone || !sdone) {
        /* finish with wait() so the next checks start clean; keep buffers if that fails too */
        if ((rdone || wait_until(k, rr, plait_clock_now() + k->timeout_s, NULL) != PLAIT_ERR_TIMEOUT) &&
            (sdone || wait_until(k, sr, plait_clock_now() + k->timeout_s, NULL) != PLAIT_ERR_TIMEOUT)) {
            free(sb);
            free(rb);
        }
        return;
    }
    free(sb);
    free(rb);
    /* a message that arrived altered keeps its failure's words */
    if (o->verdict != KIT_FAIL) snprintf(o->why, sizeof o->why, "%zu B each way completed by test() alone", bytes);
}

void kit_check_timeout(kit_p2p *k, kit_outcome *o) {
    uint8_t *rb = malloc(64), *sb = rb + 32; /* kept if a request is left pending */
    if (!rb) {
        kit_fail(o, "setup", "rank %d: out of memory", k->rank);
        return;
    }
    fill(sb, 32, k->rank, 0x60u, 0);
    void *rr = NULL, *sr = NULL;
    plait_status st = kit_post(k, 0, rb, 32, prev_rank(k), 0x60u, &rr);
    if (st != PLAIT_OK) {
        kit_fail(o, "timeout", "rank %d: posting a receive failed: %s", k->rank, plait_last_error());
        return;
    }
    double t0 = plait_clock_now();
    plait_status w = kit_wait(k, rr, 0.2, NULL);
    double took = plait_clock_now() - t0;
    if (w != PLAIT_ERR_TIMEOUT) {
        kit_fail(o, "timeout", "rank %d: wait(0.2 s) on a receive nobody had sent returned '%s' (%s), "
                 "not PLAIT_ERR_TIMEOUT", k->rank, plait_status_name(w), w == PLAIT_OK ? "" : plait_last_error());
        rr = NULL;
    } else if (took > 0.2 + 2.0) {
        kit_fail(o, "timeout", "rank %d: wait(0.2 s) returned after %.1f s", k->rank, took);
    }
    /* now the message is sent; the same request must complete */
    st = k->bs->barrier(k->bs->ctx);
    if (st == PLAIT_OK) st = kit_post(k, 1, sb, 32, next_rank(k), 0x60u, &sr);
    double deadline = plait_clock_now() + k->timeout_s;
    size_t got = 0;
    if (rr) {
        w = wait_until(k, rr, deadline, &got);
        if (w != PLAIT_OK)
            kit_fail(o, "timeout", "rank %d: after a timed-out wait the receive did not complete once the message "
                     "was sent: %s", k->rank, w == PLAIT_ERR_TIMEOUT ? "timed out again" : plait_last_error());
        else if (got != 32 || intact(rb, got, prev_rank(k), 0x60u, 0))
            kit_fail(o, "delivery", "rank %d: the message after a timed-out wait arrived altered", k->rank);
    }
    if (sr && wait_until(k, sr, deadline, NULL) != PLAIT_OK)
        kit_fail(o, "timeout", "rank %d: a send did not complete: %s", k->rank, plait_last_error());
    if (o->verdict == KIT_FAIL) return; /* a request may be pending: keep its memory */
    free(rb);
    snprintf(o->why, sizeof o->why, "wait(0.2 s) timed out in %.2f s; request kept", took);
}
